// Compile-time shape of the standalone top-k kernel (docs/design.md, "GPU
// top-k"): launch geometry, the sampling/threshold constants of the selection
// model, the candidate capacities and the shared-memory plan the launcher
// sizes with sizeof.
#pragma once

#include <cub/block/block_radix_sort.cuh>

#include <cstdint>

#include "selection/device/radix.cuh"

namespace dsa::selection::topk {

// One CTA per row. 512 threads keep 2 CTAs (1024 threads, 64 registers each)
// resident per SM, so one CTA's latency-bound steps (sampling, radix passes,
// block barriers) overlap the other CTA's streaming pass.
inline constexpr int kThreads = 512;
inline constexpr int kMinCtasPerSm = 2;

// Filter pass: float4 loads in flight per thread per round; the round's 16
// elements share one warp-aggregated append.
inline constexpr int kLoadUnroll = 4;
// Repair sweeps over the row (rare paths) load one float4 per round.
inline constexpr int kRepairLoadUnroll = 1;

// Threshold (model.h step 1): S = min(len, clamp(16 * len / K, 2048, 8192))
// samples and the rank guard in standard deviations (underflow is a ~4-sigma
// event). e = S*K/len expected samples in the top K sets the spread of the
// candidate count, ~K * (e + guard * sqrt(e)) / e: the model's fixed S = 4096
// leaves e = 8 at K = 2048, len = 1M and a count that can pass the buffer;
// e >= 16 keeps its 4-sigma value near 3.5 K.
inline constexpr int kMinSamples = 2048;
inline constexpr int kMaxSamples = 8192;
inline constexpr int kMinExpectedInTop = 16;
inline constexpr double kGuard = 4.0;

// Candidates with key > tau (key + position): 8192 entries, above the
// 4-sigma candidate count for every K at every row length up to 1M (worst:
// K = 2048 at len = 1M: ~4.2K expected, 4-sigma ~7.2K).
inline constexpr int kCandidateCapacity = 8192;

template <int K>
struct Config {
  static_assert(K % kThreads == 0, "the sorted write-out gives each thread K / kThreads slots");
  static constexpr int kSlotsPerThread = K / kThreads;
  // Positions of keys == tau. K entries suffice for every use: the threshold-tie
  // path takes at most K of them, the underflow path has fewer than K.
  static constexpr int kTieCapacity = K;
  using BlockSort = cub::BlockRadixSort<std::uint64_t, kThreads, kSlotsPerThread>;

  // Shared memory of one CTA. Phases that never overlap share the union.
  struct SharedStorage {
    union {
      std::uint32_t sample_keys[kMaxSamples];  // step 1: threshold
      struct {
        std::uint32_t keys[kCandidateCapacity];  // steps 2-5: key > tau
        std::int32_t pos[kCandidateCapacity];    //   row position of keys[i]
      } candidates;
      typename BlockSort::TempStorage sort;    // sorted write-out, after emission
    } phase;
    std::int32_t tie_pos[kTieCapacity];  // row positions with key == tau
    std::uint64_t out[K];                // emitted order keys (candidates.cuh), 0 = padding
    device::RadixShared radix;
    std::uint32_t gt_slots;   // slots handed out to key > tau (may pass capacity)
    std::uint32_t tie_slots;  // slots handed out to key == tau (may pass capacity)
    std::uint32_t count_gt;   // keys > tau in the row (exact)
    std::uint32_t count_eq;   // keys == tau in the row (exact)
    std::uint32_t emitted;    // slots of out[] handed out (kAny ties may pass K)
  };
};

}  // namespace dsa::selection::topk
