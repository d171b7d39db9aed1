// The decode operators (decode.h).
//
// indexer_topk_paged runs the unfused pipeline over the paged cache, batch
// by batch of requests: the scoring kernel with PagedKeys (keys and scales
// read through each request's block-table row) writes a bounded buffer of
// scores, and the standalone top-k selects every row from it; few one-token
// rows select in the fused way instead (select.cuh: the scoring kernel
// counts the score keys' top bits, a select kernel takes the rows' top K). Rows are the
// requests' rows padded to whole query blocks (decode/plan.h), so a prepare
// kernel writes each launch row's range [0, len) and, where padding rows
// exist, its head weights (one-token requests without padding need none:
// the kernels read the lengths as the rows' ends); a map kernel writes the real rows' results
// (positions or physical slots). Lengths are read on the device: no host
// synchronisation, so the whole call can be captured in a CUDA graph.
//
// merge_topk: one CTA per row finds the K-th largest (score key, index) pair
// over the parts' non-empty entries with the block radix select on 64-bit
// keys (selection/device/radix.cuh: 8-bit digits from the top, stopping once
// the top K take a digit's bin whole), takes every entry at or above the
// cut, and sorts the K it took. A row of up to 20480 entries holds them in
// shared memory, read from global memory once.
#include "decode/decode.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/cuda_status.h"
#include "common/device_limits.h"
#include "common/keys.h"
#include "common/launch_cache.h"
#include "common/paged.h"
#include "common/warp.h"
#include "common/workspace.h"
#include "decode/bar_select.cuh"
#include "decode/plan.h"
#include "decode/select.cuh"
#include "decode/stream_select.cuh"
#include "scoring/launch.cuh"
#include "selection/device/radix.cuh"
#include "selection/topk/topk.h"

namespace dsa::decode {
namespace {

Status cuda_error(cudaError_t err, const char* op, const char* what) {
  return cuda_status(err, std::string(op) + ": " + what);
}

// The range starts of plans that read lengths as ranges (PagedPlan::
// ranges_from_lengths): every row starts at position 0.
__device__ const std::int32_t kZeroStarts[kZeroStartRows] = {};

struct PrepareArgs {
  const std::int32_t* context_lens;
  const float* w;
  std::int64_t batch;
  std::int32_t next_n;
  std::int32_t heads;
  std::int32_t rows_per_request;
  bool lens_per_token;
  std::int32_t max_context;  // 0 when the cache has no blocks
  std::int32_t* ks;          // [batch * rows_per_request]
  std::int32_t* ke;
  float* padded_w;           // [batch * rows_per_request, heads] or null
};

// Row (b, j)'s length, clamped to [0, max_context] (contract: lengths past it
// are rejected when range checking is on, clamped otherwise).
__device__ __forceinline__ std::int32_t row_length(const PrepareArgs& a, std::int64_t b, std::int32_t j) {
  return static_cast<std::int32_t>(min(paged_row_length(a.context_lens, a.lens_per_token, b, a.next_n, j),
                                       static_cast<std::int64_t>(a.max_context)));
}

// One thread per launch row: its range; with padded_w, one per (row, head)
// weight as well.
__global__ void paged_prepare_kernel(const PrepareArgs a) {
  const std::int64_t rows = a.batch * a.rows_per_request;
  const std::int64_t items = a.padded_w != nullptr ? rows * a.heads : rows;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < items;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (i < rows) {
      const std::int64_t b = i / a.rows_per_request;
      const auto j = static_cast<std::int32_t>(i - b * a.rows_per_request);
      a.ks[i] = 0;
      a.ke[i] = j < a.next_n ? row_length(a, b, j) : 0;
    }
    if (a.padded_w != nullptr) {
      const std::int64_t row = i / a.heads, b = row / a.rows_per_request;
      const auto j = static_cast<std::int32_t>(row - b * a.rows_per_request);
      a.padded_w[i] = j < a.next_n ? a.w[(b * a.next_n + j) * a.heads + (i - row * a.heads)] : 0.0f;
    }
  }
}

struct MapArgs {
  const std::int32_t* rows_indices;  // [requests * rows_per_request, K]: the top-k's output
  const float* rows_values;          // or null
  const std::int32_t* block_table;   // the batch's first request's row
  std::int64_t table_stride;
  std::int32_t table_width;
  std::int32_t block_shift;
  std::int64_t requests;
  std::int32_t next_n;
  std::int32_t rows_per_request;
  std::int32_t k;
  bool physical_slots;
  std::int32_t* indices;             // [requests * next_n, K]
  float* values;                     // or null
};

// The real rows' results from the launch rows', positions mapped to
// physical slots when asked (an entry outside the table's width maps to -1:
// only unvalidated input gets there).
__global__ void paged_map_kernel(const MapArgs a) {
  const std::int64_t items = a.requests * a.next_n * a.k;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < items;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / a.k, b = row / a.next_n;
    const std::int64_t from = (b * a.rows_per_request + (row - b * a.next_n)) * a.k + (i - row * a.k);
    std::int32_t index = a.rows_indices[from];
    if (a.physical_slots && index >= 0) {
      const std::int32_t entry = index >> a.block_shift;
      // Slots of a validated cache fit int32 (num_blocks * block_size <= INT32_MAX).
      index = entry < a.table_width
                  ? static_cast<std::int32_t>(
                        (static_cast<std::int64_t>(__ldg(a.block_table + b * a.table_stride + entry)) << a.block_shift) +
                        (index & ((1 << a.block_shift) - 1)))
                  : -1;
    }
    a.indices[i] = index;
    if (a.values != nullptr) a.values[i] = a.rows_values[from];
  }
}

// ----------------------------------------------------------------- merge ---

constexpr int kMergeThreads = 512;

struct MergeArgs {
  const float* values;
  const std::int32_t* indices;
  std::int64_t parts, rows, part_k;
  std::int32_t* out_indices;
  float* out_values;
};

// (score key, inverted index): larger is better, and equal scores rank the
// smaller index first. 0 marks an empty entry (a score key is never 0).
__device__ __forceinline__ std::uint64_t merge_key(float value, std::int32_t index) {
  if (index < 0) return 0;
  return (static_cast<std::uint64_t>(score_key(value)) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(index));
}

// Entry e of row r is slot e % part_k of part e / part_k. Entries number
// fewer than 2^31 (validated), so the division is 32-bit.
__device__ __forceinline__ std::int64_t merge_offset(const MergeArgs& a, std::int64_t r, std::uint32_t e) {
  const auto part_k = static_cast<std::uint32_t>(a.part_k);
  const std::uint32_t p = e / part_k;
  return (static_cast<std::int64_t>(p) * a.rows + r) * a.part_k + (e - p * part_k);
}

// Four CTAs an SM (32 registers a thread): rows of few entries are paced
// by the CTAs' barriers, which more CTAs an SM overlap; two CTAs an SM
// measured slower on them (docs/perf-log.md, D10).
constexpr int kMergeCtasPerSm = 4;

// kCached: the row's keys in dynamic shared memory (merge_caches_entries,
// plan.h).
template <int K, bool kCached>
__global__ void __launch_bounds__(kMergeThreads, kMergeCtasPerSm) merge_kernel(const MergeArgs a) {
  extern __shared__ std::uint64_t cache[];  // [n] when kCached
  __shared__ std::uint64_t keys[K];
  __shared__ std::uint32_t entry[K];  // the taken keys' entries
  __shared__ selection::device::RadixShared<std::uint64_t> radix;
  __shared__ std::uint32_t taken_gt, taken_eq, valid;
  const std::int64_t r = blockIdx.x;
  const auto n = static_cast<std::uint32_t>(a.parts * a.part_k);
  for (int i = threadIdx.x; i < K; i += kMergeThreads) keys[i] = 0;
  if (threadIdx.x == 0) {
    valid = 0;
    taken_gt = 0;
    taken_eq = 0;
  }
  __syncthreads();
  // The parts' entries, read once; kUnroll loads of each array a thread in
  // flight before their keys are formed.
  std::uint32_t mine = 0;
  constexpr int kUnroll = 4;
  const auto part_k = static_cast<std::uint32_t>(a.part_k);
  for (std::int64_t p = 0; p < a.parts; ++p) {
    const std::int64_t row0 = (p * a.rows + r) * a.part_k;
    for (std::uint32_t base = 0; base < part_k; base += kUnroll * kMergeThreads) {
      float v[kUnroll];
      std::int32_t idx[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::uint32_t s = base + u * kMergeThreads + threadIdx.x;
        idx[u] = -1;
        if (s < part_k) {
          v[u] = __ldg(a.values + row0 + s);
          idx[u] = __ldg(a.indices + row0 + s);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::uint32_t s = base + u * kMergeThreads + threadIdx.x;
        if (s < part_k) {
          const std::uint64_t key = merge_key(v[u], idx[u]);
          mine += key != 0;
          if constexpr (kCached) cache[static_cast<std::uint32_t>(p) * part_k + s] = key;
        }
      }
    }
  }
  mine = __reduce_add_sync(kFullWarp, mine);
  if (selection::device::lane_id() == 0) atomicAdd(&valid, mine);
  __syncthreads();
  const auto key_of = [&](std::uint32_t e) -> std::uint64_t {
    if constexpr (kCached) {
      return cache[e];
    } else {
      const std::int64_t at = merge_offset(a, r, e);
      return merge_key(__ldg(a.values + at), __ldg(a.indices + at));
    }
  };
  // The row's non-empty entries as a key set (block_radix_select's visitor).
  const auto entries = [&](auto&& fn) {
    for (std::uint32_t e = threadIdx.x; e < n; e += kMergeThreads) {
      const std::uint64_t key = key_of(e);
      fn(key, key != 0);
    }
  };
  // The top K are the keys >= least, then `ties` of the keys == tied (at
  // most K non-empty entries: all of them).
  std::uint64_t least = 1, tied = 0;
  std::uint32_t ties = 0;
  if (valid > K) {  // the same for every thread
    const selection::device::RadixResult<std::uint64_t> cut =
        selection::device::block_radix_select<true>(entries, K, radix);
    // Not whole_bin: kth_key is the K-th key itself, whose score key is at
    // most score_key(+inf) < 2^32 - 1, so kth_key + 1 does not wrap.
    least = cut.whole_bin ? cut.kth_key : cut.kth_key + 1;
    tied = cut.kth_key;
    ties = cut.whole_bin ? 0u : cut.take_equal;
  }
  // The keys >= least (K - ties of them, or every non-empty entry), then
  // `ties` of the keys equal to the K-th (one, unless a row repeats an
  // index). Empty entries (key 0) are never taken, whatever the cut.
  const std::uint32_t above = K - ties;
  for (std::uint32_t e = threadIdx.x; e < n; e += kMergeThreads) {
    const std::uint64_t key = key_of(e);
    std::uint32_t slot = K;
    if (key != 0 && key >= least) {
      slot = atomicAdd(&taken_gt, 1u);
    } else if (ties != 0 && key == tied) {  // tied != 0: a key of the set
      const std::uint32_t tie = atomicAdd(&taken_eq, 1u);
      if (tie < ties) slot = above + tie;
    }
    if (slot < K) {
      keys[slot] = key;
      entry[slot] = e;
    }
  }
  __syncthreads();
  // Bitonic sort, descending (empty slots, key 0, last).
  for (int size = 2; size <= K; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < K / 2; i += kMergeThreads) {
        const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool descending = (lo & size) == 0;
        if ((keys[lo] < keys[hi]) == descending) {
          const std::uint64_t k = keys[lo];
          keys[lo] = keys[hi];
          keys[hi] = k;
          const std::uint32_t e = entry[lo];
          entry[lo] = entry[hi];
          entry[hi] = e;
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < K; i += kMergeThreads) {
    const bool full = keys[i] != 0;
    a.out_indices[r * K + i] = full ? static_cast<std::int32_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(keys[i]))
                                    : -1;
    if (a.out_values != nullptr) {
      a.out_values[r * K + i] = full ? __ldg(a.values + merge_offset(a, r, entry[i])) : -__int_as_float(0x7F800000);
    }
  }
}

// One K's merge: rows whose entries fit kMergeCacheBytes on the cached
// kernel (merge_caches_entries, plan.h).
template <int K>
Status launch_merge_kernel(const MergeArgs& args, CUstream_st* stream) {
  const auto grid = static_cast<unsigned>(args.rows);
  if (!merge_caches_entries(args.parts, args.part_k)) {
    merge_kernel<K, false><<<grid, kMergeThreads, 0, stream>>>(args);
    return Status::Ok();
  }
  auto kernel = merge_kernel<K, true>;
  int device = 0;
  DeviceLimits limits;
  if (const Status st = LaunchCache::get().current(&device, &limits); !st.ok()) return st;
  const Status st = LaunchCache::get().allow_shared_memory(reinterpret_cast<const void*>(kernel), device,
                                                           kMergeCacheBytes);
  if (!st.ok()) return st;
  const auto cache_bytes = static_cast<std::size_t>(args.parts * args.part_k) * sizeof(std::uint64_t);
  kernel<<<grid, kMergeThreads, cache_bytes, stream>>>(args);
  return Status::Ok();
}

template <int kHeads, class Sink>
Status launch_paged_scoring(const IndexerInputs& in, int columns, const Sink& sink, CUstream_st* stream,
                            const scoring::PagedKeys& keys) {
  switch (columns) {
    case 64: return scoring::launch_scoring<kHeads, Sink, scoring::PagedKeys, 64>(in, nullptr, sink, stream, keys);
    case 128: return scoring::launch_scoring<kHeads, Sink, scoring::PagedKeys, 128>(in, nullptr, sink, stream, keys);
    default: return scoring::launch_scoring<kHeads, Sink, scoring::PagedKeys, 256>(in, nullptr, sink, stream, keys);
  }
}

template <class Sink>
Status launch_paged_scoring(const IndexerInputs& in, int columns, const Sink& sink, CUstream_st* stream,
                            const scoring::PagedKeys& keys) {
  return in.num_heads == 64 ? launch_paged_scoring<64>(in, columns, sink, stream, keys)
                            : launch_paged_scoring<32>(in, columns, sink, stream, keys);
}

// The unfused pipeline over a batch's launch rows: the scores into the
// buffer, then the standalone top-k into `indices` / `values` (the
// output's rows, or the workspace's when the plan maps them).
Status launch_unfused(const PagedPlan& plan, const PagedIndexerTopkParams& p, const IndexerInputs& in,
                      const scoring::PagedKeys& keys, float* scores, std::int32_t* indices, float* values,
                      CUstream_st* stream) {
  Status st = launch_paged_scoring(in, plan.block_columns, scoring::StoreSink{scores, plan.score_stride}, stream, keys);
  if (!st.ok()) return st;
  TopkParams tp;
  tp.scores = scores;
  tp.ks = in.ks;
  tp.ke = in.ke;
  tp.num_rows = in.num_queries;
  tp.num_cols = p.max_context();
  tp.score_stride = plan.score_stride;
  tp.indices = indices;
  tp.values = values;
  tp.options = p.options;
  selection::topk::TopkHooks th;
  th.after_producer = scoring::scoring_launches(in);
  return selection::topk::launch_topk(tp, stream, th);
}

// The bar selection of a batch (bar_select.cuh): the rows' state zeroed
// (and each row's RowFlag written, for tools), the scoring kernel with
// BarFilterSink (launched programmatically: it waits for the zeros before
// its first claim; short rows store their scores over their areas), then
// the standalone top-k over both kinds of row (TopkHooks::entries;
// programmatic too): a short row as the unfused route selects it, a long
// one from its entries. An area holds a whole row, so nothing is repaired.
Status launch_bar_select(const PagedPlan& plan, const PagedIndexerTopkParams& p, const IndexerInputs& in,
                         const scoring::PagedKeys& keys, void* workspace, std::int32_t* indices, float* values,
                         CUstream_st* stream) {
  constexpr const char* kOp = "indexer_topk_paged";
  const PagedWorkspace& w = plan.workspace;
  const std::int64_t rows = in.num_queries;
  auto* state = workspace_piece<std::uint32_t>(workspace, w.bar_state);
  auto* flags = workspace_piece<std::uint32_t>(workspace, w.bar_flags);
  auto* candidates = workspace_piece<std::uint64_t>(workspace, w.bar_candidates);
  if (rows == 0) return Status::Ok();
  const auto stored_below = static_cast<std::int32_t>(plan.bar_stored_below);
  bar_zero_kernel<<<static_cast<unsigned>(rows), kBarZeroThreads, 0, stream>>>(
      BarZeroArgs{state, flags, rows, in.ks, in.ke, in.num_keys, stored_below, in.q});
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error(err, kOp, "zero kernel launch");
  const auto capacity = static_cast<std::uint32_t>(plan.bar_capacity);
  // A short row's scores as floats over its area: two a slot.
  const std::int64_t stride = plan.bar_capacity * static_cast<std::int64_t>(sizeof(std::uint64_t) / sizeof(float));
  const BarFilterSink sink{state + kBarCount * rows,
                           state + kBarFloor * rows,
                           candidates,
                           state + kBarBins * rows,
                           state + kBarTop * rows,
                           state + kBarTotal * rows,
                           state + kBarZoom * rows,
                           state + kBarZoomSub * rows,
                           state + kBarZoomTop * rows,
                           capacity,
                           static_cast<std::uint32_t>(p.options.k),
                           flags,
                           scoring::StoreSink{reinterpret_cast<float*>(candidates), stride}};
  Status st = scoring::launch_scoring<64, BarFilterSink, scoring::PagedKeys, 64>(in, nullptr, sink, stream, keys,
                                                                                /*programmatic=*/true);
  if (!st.ok()) return st;
  TopkParams tp;
  tp.scores = reinterpret_cast<const float*>(candidates);  // the short rows' scores, over their areas
  tp.ks = in.ks;
  tp.ke = in.ke;
  tp.num_rows = rows;
  tp.num_cols = p.max_context();
  tp.score_stride = stride;
  tp.indices = indices;
  tp.values = values;
  tp.options = p.options;
  selection::topk::TopkHooks th;
  th.after_producer = scoring::scoring_launches(in);
  th.entries = selection::topk::EntryRows{state + kBarCount * rows, candidates, plan.bar_capacity,
                                          state + kBarFloor * rows, flags};
  return selection::topk::launch_topk(tp, stream, th);
}

// The fused selection of a batch (select.cuh): its rows' state zeroed, the
// scoring kernel with HistStoreSink, then the select kernel; the last two
// launched programmatically, each starting before the one ahead of it ends.
Status launch_fused_select(const PagedPlan& plan, const IndexerInputs& in, const scoring::PagedKeys& keys,
                           float* scores, std::uint32_t* state, std::uint64_t* candidates, std::int32_t k,
                           std::int32_t* indices, float* values, CUstream_st* stream) {
  constexpr const char* kOp = "indexer_topk_paged";
  select_zero_kernel<<<static_cast<unsigned>(in.num_queries), kZeroThreads, 0, stream>>>(state);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error(err, kOp, "zero kernel launch");
  const Status st = scoring::launch_scoring<64, HistStoreSink, scoring::PagedKeys, 64>(
      in, nullptr, HistStoreSink{{scores, plan.score_stride}, state}, stream, keys, /*programmatic=*/true);
  if (!st.ok()) return st;
  const SelectArgs args{scores,
                        plan.score_stride,
                        in.ks,
                        in.ke,
                        in.num_keys,
                        state,
                        candidates,
                        static_cast<std::uint32_t>(plan.select_capacity),
                        static_cast<std::int32_t>(plan.select_parts),
                        k,
                        indices,
                        values};
  cudaLaunchAttribute attrs[2] = {sm90::programmatic_serialization(), {}};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(in.num_queries * plan.select_parts));
  cfg.blockDim = dim3(kSelectThreads);
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = 1;
  if (plan.select_cluster) {
    auto* const kernel = paged_select_kernel<true>;
    cfg.dynamicSmemBytes = select_area_bytes(true);
    cudaLaunchAttribute& c = attrs[cfg.numAttrs++];
    c.id = cudaLaunchAttributeClusterDimension;
    c.val.clusterDim.x = static_cast<unsigned>(plan.select_parts);
    c.val.clusterDim.y = 1;
    c.val.clusterDim.z = 1;
    int device = 0;
    DeviceLimits limits;
    Status st = LaunchCache::get().current(&device, &limits);
    if (!st.ok()) return st;
    st = LaunchCache::get().allow_shared_memory(reinterpret_cast<const void*>(kernel), device,
                                                static_cast<int>(cfg.dynamicSmemBytes));
    if (!st.ok()) return st;
    // How many such clusters the device holds at once, read once per
    // cluster size (the tag). Rows past that would run in waves of
    // clusters, slower than the counters' kernel, which fills every SM
    // with independent CTAs: the counters' kernel runs instead.
    int clusters = 0;
    st = LaunchCache::get().once(
        reinterpret_cast<const void*>(kernel), device,
        [&](int* value) -> Status {
          cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
          if (e != cudaSuccess) return cuda_error(e, kOp, "allowing select clusters of 16 CTAs");
          cudaLaunchConfig_t probe = cfg;
          probe.gridDim = dim3(static_cast<unsigned>(plan.select_parts));
          probe.attrs = &c;
          probe.numAttrs = 1;
          e = cudaOccupancyMaxActiveClusters(value, kernel, &probe);
          return e == cudaSuccess ? Status::Ok() : cuda_error(e, kOp, "reading the select clusters' occupancy");
        },
        &clusters, /*tag=*/static_cast<int>(plan.select_parts));
    if (!st.ok()) return st;
    if (in.num_queries <= clusters) {
      err = cudaLaunchKernelEx(&cfg, kernel, args);
      return err == cudaSuccess ? Status::Ok() : cuda_error(err, kOp, "select kernel launch");
    }
    cfg.numAttrs = 1;
  }
  cfg.dynamicSmemBytes = select_area_bytes(false);
  err = cudaLaunchKernelEx(&cfg, paged_select_kernel<false>, args);
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, kOp, "select kernel launch");
}

// The streaming selection of a batch (stream_select.cuh): the rows'
// counters zeroed and outputs filled, then the scoring kernel with
// StreamSelectSink, launched programmatically (it waits for the fills
// before its first global write).
Status launch_stream_select(const PagedPlan& plan, const IndexerInputs& in, const scoring::PagedKeys& keys,
                            std::uint32_t* state, std::uint64_t* list, std::int32_t k, std::int32_t* indices,
                            float* values, CUstream_st* stream) {
  constexpr const char* kOp = "indexer_topk_paged";
  stream_select_zero_kernel<<<static_cast<unsigned>(in.num_queries), kStreamZeroThreads, 0, stream>>>(state, k, indices,
                                                                                                    values);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error(err, kOp, "zero kernel launch");
  const StreamSelectSink sink{state, list, plan.stream_list_capacity, k, indices, values};
  return scoring::launch_scoring<64, StreamSelectSink, scoring::PagedKeys, 64>(in, nullptr, sink, stream, keys,
                                                                             /*programmatic=*/true);
}

}  // namespace

Status launch_indexer_topk_paged(const PagedIndexerTopkParams& p, CUstream_st* stream, void* workspace,
                                 std::size_t workspace_bytes, const PagedHooks& hooks) {
  constexpr const char* kOp = "indexer_topk_paged";
  if (p.num_rows() == 0) return Status::Ok();
  const PagedPlan plan = make_plan(p, hooks);
  if (hooks.route == PagedHooks::Route::kFusedSelect && !plan.fused_select) {
    return Status(StatusCode::kInvalidArgument,
                  "hooks.route: the fused selection needs a power-of-two next_n (no padded rows), 64 heads, any "
                  "ties, unsorted positions (not physical slots) and a context past K of at most " +
                      std::to_string(kSelectMaxParts * kSelectPartKeys) + " keys (" + kOp + ")");
  }
  if (hooks.route == PagedHooks::Route::kBarSelect && !plan.bar_select) {
    return Status(StatusCode::kInvalidArgument,
                  "hooks.route: the bar selection needs one token a request, 64 heads and positions (not physical "
                  "slots) (" +
                      std::string(kOp) + ")");
  }
  if (hooks.route == PagedHooks::Route::kStreamSelect && !plan.stream_select) {
    return Status(StatusCode::kInvalidArgument,
                  "hooks.route: the streaming selection needs one token a request, 64 heads, any ties and unsorted "
                  "positions (not physical slots) (" +
                      std::string(kOp) + ")");
  }
  const PagedWorkspace& w = plan.workspace;
  if (Status st = check_workspace(kOp, workspace, workspace_bytes, w.total); !st.ok()) return st;
  auto* padded_w = plan.padded ? workspace_piece<float>(workspace, w.w) : nullptr;
  auto* scores = workspace_piece<float>(workspace, w.scores);
  const int K = p.options.k;
  const auto rows_per_request = static_cast<std::int32_t>(plan.rows_per_request);
  const std::int32_t* ks = nullptr;
  const std::int32_t* ke = nullptr;
  if (plan.ranges_from_lengths) {
    void* zeros = nullptr;
    const cudaError_t err = cudaGetSymbolAddress(&zeros, kZeroStarts);
    if (err != cudaSuccess) return cuda_error(err, kOp, "the zero range starts' address");
    ks = static_cast<const std::int32_t*>(zeros);
    ke = p.context_lens;
  } else {
    auto* starts = workspace_piece<std::int32_t>(workspace, w.ks);
    auto* ends = workspace_piece<std::int32_t>(workspace, w.ke);
    ks = starts;
    ke = ends;
    const PrepareArgs args{p.context_lens,
                           p.w,
                           p.batch,
                           p.next_n,
                           p.num_heads,
                           rows_per_request,
                           p.lens_per_token,
                           plan.max_row_length,
                           starts,
                           ends,
                           padded_w};
    const LaunchGrid& g = plan.prepare;
    paged_prepare_kernel<<<g.blocks, g.threads, g.smem_bytes, stream>>>(args);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cuda_error(err, kOp, "prepare kernel launch");
  }
  for (std::int64_t b = 0; b < plan.batches.count(); ++b) {
    const Batch batch = plan.batches[b];
    const std::int64_t first = batch.first, requests = batch.size;
    const std::int64_t row0 = first * plan.rows_per_request, rows = requests * plan.rows_per_request;
    IndexerInputs in;
    in.q = p.q + first * p.next_n * p.num_heads * kHeadDim;
    in.w = padded_w != nullptr ? padded_w + row0 * p.num_heads : p.w + first * p.next_n * p.num_heads;
    in.ks = ks + row0;
    in.ke = ke + row0;
    in.num_queries = rows;
    in.num_keys = p.max_context();
    in.num_heads = p.num_heads;
    const std::int32_t* table = p.block_table + first * p.block_table_stride;
    const scoring::PagedKeys keys{p.kv_cache,
                                  table,
                                  p.block_table_stride,
                                  static_cast<std::int32_t>(p.max_blocks_per_seq),
                                  static_cast<std::int32_t>(p.num_blocks),
                                  plan.block_shift,
                                  plan.rows_per_request_shift,
                                  p.next_n};
    if (plan.fused_select) {
      const Status st = launch_fused_select(
          plan, in, keys, scores, workspace_piece<std::uint32_t>(workspace, w.select_state),
          workspace_piece<std::uint64_t>(workspace, w.candidates), K, p.indices + first * p.next_n * K,
          p.values != nullptr ? p.values + first * p.next_n * K : nullptr, stream);
      if (!st.ok()) return st;
      continue;
    }
    if (plan.stream_select) {
      const Status st = launch_stream_select(
          plan, in, keys, workspace_piece<std::uint32_t>(workspace, w.stream_state),
          workspace_piece<std::uint64_t>(workspace, w.stream_list), K, p.indices + first * p.next_n * K,
          p.values != nullptr ? p.values + first * p.next_n * K : nullptr, stream);
      if (!st.ok()) return st;
      continue;
    }
    if (plan.bar_select) {
      const Status st = launch_bar_select(plan, p, in, keys, workspace, p.indices + first * p.next_n * K,
                                          p.values != nullptr ? p.values + first * p.next_n * K : nullptr, stream);
      if (!st.ok()) return st;
      continue;
    }
    if (hooks.route == PagedHooks::Route::kMathOnly) {
      const Status st = launch_paged_scoring(in, plan.block_columns, scoring::ChecksumSink{nullptr}, stream, keys);
      if (!st.ok()) return st;
      continue;
    }
    std::int32_t* indices =
        plan.mapped ? workspace_piece<std::int32_t>(workspace, w.indices) : p.indices + first * p.next_n * K;
    float* values = p.values == nullptr ? nullptr
                    : plan.mapped       ? workspace_piece<float>(workspace, w.values)
                                        : p.values + first * p.next_n * K;
    const Status st = launch_unfused(plan, p, in, keys, scores, indices, values, stream);
    if (!st.ok()) return st;
    if (plan.mapped) {
      const MapArgs args{indices,
                         values,
                         table,
                         p.block_table_stride,
                         static_cast<std::int32_t>(p.max_blocks_per_seq),
                         plan.block_shift,
                         requests,
                         p.next_n,
                         rows_per_request,
                         K,
                         p.physical_slots,
                         p.indices + first * p.next_n * K,
                         p.values != nullptr ? p.values + first * p.next_n * K : nullptr};
      const LaunchGrid g = plan.map_grid(requests);
      paged_map_kernel<<<g.blocks, g.threads, g.smem_bytes, stream>>>(args);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return cuda_error(err, kOp, "map kernel launch");
    }
  }
  return Status::Ok();
}

std::size_t merge_workspace_size(const MergeTopkParams&) { return 0; }

Status launch_merge_topk(const MergeTopkParams& p, CUstream_st* stream, void*, std::size_t) {
  if (p.num_rows == 0) return Status::Ok();
  const MergeArgs args{p.values, p.indices, p.num_parts, p.num_rows, std::max<std::int64_t>(p.part_k, 1),
                       p.out_indices, p.out_values};
  Status st;
  switch (p.options.k) {
    case 512: st = launch_merge_kernel<512>(args, stream); break;
    case 1024: st = launch_merge_kernel<1024>(args, stream); break;
    case 2048: st = launch_merge_kernel<2048>(args, stream); break;
    default: return {StatusCode::kInternal, "merge_topk: K " + std::to_string(p.options.k) + " has no kernel"};
  }
  if (!st.ok()) return st;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "merge_topk", "merge kernel launch");
}

}  // namespace dsa::decode
