// The paged indexer's fused selection (PagedPlan::fused_select, plan.h):
// the top K of few rows without the standalone top-k's passes over them.
//   1. The scoring kernel writes the scores as StoreSink does and, with
//      HistStoreSink, counts each row's score keys by their top
//      kSelectBinBits bits: per math warpgroup in shared memory, added into
//      the row's histogram in global memory (zeroed before the launch) at
//      the end of each unit.
//   2. The select kernel, launched programmatically after it, gives each
//      row select_parts CTAs. Each reads the row's histogram and finds the
//      bin holding the K-th largest key (every CTA the same bin), then
//      filters its part of the row's scores: keys above the bin take output
//      slots at once (one counter a row), keys in the bin are appended as
//      candidates, (score key, inverted position) pairs.
//   3. The row's last CTA to finish (a counter a row) selects the slots
//      still open from the candidates by the block radix select on their
//      64-bit keys, or from the row's scores when the bin held more
//      candidates than the buffer (ties, dead ReLU): exact either way.
// Output in no particular order, ties at the K-th score by the smaller
// position (any valid choice); rows of at most K keys return them all.
#pragma once

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/sm90/barrier.cuh"
#include "common/sm90/grid_dependency.cuh"
#include "decode/plan.h"
#include "scoring/config.h"
#include "scoring/epilogue.cuh"
#include "selection/device/radix.cuh"

namespace dsa::decode {

// StoreSink's scores and each row's histogram of score-key bins. Blocks of
// one query (H = 64, one token a request): a unit's block t0 is launch row
// t0, the row of the histogram it adds into.
struct HistStoreSink {
  float* scores;  // [rows, stride]
  std::int64_t stride;
  std::uint32_t* state;  // [rows, kSelectStateWords]: the histogram first, zero at launch
  struct Shared {
    std::uint32_t bins[scoring::kMathWarpgroups][kSelectBins];
  };
  template <int R>
  struct Lane {};
  __device__ void init(Shared& sh) const {
    for (int i = static_cast<int>(threadIdx.x); i < scoring::kMathWarpgroups * kSelectBins;
         i += static_cast<int>(blockDim.x)) {
      (&sh.bins[0][0])[i] = 0;
    }
  }
  template <int R>
  __device__ Lane<R> begin(std::int64_t, int, const RowRange (&)[R], int) const {
    return {};
  }
  template <int R>
  __device__ __forceinline__ void put(Lane<R>&, Shared& sh, std::int64_t t0, int lane, const std::int32_t (&key)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
    std::uint32_t* bins = sh.bins[threadIdx.x / scoring::kWarpgroupThreads - 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float* out_row = scores + (t0 + lane % 4 + 4 * r) * stride;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (valid[r][half]) {
          out_row[key[half]] = score[r][half];
          atomicAdd(&bins[score_key_fast(score[r][half]) >> (32 - kSelectBinBits)], 1u);
        }
      }
    }
  }
  // The warpgroup's counts of the unit, into the row's histogram (its
  // threads alone meet at a named barrier before and after, so the other
  // warpgroup's products go on).
  template <int R>
  __device__ void finish(Lane<R>&, Shared& sh, std::int64_t t0, int) const {
    const int wg = static_cast<int>(threadIdx.x) / scoring::kWarpgroupThreads - 1;
    sm90::named_barrier_sync(1 + wg, scoring::kWarpgroupThreads);
    std::uint32_t* bins = sh.bins[wg];
    std::uint32_t* row = state + t0 * kSelectStateWords;
    for (int b = static_cast<int>(threadIdx.x) % scoring::kWarpgroupThreads; b < kSelectBins;
         b += scoring::kWarpgroupThreads) {
      const std::uint32_t n = bins[b];
      if (n != 0) {
        atomicAdd(row + b, n);
        bins[b] = 0;
      }
    }
    sm90::named_barrier_sync(1 + wg, scoring::kWarpgroupThreads);
  }
};

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

// (score key, inverted position): larger is better, equal scores rank the
// smaller position first.
__device__ __forceinline__ std::uint64_t select_key(std::uint32_t key, std::int32_t position) {
  return (static_cast<std::uint64_t>(key) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(position));
}

__global__ void __launch_bounds__(kSelectThreads) paged_select_kernel(const SelectArgs a) {
  __shared__ std::uint32_t bins[kSelectBins];
  __shared__ std::uint32_t warp_sums[kSelectWarps];
  __shared__ selection::device::BinPick pick;
  __shared__ selection::device::RadixShared<std::uint64_t> radix;
  __shared__ std::uint32_t last, taken;
  const std::int64_t r = blockIdx.x / a.parts;
  const auto part = static_cast<std::int32_t>(blockIdx.x % a.parts);
  const int K = a.k;
  // The scores and the histogram are the scoring kernel's, launched before.
  sm90::wait_for_prerequisite_grids();
  const RowRange range = row_range(a.ks, a.ke, nullptr, r, a.num_keys);
  const std::int32_t len = range.end - range.begin;
  std::int32_t* out = a.indices + r * K;
  float* vals = a.values != nullptr ? a.values + r * K : nullptr;
  const float* row = a.scores + r * a.stride;
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
  std::uint32_t* state = a.state + r * kSelectStateWords;
  std::uint32_t* counters = state + kSelectBins;
  // The histogram, top bin first (pick_striped_bin's order); it counts the
  // row's len > K keys, so the pick exists.
  for (int i = static_cast<int>(threadIdx.x); i < kSelectBins; i += kSelectThreads) {
    bins[kSelectBins - 1 - i] = __ldcg(state + i);
  }
  __syncthreads();
  const selection::device::BinPick p = selection::device::pick_striped_bin<kSelectWarps, kSelectBins / kSelectThreads>(
      bins, warp_sums, pick, static_cast<std::uint32_t>(K));
  const std::uint32_t bin = kSelectBins - 1 - p.bin;  // the K-th key's: key >> (32 - kSelectBinBits)
  const std::uint32_t need = static_cast<std::uint32_t>(K) - p.above;  // slots the bin fills, 1..p.in
  const bool whole = need == p.in;  // the bin is taken whole: no candidates

  // This part's keys, kUnroll loads a thread in flight; every thread runs
  // the same iterations (the warp scans need converged warps).
  const std::int32_t per = ((len + a.parts - 1) / a.parts + 3) / 4 * 4;
  const std::int32_t lo = range.begin + part * per, hi = min(range.end, lo + per);
  constexpr int kUnroll = 4;
  for (std::int32_t base = lo; base < hi; base += kUnroll * kSelectThreads) {
    float score[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int32_t i = base + u * kSelectThreads + static_cast<std::int32_t>(threadIdx.x);
      score[u] = i < hi ? __ldcg(row + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int32_t i = base + u * kSelectThreads + static_cast<std::int32_t>(threadIdx.x);
      const std::uint32_t key = score_key_fast(score[u]);
      const std::uint32_t b = key >> (32 - kSelectBinBits);
      const bool present = i < hi;
      const bool take = present && (b > bin || (whole && b == bin));
      const bool candidate = present && !whole && b == bin;
      std::uint32_t total = 0;
      const std::uint32_t take_inclusive = selection::device::warp_count_scan(take ? 1u : 0u, total);
      if (total != 0) {
        const std::uint32_t slot =
            selection::device::warp_claim(counters + kTakenCounter, take ? 1u : 0u, take_inclusive);
        if (take && slot < static_cast<std::uint32_t>(K)) {
          out[slot] = i;
          if (vals != nullptr) vals[slot] = score[u];
        }
      }
      const std::uint32_t cand_inclusive = selection::device::warp_count_scan(candidate ? 1u : 0u, total);
      if (total != 0) {
        const std::uint32_t c =
            selection::device::warp_claim(counters + kCandidateCounter, candidate ? 1u : 0u, cand_inclusive);
        if (candidate && c < a.capacity) a.candidates[r * a.capacity + c] = select_key(key, i);
      }
    }
  }

  // The row's last CTA (its counter read after every other CTA's writes,
  // fenced before their increments) fills the slots the bin owes.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(counters + kDoneCounter, 1u) == static_cast<std::uint32_t>(a.parts - 1) ? 1u : 0u;
    __threadfence();
    taken = 0;
  }
  __syncthreads();
  if (last == 0 || whole) return;  // the same for every thread of the CTA
  const std::uint32_t n = __ldcg(counters + kCandidateCounter);  // the bin's keys: p.in
  const bool listed = n <= a.capacity;
  const std::uint64_t* listed_keys = a.candidates + r * a.capacity;
  // The bin's keys as a key set: the candidates, or the row's keys in the
  // bin when they did not all fit.
  const auto bin_keys = [&](auto&& fn) {
    if (listed) {
      for (std::uint32_t base = 0; base < n; base += kSelectThreads) {
        const std::uint32_t e = base + threadIdx.x;
        const bool present = e < n;
        fn(present ? __ldcg(listed_keys + e) : std::uint64_t{0}, present);
      }
    } else {
      for (std::int32_t base = range.begin; base < range.end; base += kSelectThreads) {
        const std::int32_t i = base + static_cast<std::int32_t>(threadIdx.x);
        bool present = i < range.end;
        std::uint64_t key = 0;
        if (present) {
          const std::uint32_t k32 = score_key_fast(__ldcg(row + i));
          key = select_key(k32, i);
          present = k32 >> (32 - kSelectBinBits) == bin;
        }
        fn(key, present);
      }
    }
  };
  constexpr int kLowBits = 64 - kSelectBinBits;
  const std::uint64_t bin_lo = static_cast<std::uint64_t>(bin) << kLowBits;
  const std::uint64_t bin_hi = bin_lo | ((std::uint64_t{1} << kLowBits) - 1);
  // Keys are distinct (positions differ), so the top `need` are exactly the
  // keys at or above the cut, whether or not the sweep stopped at a whole bin.
  const selection::device::RadixResult<std::uint64_t> cut =
      selection::device::block_radix_select<true>(bin_keys, need, radix, bin_lo, bin_hi);
  bin_keys([&](std::uint64_t key, bool present) {
    if (!present || key < cut.kth_key) return;
    const std::uint32_t slot = p.above + atomicAdd(&taken, 1u);
    if (slot >= static_cast<std::uint32_t>(K)) return;
    const auto i = static_cast<std::int32_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(key));
    out[slot] = i;
    if (vals != nullptr) vals[slot] = __ldcg(row + i);
  });
}

}  // namespace dsa::decode
