// options.check_finite on the CUDA backend: one scan per input for its first
// NaN/Inf, a one-thread step that reads the offenders back, then one
// synchronous copy of the findings to the host. "First" is the smallest
// index (atomicMin), so the report names the element the CPU backend names.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "api/check_finite.h"
#include "api/status_macros.h"
#include "common/cuda_status.h"
#include "common/fp8.h"
#include "common/paged.h"

namespace dsa::finite {
namespace {

using Index = unsigned long long;  // atomicMin's 64-bit operand
constexpr Index kNone = ~Index{0};  // what memset(0xFF) leaves: nothing found yet

constexpr int kInputs = 4;    // the most inputs an operator checks (q, k, k_scale, w)
constexpr int kThreads = 256;
// A few waves on a 132-SM H200; the grid-stride loops cover larger inputs.
constexpr std::int64_t kMaxBlocks = 1024;
constexpr int kChunkBytes = 16;  // one uint4 load
constexpr int kChunksPerKey = kHeadDim / kChunkBytes;

// What the scans found (device memory; the host reads it with one copy).
struct Found {
  Index first[kInputs];  // per input: the first offender's index (First::index), kNone
  float value[kInputs];  // the offender itself (fp32 inputs and the paged scale)
  long long slot;        // paged: the offending position's cache slot
  int key_byte;          // paged: its first NaN key byte, -1 when only the scale offends
};

// Every loop below walks its thread's indices in increasing order, so a
// thread's first offender is its smallest: it records that one and stops.
__device__ __forceinline__ std::int64_t first_item() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ std::int64_t item_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// The first FP8 NaN byte among 16 (lowest address first), or -1.
__device__ __forceinline__ int first_nan_byte(const uint4 v) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // 0xFF in each byte b with (b & 0x7F) == 0x7F (fp8_is_nan), 4 at a time.
    const unsigned nan = __vcmpeq4(words[i] & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
    if (nan != 0) return i * 4 + (__ffs(static_cast<int>(nan)) - 1) / 8;
  }
  return -1;
}

// The first NaN byte of one kHeadDim-byte key (16-byte aligned), or -1.
__device__ __forceinline__ int first_nan_in_key(const std::uint8_t* key) {
#pragma unroll 1
  for (int c = 0; c < kChunksPerKey; ++c) {
    const int byte = first_nan_byte(*reinterpret_cast<const uint4*>(key + c * kChunkBytes));
    if (byte >= 0) return c * kChunkBytes + byte;
  }
  return -1;
}

// `rows` rows of kHeadDim FP8 bytes, `stride` bytes apart, 16-byte aligned:
// index row * kHeadDim + byte (IndexerFindings::q, ::k).
__global__ void __launch_bounds__(kThreads) first_fp8_nan(const std::uint8_t* data, std::int64_t rows,
                                                          std::int64_t stride, Index* first) {
  for (std::int64_t c = first_item(); c < rows * kChunksPerKey; c += item_stride()) {
    const std::int64_t row = c / kChunksPerKey;
    const int chunk = static_cast<int>(c % kChunksPerKey);
    const int byte = first_nan_byte(*reinterpret_cast<const uint4*>(data + row * stride + chunk * kChunkBytes));
    if (byte >= 0) {
      atomicMin(first, static_cast<Index>(row * kHeadDim + chunk * kChunkBytes + byte));
      return;
    }
  }
}

// data[i], i < n, skipping entries whose mask[i] is negative when `mask` is
// set (merge_topk's empty slots).
__global__ void __launch_bounds__(kThreads) first_non_finite(const float* data, std::int64_t n,
                                                             const std::int32_t* mask, Index* first) {
  for (std::int64_t i = first_item(); i < n; i += item_stride()) {
    if ((mask == nullptr || mask[i] >= 0) && !isfinite(data[i])) {
      atomicMin(first, static_cast<Index>(i));
      return;
    }
  }
}

struct RangesScan {
  const float* scores;
  const std::int32_t* ks;
  const std::int32_t* ke;
  std::int64_t rows, cols, stride;
};

// A block per row, its threads over [ks, ke) clamped to [0, cols) as the
// top-k kernel clamps unchecked ranges: index t * stride + s.
__global__ void __launch_bounds__(kThreads) first_non_finite_in_ranges(const RangesScan a, Index* first) {
  for (std::int64_t t = blockIdx.x; t < a.rows; t += gridDim.x) {
    const std::int64_t lo = std::clamp<std::int64_t>(a.ks[t], 0, a.cols);
    const std::int64_t hi = std::clamp<std::int64_t>(a.ke[t], lo, a.cols);
    for (std::int64_t s = lo + threadIdx.x; s < hi; s += blockDim.x) {
      if (!isfinite(a.scores[t * a.stride + s])) {
        atomicMin(first, static_cast<Index>(t * a.stride + s));
        return;
      }
    }
  }
}

struct PagedScan {
  const std::uint8_t* kv_cache;
  const std::int32_t* block_table;
  const std::int32_t* context_lens;
  std::int64_t batch, num_blocks, table_stride, max_context;
  int next_n, block_size;
  bool lens_per_token;

  // Position `pos` of request b: its slot, or -1 for a table entry outside
  // [0, num_blocks) (which the operator reads as zero keys: nothing to check).
  __device__ std::int64_t slot(std::int64_t b, std::int64_t pos) const {
    const std::int32_t block = block_table[b * table_stride + pos / block_size];
    return block < 0 || block >= num_blocks ? -1 : std::int64_t{block} * block_size + pos % block_size;
  }
  __device__ float scale(std::int64_t slot) const {
    return *reinterpret_cast<const float*>(kv_cache + paged_scale_offset(block_size, slot));
  }
};

// A block per request, its threads over the positions [0, len) its rows read
// (len clamped to max_context as the operator clamps it): index
// b * max_context + pos of a position whose key bytes or scale offend.
__global__ void __launch_bounds__(kThreads) first_bad_position(const PagedScan a, Index* first) {
  for (std::int64_t b = blockIdx.x; b < a.batch; b += gridDim.x) {
    std::int64_t len = 0;
    for (int j = 0; j < a.next_n; ++j) {
      len = std::max(len, paged_row_length(a.context_lens, a.lens_per_token, b, a.next_n, j));
    }
    len = std::min(len, a.max_context);
    for (std::int64_t pos = threadIdx.x; pos < len; pos += blockDim.x) {
      const std::int64_t slot = a.slot(b, pos);
      if (slot < 0) continue;
      if (first_nan_in_key(a.kv_cache + paged_key_offset(a.block_size, slot)) >= 0 || !isfinite(a.scale(slot))) {
        atomicMin(first, static_cast<Index>(b * a.max_context + pos));
        return;
      }
    }
  }
}

// One thread: the value of each fp32 input's offender (data[i] null: not an
// fp32 input).
struct Offenders {
  const float* data[kInputs];
};
__global__ void read_offenders(const Offenders o, Found* found) {
  for (int i = 0; i < kInputs; ++i) {
    if (o.data[i] != nullptr && found->first[i] != kNone) found->value[i] = o.data[i][found->first[i]];
  }
}

// One thread: the paged offender's slot, first NaN key byte and scale.
__global__ void read_paged_offender(const PagedScan a, int input, Found* found) {
  if (found->first[input] == kNone) return;
  const auto b = static_cast<std::int64_t>(found->first[input] / a.max_context);
  const auto pos = static_cast<std::int64_t>(found->first[input] % a.max_context);
  const std::int64_t slot = a.slot(b, pos);
  found->slot = slot;
  found->key_byte = first_nan_in_key(a.kv_cache + paged_key_offset(a.block_size, slot));
  found->value[input] = a.scale(slot);
}

std::int64_t blocks_for(std::int64_t items, std::int64_t per_block) {
  return std::min((items + per_block - 1) / per_block, kMaxBlocks);
}

// The scans `launch` enqueues on `stream` over a Found in fresh device
// scratch, the read-back of the fp32 offenders, then the copy to *host. The
// scratch is allocated on the stream
// (cudaMallocAsync): the caller's workspace is sized for the operator's
// kernels and may be null, and this option synchronises the stream anyway,
// so stream-ordered scratch costs no further synchronisation and needs no
// workspace rule of its own.
template <class Launch>
Status scan(CUstream_st* stream, const Offenders& fp32, Launch launch, Found* host) {
  Found* found = nullptr;
  cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&found), sizeof(Found), stream);
  if (err != cudaSuccess) return cuda_status(err, "options.check_finite: allocating the scan's scratch");
  err = cudaMemsetAsync(found, 0xFF, sizeof(Found), stream);
  if (err == cudaSuccess) {
    launch(found);
    read_offenders<<<1, 1, 0, stream>>>(fp32, found);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpyAsync(host, found, sizeof(Found), cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  const cudaError_t freed = cudaFreeAsync(found, stream);
  if (err == cudaSuccess) err = freed;
  return err == cudaSuccess ? Status::Ok() : cuda_status(err, "options.check_finite: scanning the inputs");
}

void launch_fp8(const std::uint8_t* data, std::int64_t rows, std::int64_t stride, Index* first, CUstream_st* stream) {
  const std::int64_t blocks = blocks_for(rows * kChunksPerKey, kThreads);
  if (blocks > 0) first_fp8_nan<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, rows, stride, first);
}

void launch_floats(const float* data, std::int64_t n, const std::int32_t* mask, Index* first, CUstream_st* stream) {
  const std::int64_t blocks = blocks_for(n, kThreads);
  if (blocks > 0) first_non_finite<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, n, mask, first);
}

// Found's input i as a First.
First first_of(const Found& f, int i) {
  return f.first[i] == kNone ? First{} : First{static_cast<std::int64_t>(f.first[i]), f.value[i]};
}

}  // namespace

Status find_on_device(const IndexerTopkParams& p, CUstream_st* stream, IndexerFindings* out) {
  Found found;
  DSA_RETURN_IF_ERROR(scan(
      stream, Offenders{{nullptr, nullptr, p.k_scale, p.w}},
      [&](Found* f) {
        launch_fp8(p.q, p.num_queries * p.num_heads, kHeadDim, &f->first[0], stream);
        launch_fp8(p.k, p.num_keys, p.k_row_stride, &f->first[1], stream);
        launch_floats(p.k_scale, p.num_keys, nullptr, &f->first[2], stream);
        launch_floats(p.w, p.num_queries * p.num_heads, nullptr, &f->first[3], stream);
      },
      &found));
  *out = {first_of(found, 0), first_of(found, 1), first_of(found, 2), first_of(found, 3)};
  return Status::Ok();
}

Status find_on_device(const TopkParams& p, CUstream_st* stream, ScoresFindings* out) {
  Found found;
  DSA_RETURN_IF_ERROR(scan(
      stream, Offenders{{p.scores}},
      [&](Found* f) {
        const RangesScan a{p.scores, p.ks, p.ke, p.num_rows, p.num_cols, p.score_stride};
        const std::int64_t blocks = std::min(p.num_rows, kMaxBlocks);
        if (blocks > 0) {
          first_non_finite_in_ranges<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, &f->first[0]);
        }
      },
      &found));
  *out = {first_of(found, 0)};
  return Status::Ok();
}

Status find_on_device(const PagedIndexerTopkParams& p, CUstream_st* stream, PagedFindings* out) {
  constexpr int kQ = 0, kKv = 1, kW = 2;
  Found found;
  DSA_RETURN_IF_ERROR(scan(
      stream, Offenders{{nullptr, nullptr, p.w}},
      [&](Found* f) {
        launch_fp8(p.q, p.num_rows() * p.num_heads, kHeadDim, &f->first[kQ], stream);
        launch_floats(p.w, p.num_rows() * p.num_heads, nullptr, &f->first[kW], stream);
        const PagedScan a{p.kv_cache,     p.block_table,        p.context_lens, p.batch,
                          p.num_blocks,   p.block_table_stride, p.max_context(), p.next_n,
                          p.block_size,   p.lens_per_token};
        const std::int64_t blocks = std::min(a.max_context > 0 ? p.batch : 0, kMaxBlocks);
        if (blocks > 0) {
          first_bad_position<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, &f->first[kKv]);
          read_paged_offender<<<1, 1, 0, stream>>>(a, kKv, f);
        }
      },
      &found));
  *out = {first_of(found, kQ), first_of(found, kKv), first_of(found, kW), found.slot, found.key_byte};
  return Status::Ok();
}

Status find_on_device(const MergeTopkParams& p, CUstream_st* stream, MergeFindings* out) {
  Found found;
  DSA_RETURN_IF_ERROR(scan(
      stream, Offenders{{p.values}},
      [&](Found* f) {
        launch_floats(p.values, p.num_parts * p.num_rows * p.part_k, p.indices, &f->first[0], stream);
      },
      &found));
  *out = {first_of(found, 0)};
  return Status::Ok();
}

}  // namespace dsa::finite
