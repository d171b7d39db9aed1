// The paged indexer's fused selection (PagedPlan::fused_select, plan.h):
// the top K of few rows without the standalone top-k's passes over them.
//   1. The scoring kernel writes the scores as StoreSink does and, with
//      HistStoreSink, counts each row's score keys by their top
//      kSelectBinBits bits: per CTA in shared memory, added into the row's
//      histogram in global memory at the end of each unit (zeroed
//      by a small kernel before it, which the scoring kernel overlaps).
//   2. The select kernel, launched programmatically after it, gives each
//      row select_parts CTAs of kSelectPartKeys positions each. Each reads
//      the row's histogram and finds the bin holding the K-th largest key
//      (every CTA the same bin), then filters its part of the row's scores:
//      keys above the bin take output slots at once (one counter a row, one
//      claim a CTA), keys in the bin are appended as candidates, (score
//      key, position) pairs.
//   3. The row's last CTA to finish (a counter a row) selects the slots
//      still open from the candidates (in shared memory when they fit) by
//      the block radix select on their score keys, or from the row's scores
//      when the bin held more than the buffer (ties, dead ReLU): exact
//      either way.
// Rows of at most kSelectClusterParts parts run as one cluster a row
// (PagedPlan::select_cluster): each CTA claims its slots and candidates by
// one atomic on rank 0's shared memory, stores the candidates into rank 0's
// shared memory when the bin fits there (asynchronously, counted as bytes
// on rank 0's barrier), and rank 0 selects once every rank has arrived on
// that barrier: on-chip exchanges in place of the counters' global round
// trips (the claims, the done counter, the last CTA's reload of the
// candidates).
// Output in no particular order, any valid choice among ties at the K-th
// score; rows of at most K keys return them all.
#pragma once

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include <cuda/atomic>

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/sm90/barrier.cuh"
#include "common/sm90/grid_dependency.cuh"
#include "common/sm90/prefetch.cuh"
#include "common/warp.h"
#include "decode/plan.h"
#include "scoring/config.h"
#include "scoring/epilogue.cuh"
#include "scoring/scoring_kernel.cuh"
#include "selection/device/radix.cuh"

namespace dsa::decode {

// A score's histogram bin: its key's top kSelectBinBits bits.
__device__ __forceinline__ std::uint32_t select_bin(std::uint32_t key) { return key >> (32 - kSelectBinBits); }

// StoreSink's scores and each row's histogram of score-key bins. Blocks of
// one query (H = 64; a request's next_n rows are as many blocks): a unit's
// block t0 is launch row t0, the row of the histogram it adds into.
struct HistStoreSink {
  scoring::StoreSink store;  // the scores, as indexer_scores writes them
  std::uint32_t* state;      // [rows, kSelectStateWords]: the histogram first, zero at launch
  struct Shared {
    std::uint32_t bins[kSelectBins];
  };
  template <int R>
  struct Lane {};
  __device__ void init(Shared& sh) const {
    // The histogram's and the scores' pages translated before the first
    // store and the first flush reach them, by two lanes of warp 3 (the
    // producers' warpgroup's warp with no role in the loop).
    if (threadIdx.x == 3 * kWarpSize) sm90::prefetch_l2_line(state);
    if (threadIdx.x == 3 * kWarpSize + 1) sm90::prefetch_l2_line(store.scores);
    for (int i = static_cast<int>(threadIdx.x); i < kSelectBins; i += static_cast<int>(blockDim.x)) sh.bins[i] = 0;
  }
  template <int R>
  __device__ Lane<R> begin(std::uint32_t, std::int64_t, int, const RowRange (&)[R], int) const {
    return {};
  }
  template <int R>
  __device__ __forceinline__ void put(Lane<R>&, Shared& sh, std::int64_t t0, int lane, const std::int32_t (&key)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
    scoring::StoreSink::Lane<R> none;
    scoring::StoreSink::Shared unused;
    store.put(none, unused, t0, lane, key, score, valid);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (valid[r][half]) atomicAdd(&sh.bins[select_bin(score_key_fast(score[r][half]))], 1u);
      }
    }
  }
  // The CTA's counts of the unit, into the row's histogram: one histogram
  // for both math warpgroups halves the global additions of a unit (both
  // warpgroups' tiles of a row land in the same bins). Every math thread
  // passes finish once per unit (the warpgroups walk the same units), so
  // the math threads alone meet at a named barrier before and after and the
  // producer goes on; the shared loads unrolled, so their latencies overlap.
  // The histograms are zeroed by the kernel launched before (select_zero_
  // kernel), which this one may overlap: its writes are waited for here.
  static constexpr int kFlushBarrier = 1 + scoring::kMathWarpgroups;  // after the warpgroups' own (1, 2)
  template <int R>
  __device__ void finish(Lane<R>&, Shared& sh, std::int64_t t0, int) const {
    sm90::wait_for_prerequisite_grids();
    sm90::named_barrier_sync(kFlushBarrier, scoring::kMathThreads);
    std::uint32_t* row = state + t0 * kSelectStateWords;
    const int tid = static_cast<int>(threadIdx.x) - scoring::kWarpgroupThreads;  // math threads follow the producers
#pragma unroll 8
    for (int b = tid; b < kSelectBins; b += scoring::kMathThreads) {
      const std::uint32_t n = sh.bins[b];
      if (n != 0) {
        atomicAdd(row + b, n);
        sh.bins[b] = 0;
      }
    }
    sm90::named_barrier_sync(kFlushBarrier, scoring::kMathThreads);
  }
};

// The rows' state zeroed, a CTA a row; the scoring kernel after it is
// launched programmatically and starts at once (HistStoreSink waits for the
// zeros before its first addition).
inline constexpr int kZeroThreads = 256;
__global__ void __launch_bounds__(kZeroThreads) select_zero_kernel(std::uint32_t* state) {
  sm90::allow_dependent_launch();
  uint4* row = reinterpret_cast<uint4*>(state + static_cast<std::int64_t>(blockIdx.x) * kSelectStateWords);
  static_assert(kSelectStateWords % 4 == 0, "a row's state in 16-byte words");
  for (int i = static_cast<int>(threadIdx.x); i < kSelectStateWords / 4; i += kZeroThreads) row[i] = uint4{0, 0, 0, 0};
}

inline constexpr int kSelectThreads = 512;
inline constexpr int kSelectWarps = kSelectThreads / kWarpSize;

struct SelectArgs {
  const float* scores;  // [rows, stride]: the batch's
  std::int64_t stride;
  const std::int32_t* ks;  // the batch's ranges, as the scoring kernel read them
  const std::int32_t* ke;
  std::int64_t num_keys;       // max_context(): ranges clamp to it
  std::uint32_t* state;        // [rows, kSelectStateWords]
  std::uint64_t* candidates;   // [rows, capacity]
  std::uint32_t capacity;
  std::int32_t parts;          // CTAs a row
  std::int32_t k;
  std::int32_t* indices;       // [rows, k]
  float* values;               // [rows, k] or null
};

// A candidate: its score key and position.
__device__ __forceinline__ std::uint64_t select_entry(std::uint32_t key, std::int32_t position) {
  return (static_cast<std::uint64_t>(key) << 32) | static_cast<std::uint32_t>(position);
}

// A part's keys a thread; bin entries the last CTA holds in shared memory.
inline constexpr int kPerThread = static_cast<int>(kSelectPartKeys) / kSelectThreads;
static_assert(kPerThread * kSelectThreads == kSelectPartKeys && kPerThread <= 16, "a part: kPerThread keys a thread");
inline constexpr int kSelectCached = 4096;
// The select kernel's dynamic shared memory: the bin's entries, and the
// histogram beside them in a cluster's CTAs (whose rank 0 takes entries
// while it may still read its histogram) or in their place otherwise.
constexpr std::size_t select_area_bytes(bool cluster) {
  return kSelectCached * sizeof(std::uint64_t) + (cluster ? kSelectBins * sizeof(std::uint32_t) : 0);
}
static_assert(kSelectCached * sizeof(std::uint64_t) >= kSelectBins * sizeof(std::uint32_t));

// A rank's arrival on rank 0's barrier (one thread a CTA): rank 0's own
// also announces the bin's `entries` as transaction bytes (the ranks'
// stores may land before it: the count then runs negative until it does).
__device__ __forceinline__ void arrive_claimed(const cooperative_groups::cluster_group& cluster, std::uint64_t* bar,
                                               std::uint32_t entries) {
  if (cluster.block_rank() == 0) {
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cluster, cuda::ptx::space_shared,
                                         bar, entries * static_cast<std::uint32_t>(sizeof(std::uint64_t)));
  } else {
    cuda::ptx::mbarrier_arrive(cuda::ptx::sem_release, cuda::ptx::scope_cluster, cuda::ptx::space_cluster,
                               cluster.map_shared_rank(bar, 0));
  }
}

// Cluster: launched as clusters of a.parts CTAs, one a row (the rank is the
// part); else as independent CTAs meeting at the row's counters.
template <bool Cluster>
__global__ void __launch_bounds__(kSelectThreads) paged_select_kernel(const SelectArgs a) {
  using Scan = cub::BlockScan<std::uint32_t, kSelectThreads>;
  // The bin's entries and the histogram (select_area_bytes).
  extern __shared__ __align__(16) std::uint64_t area[];
  std::uint32_t* const bins = reinterpret_cast<std::uint32_t*>(Cluster ? area + kSelectCached : area);
  std::uint64_t* const cache = area;
  __shared__ std::uint32_t warp_sums[kSelectWarps];
  __shared__ selection::device::BinPick pick;
  __shared__ selection::device::RadixShared<std::uint32_t> radix32;
  __shared__ typename Scan::TempStorage scan;
  __shared__ std::uint32_t claimed[2], last, taken, tied;
  // Cluster, rank 0's: the row's slots taken (low 32 bits) and entries
  // appended (high 32), and the barrier every rank arrives on once it has
  // claimed, the bin's entries counted as its transaction bytes.
  __shared__ unsigned long long claims;
  __shared__ __align__(8) std::uint64_t claimed_all;
  const std::int64_t r = blockIdx.x / a.parts;
  const auto part = static_cast<std::int32_t>(blockIdx.x % a.parts);
  const int K = a.k;
  // The row's range: the call's lengths, which no kernel of the call
  // writes, or the prepare kernel's, complete before the zero kernel (an
  // ordinary launch after it) starts, and so before this one; read while
  // the scoring kernel runs.
  const RowRange range = row_range(a.ks, a.ke, nullptr, r, a.num_keys);
  const std::int32_t len = range.end - range.begin;
  // Part p filters positions [p, p + 1) x kSelectPartKeys of the row's
  // range. a.parts covers the longest context the table holds; a row
  // shorter than that leaves its later parts without a key, and those exit
  // at once: they load no score and no histogram, claim nothing and are not
  // counted. Part 0 always takes part (it selects the bin's slots in a
  // cluster); `taking` counts it and the parts holding keys.
  const std::int32_t lo = part * static_cast<std::int32_t>(kSelectPartKeys);
  const bool holds = lo < range.end && lo + static_cast<std::int32_t>(kSelectPartKeys) > range.begin;
  const std::int32_t first_part = range.begin / static_cast<std::int32_t>(kSelectPartKeys);
  const std::int32_t taking =
      len > 0 ? (range.end - 1) / static_cast<std::int32_t>(kSelectPartKeys) - first_part + 1 + (first_part > 0 ? 1 : 0)
              : 1;
  // Rank 0's counter and barrier are set before any rank claims: the
  // cluster barrier is arrived at here and waited for before the claim.
  if constexpr (Cluster) {
    if (threadIdx.x == 0) {
      claims = 0;
      taken = 0;
      tied = 0;
      sm90::barrier_init(&claimed_all, static_cast<std::uint32_t>(taking));
      sm90::barrier_init_fence();
    }
    cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);  // every thread
  }
  if (len > K && !holds && part != 0) {
    // A cluster's rank passes both phases of the cluster barrier, as every
    // rank must; it touches no other rank's shared memory.
    if constexpr (Cluster) {
      cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
      cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
    }
    return;  // the same for every thread of the CTA
  }
  // While the scoring kernel runs: the pages this CTA writes or reads,
  // translated before the writes and loads wait on them.
  if (threadIdx.x < 4) {
    const void* p = threadIdx.x == 0   ? static_cast<const void*>(a.indices + r * K)
                    : threadIdx.x == 1 ? static_cast<const void*>(a.candidates + r * a.capacity)
                    : threadIdx.x == 2 ? static_cast<const void*>(a.scores + r * a.stride + lo)
                    : static_cast<const void*>(a.values != nullptr ? a.values + r * K : nullptr);
    if (p != nullptr) sm90::prefetch_l2_line(p);
  }
  // The scores and the histogram are the scoring kernel's, launched before.
  sm90::wait_for_prerequisite_grids();
  const float* row = a.scores + r * a.stride;
  // The part's scores inside the range, loaded at once, before the
  // histogram is known.
  float score[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const std::int32_t i = lo + u * kSelectThreads + static_cast<std::int32_t>(threadIdx.x);
    score[u] = i >= range.begin && i < range.end ? __ldcg(row + i) : 0.0f;
  }
  // The histogram's counts too.
  std::uint32_t* state = a.state + r * kSelectStateWords;
  std::uint32_t* counters = state + kSelectBins;
  constexpr int kBinsPerThread = kSelectBins / kSelectThreads;
  std::uint32_t count[kBinsPerThread];
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) count[j] = __ldcg(state + j * kSelectThreads + threadIdx.x);
  std::int32_t* out = a.indices + r * K;
  float* vals = a.values != nullptr ? a.values + r * K : nullptr;
  if (len <= K) {  // every position, then -1: part p writes its share of the slots
    const std::int32_t chunk = (K + a.parts - 1) / a.parts;
    const std::int32_t end = min(K, (part + 1) * chunk);
    for (std::int32_t s = part * chunk + static_cast<std::int32_t>(threadIdx.x); s < end; s += kSelectThreads) {
      const bool full = s < len;
      out[s] = full ? range.begin + s : -1;
      if (vals != nullptr) vals[s] = full ? __ldcg(row + range.begin + s) : -__int_as_float(0x7F800000);
    }
    return;
  }
  // The histogram, top bin first (pick_striped_bin's order); it counts the
  // row's len > K keys, so the pick exists.
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) bins[kSelectBins - 1 - (j * kSelectThreads + threadIdx.x)] = count[j];
  __syncthreads();
  const selection::device::BinPick p = selection::device::pick_striped_bin<kSelectWarps, kSelectBins / kSelectThreads>(
      bins, warp_sums, pick, static_cast<std::uint32_t>(K));
  const std::uint32_t bin = kSelectBins - 1 - p.bin;  // the K-th key's select_bin
  const std::uint32_t need = static_cast<std::uint32_t>(K) - p.above;  // slots the bin fills, 1..p.in
  const bool whole = need == p.in;  // the bin is taken whole: no candidates

  // This part's keys classified, then one claim a counter for the whole
  // CTA: a global atomic's latency once, not once a warp and key.
  std::uint32_t takes = 0, cands = 0;  // this thread's, as bit masks over u
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const std::int32_t i = lo + u * kSelectThreads + static_cast<std::int32_t>(threadIdx.x);
    const bool inside = i >= range.begin && i < range.end;
    const std::uint32_t b = select_bin(score_key_fast(score[u]));
    if (inside && (b > bin || (whole && b == bin))) takes |= 1u << u;
    if (inside && !whole && b == bin) cands |= 1u << u;
  }
  // Both counts in one scan: takes in the low 16 bits, candidates above
  // (each at most kSelectPartKeys < 2^16 a CTA).
  const std::uint32_t mine = static_cast<std::uint32_t>(__popc(takes)) | static_cast<std::uint32_t>(__popc(cands)) << 16;
  std::uint32_t before = 0, all = 0;
  Scan(scan).ExclusiveSum(mine, before, all);
  // The bin's keys, as many as the parts append: the histogram counted the
  // same keys of the same range.
  const std::uint32_t n = p.in;
  const bool cached = n <= static_cast<std::uint32_t>(kSelectCached);  // the row's bin fits in shared memory
  std::uint32_t take_base = 0, entry_base = 0;  // the CTA's first slot and first candidate entry
  // Cluster: entries in rank 0's shared memory arrive as transaction bytes
  // on its barrier, so no rank waits for its writes to land anywhere;
  // entries in the buffer are published by the CTA's arrival after them.
  const bool early_arrival = whole || cached;
  if constexpr (Cluster) {
    const auto cluster = cooperative_groups::this_cluster();
    cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
    if (threadIdx.x == 0) {
      // One claim on rank 0's shared memory for both counts, each under
      // 2^32 (a row has fewer keys), so no carry crosses between them.
      const unsigned long long mine = (all & 0xFFFFu) | static_cast<unsigned long long>(all >> 16) << 32;
      const unsigned long long at = atomicAdd(cluster.map_shared_rank(&claims, 0), mine);
      claimed[0] = static_cast<std::uint32_t>(at);
      claimed[1] = static_cast<std::uint32_t>(at >> 32);
      if (early_arrival) arrive_claimed(cluster, &claimed_all, !whole ? n : 0u);
    }
    __syncthreads();
    take_base = claimed[0];
    entry_base = claimed[1];
  } else {
    if (threadIdx.x == 0) {
      claimed[0] = (all & 0xFFFFu) != 0 ? atomicAdd(counters + kTakenCounter, all & 0xFFFFu) : 0u;
      claimed[1] = (all >> 16) != 0 ? atomicAdd(counters + kCandidateCounter, all >> 16) : 0u;
    }
    __syncthreads();
    take_base = claimed[0];
    entry_base = claimed[1];
  }
  std::uint64_t* const appended =
      Cluster && cached ? cooperative_groups::this_cluster().map_shared_rank(cache, 0) : a.candidates + r * a.capacity;
  std::uint64_t* const arrivals = Cluster ? cooperative_groups::this_cluster().map_shared_rank(&claimed_all, 0) : nullptr;
  const std::uint32_t room = Cluster && cached ? n : a.capacity;
  std::uint32_t slot = take_base + (before & 0xFFFFu), entry = entry_base + (before >> 16);
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const std::int32_t i = lo + u * kSelectThreads + static_cast<std::int32_t>(threadIdx.x);
    if ((takes >> u) & 1u) {
      if (slot < static_cast<std::uint32_t>(K)) {
        out[slot] = i;
        if (vals != nullptr) vals[slot] = score[u];
      }
      ++slot;
    }
    if ((cands >> u) & 1u) {
      if (entry < room) {
        const std::uint64_t v = select_entry(score_key_fast(score[u]), i);
        if (Cluster && cached) {
          cuda::ptx::st_async(appended + entry, v, arrivals);
        } else {
          appended[entry] = v;
        }
      }
      ++entry;
    }
  }

  // The row's last CTA fills the slots the bin owes. The barrier gathers
  // the CTA's writes; thread 0's acq_rel increment publishes them at device
  // scope and, in the last CTA, acquires every other CTA's (the next barrier
  // passes them on). Sequentially consistent fences around a relaxed
  // increment would each wait for all of the thread's memory operations.
  if constexpr (Cluster) {
    // Entries in the buffer: the block barrier gathers the CTA's writes,
    // thread 0's arrival releases them at cluster scope. Rank 0 waits for
    // every rank's arrival and every entry's bytes, acquiring at cluster
    // scope. The cluster barrier's second phase keeps rank 0's shared memory
    // alive until every rank is past its accesses to it (the claim, the
    // stores): every thread arrives once it is done with it, and rank 0
    // waits just before it exits, when the others have long arrived.
    const auto cluster = cooperative_groups::this_cluster();
    if (!early_arrival) {
      __syncthreads();
      if (threadIdx.x == 0) arrive_claimed(cluster, &claimed_all, 0u);
    }
    cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
    if (cluster.block_rank() != 0) return;  // the same for every thread of the CTA
    while (!cuda::ptx::mbarrier_try_wait_parity(cuda::ptx::sem_acquire, cuda::ptx::scope_cluster, &claimed_all, 0u)) {
    }
    if (whole) {
      cuda::ptx::barrier_cluster_wait();
      return;
    }
  } else {
    __syncthreads();
    if (threadIdx.x == 0) {
      cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> done(counters[kDoneCounter]);
      last = done.fetch_add(1u, cuda::memory_order_acq_rel) == static_cast<std::uint32_t>(taking - 1) ? 1u : 0u;
      taken = 0;
      tied = 0;
    }
    __syncthreads();
    if (last == 0 || whole) return;  // the same for every thread of the CTA
  }
  // The bin's entries: in shared memory when they fit (the radix passes
  // then read them there), else from the candidate buffer (L2) when they
  // all fit there, else from the row's scores on every pass.
  const std::uint64_t* listed = a.candidates + r * a.capacity;
  const bool in_buffer = n <= a.capacity;
  if (!Cluster && cached && in_buffer) {
    for (std::uint32_t e = threadIdx.x; e < n; e += kSelectThreads) cache[e] = __ldcg(listed + e);
  }
  __syncthreads();
  // The bin's keys as a key set of 32-bit score keys; fn also gets the position.
  const auto bin_entries = [&](auto&& fn) {
    if (cached || in_buffer) {
      for (std::uint32_t base = 0; base < n; base += kSelectThreads) {
        const std::uint32_t e = base + threadIdx.x;
        const std::uint64_t v = e < n ? (cached ? cache[e] : __ldcg(listed + e)) : 0;
        fn(static_cast<std::uint32_t>(v >> 32), static_cast<std::int32_t>(static_cast<std::uint32_t>(v)), e < n);
      }
    } else {
      for (std::int32_t base = range.begin; base < range.end; base += kSelectThreads) {
        const std::int32_t i = base + static_cast<std::int32_t>(threadIdx.x);
        std::uint32_t key = 0;
        if (i < range.end) key = score_key_fast(__ldcg(row + i));
        fn(key, i, i < range.end && select_bin(key) == bin);
      }
    }
  };
  const auto bin_keys = [&](auto&& fn) {
    bin_entries([&](std::uint32_t key, std::int32_t, bool present) { fn(key, present); });
  };
  constexpr int kLowBits = 32 - kSelectBinBits;
  const std::uint32_t bin_lo = bin << kLowBits;
  const std::uint32_t bin_hi = bin_lo | ((1u << kLowBits) - 1);
  const selection::device::RadixResult<std::uint32_t> cut =
      selection::device::block_radix_select<true>(bin_keys, need, radix32, bin_lo, bin_hi);
  // The top `need` of the bin: its keys above the K-th (or, after a whole
  // digit bin, at or above the bin's least key), then ties with the K-th
  // up to take_equal (any of them: any-tie selection).
  bin_entries([&](std::uint32_t key, std::int32_t i, bool present) {
    if (!present) return;
    std::uint32_t at = ~0u;
    if (cut.whole_bin ? key >= cut.kth_key : key > cut.kth_key) {
      at = atomicAdd(&taken, 1u);
    } else if (!cut.whole_bin && key == cut.kth_key) {
      const std::uint32_t tie = atomicAdd(&tied, 1u);
      if (tie < cut.take_equal) at = atomicAdd(&taken, 1u);
    }
    if (at == ~0u) return;
    const std::uint32_t slot = p.above + at;
    if (slot >= static_cast<std::uint32_t>(K)) return;
    out[slot] = i;
    if (vals != nullptr) vals[slot] = __ldcg(row + i);
  });
  if constexpr (Cluster) cuda::ptx::barrier_cluster_wait();  // rank 0's: the second phase
}

}  // namespace dsa::decode
