// Compile-time shape of the standalone top-k kernels (docs/design.md, "GPU
// top-k"): on the launch geometries (geometry.h), the sampling/threshold
// constants of the selection model and the shared-memory plans the launcher
// sizes with sizeof.
#pragma once

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"
#include "selection/topk/geometry.h"

namespace dsa::selection::topk {

// A row split over a cluster of CTAs (topk_split_kernel, for launches of
// fewer rows than the device holds CTAs): every CTA of the cluster takes
// the same samples and threshold, filters its own part of the row into its
// own buffers; the ranks write their counts into each other's tables and
// their candidates into rank 0's buffers (distributed shared memory), and
// rank 0 selects the row. At most kMaxSplit CTAs a row (geometry.h).
struct SplitShared {
  const float* row;  // the whole row (the filter reads this CTA's part)
  std::int32_t len;
  // Every rank's counts of the filter's last pass, written by each rank
  // into every rank's table (the cluster barrier after them publishes).
  std::uint32_t count_gt[kMaxSplit];
  std::uint32_t count_eq[kMaxSplit];
  std::uint32_t greatest_of[kMaxSplit];  // the greatest key each rank stored
};

// Repair sweeps over the row (rare paths) load one float4 per round.
inline constexpr int kRepairLoadUnroll = 1;

// Threshold (model.h step 1): S = min(len, clamp(G::kMinExpectedInTop * len
// / K, 2048, G::kMaxSamples)) samples, and the rank of selection/threshold.h
// (its guard: underflow is a ~4-sigma event). e = S*K/len expected samples
// in the top K sets the spread of the candidate count, ~K * (e + guard *
// sqrt(e)) / e: the model's fixed S = 4096 leaves e = 8 at K = 2048, len = 1M
// and a count that can pass the buffer; e >= 16 keeps its 4-sigma value
// near 7.2 K (LongRows' 8192 entries), e >= 128 near 3.6 K (LongRows64K's
// 4096).
// Each row draws its own samples from its range, unlike the fused
// operator's key samples shared by every row (fused/config.h,
// kMinSampledKeys).
inline constexpr int kMinRowSamples = 2048;
// Samples are read kSampleGroup neighbours at a time (one 32-byte sector:
// any tau is exact, and scores without positional structure lose nothing).
inline constexpr int kSampleGroup = 8;

// The threshold histogram: kThresholdBins linear bins over the samples' key
// range, one pass over the samples; the chosen bin is histogrammed again
// while the samples at or above its bottom exceed the rank j by more than
// kMaxBinExcess * j. With that excess the 4-sigma count still fits the
// buffer where the rank alone fits it (1M, K = 2048: 37 + 4 sqrt(37) = 61
// samples <= 8192 * 8192 / 1M = 64), and each extra candidate costs every
// radix pass over the buffer more than one more histogram pass costs.
inline constexpr int kThresholdBinBits = 12;
inline constexpr int kThresholdBins = 1 << kThresholdBinBits;
inline constexpr double kMaxBinExcess = 0.125;

template <int K, class G>
struct Config {
  static_assert(K % G::kThreads == 0, "the sorted write-out gives each thread K / threads slots");
  static_assert(kThresholdBins % G::kThreads == 0, "each thread owns whole threshold bins");
  static constexpr int kSlotsPerThread = K / G::kThreads;
  static constexpr int kBinsPerThread = kThresholdBins / G::kThreads;
  // Positions of keys == tau. K entries suffice for every use: the threshold-tie
  // path takes at most K of them, the underflow path has fewer than K.
  static constexpr int kTieCapacity = K;
  using BlockSort = cub::BlockRadixSort<std::uint64_t, G::kThreads, kSlotsPerThread>;
  using BinScan = cub::BlockScan<std::uint32_t, G::kThreads, cub::BLOCK_SCAN_WARP_SCANS>;

  using BinPick = device::BinPick;  // the threshold's (and the candidates' select's) bin of a wanted rank
  static constexpr int kWarps = G::kThreads / device::kWarpSize;

  // Shared memory of one CTA. Phases that never overlap share the union.
  struct SharedStorage {
    union {
      struct {
        std::uint32_t sample_keys[G::kMaxSamples];
        std::uint32_t histogram[kThresholdBins];  // bin 0 = top of the window
        typename BinScan::TempStorage scan;
      } threshold;  // step 1
      struct {
        std::uint32_t keys[G::kCandidateCapacity];  // steps 2-5: key > tau
        std::int32_t pos[G::kCandidateCapacity];    //   row position of keys[i]
      } candidates;
      typename BlockSort::TempStorage sort;  // sorted write-out, after emission
    } phase;
    std::int32_t tie_pos[kTieCapacity];  // row positions with key == tau
    union {
      std::uint64_t out[K];  // emitted order keys (candidates.cuh), 0 = padding
      // The certified rows' select (Emitter::select_and_emit_window), before
      // any emission; zeroed by the filter, zero between passes.
      std::uint32_t select_histogram[device::kWindowBins];
    };
    device::WindowSelectShared<kWarps> window;
    device::RadixShared<std::uint32_t> radix;
    BinPick pick;                                     // broadcast of the threshold bin
    device::BlockKeyRange<G::kThreads> key_range;  // of the samples (step 1), then the stored candidates (step 2)
    std::uint32_t gt_slots;   // slots handed out to key > tau (may pass capacity)
    std::uint32_t tie_slots;  // slots handed out to key == tau (may pass capacity)
    std::uint32_t count_gt;   // keys > tau in the row (exact)
    std::uint32_t count_eq;   // keys == tau in the row (exact)
    std::uint32_t emitted;    // slots of out[] handed out (kAny ties may pass K)
    SplitShared split;        // topk_split_kernel only
  };
};

// Key of an empty slot of a resident row (the resident kernel's head and
// tail padding, a cluster-resident part's slots outside the row): below
// every score's key (>= kNegInfKey > 0), so it is never counted or emitted.
inline constexpr std::uint32_t kPadKey = 0;

// The cluster-resident kernel's shared plan (cluster_kernel.cuh; its
// geometry ClusterRows in geometry.h).
template <int K>
struct ClusterConfig {
  static_assert(K % ClusterRows::kThreads == 0, "the sorted write-out gives each thread K / threads slots");
  // Radix digits of the passes: 11, 11 and 10 bits from the top.
  static constexpr int kFirstDigitBits = 11;
  static constexpr int kDigitBits = 11;
  static constexpr int kMaxPasses = 3;
  static constexpr int kBins = 1 << kDigitBits;
  static constexpr int kWarps = ClusterRows::kThreads / device::kWarpSize;
  static constexpr int kBinRows = kBins / (kWarps * device::kWarpSize);  // device::pick_striped_bin's rows a warp
  static_assert(kBins % ClusterRows::kThreads == 0, "each thread adds whole bins");
  static_assert((kNegInfKey >> (32 - kFirstDigitBits)) != (kPadKey >> (32 - kFirstDigitBits)),
                "the padding's first digit is no score's");
  using BlockSort = cub::BlockRadixSort<std::uint64_t, ClusterRows::kThreads, K / ClusterRows::kThreads>;
  using Scan = cub::BlockScan<std::uint32_t, ClusterRows::kThreads, cub::BLOCK_SCAN_WARP_SCANS>;

  // The fixed part of a CTA's shared memory; its part's keys follow at
  // kKeysOffset.
  struct SharedStorage {
    std::uint32_t local_histogram[kBins];    // this rank's counts of the pass's digit (bin 0 = the top digit)
    std::uint32_t cluster_histogram[kBins];  // rank 0: the cluster's counts, added by every rank
    union {
      std::uint64_t out[K];  // rank 0, sorted or deterministic rows: every rank's winners as order keys
      typename BlockSort::TempStorage sort;  // rank 0's sorted write-out, after the last cluster barrier
    } work;
    typename Scan::TempStorage scan;  // smallest-index ties' rank by position
    std::uint32_t warp_sums[kWarps];  // device::pick_striped_bin's
    device::BinPick pick;             // the pass's bin: rank 0's pick, written into every rank
    std::uint32_t part_gt[kMaxSplit];  // every rank's taken keys above the cut (written by each rank)
    std::uint32_t part_eq[kMaxSplit];  // every rank's ties of the K-th key
    std::uint32_t local_gt, local_eq;  // this rank's counts, summed over its warps
    std::uint32_t taken_gt, taken_eq;  // slots claimed by this rank's warps
  };
  static constexpr std::size_t kKeysOffset = (sizeof(SharedStorage) + 15) / 16 * 16;
  // The launch's shared memory for rows of up to num_cols keys over `size` CTAs.
  static constexpr std::size_t smem_bytes(std::int64_t num_cols, int size) {
    return kKeysOffset + static_cast<std::size_t>(cluster_part_keys(num_cols, size)) * sizeof(std::uint32_t);
  }
  static constexpr std::size_t kMaxSmemBytes = kKeysOffset + ClusterRows::kMaxPartKeys * sizeof(std::uint32_t);
};

template <int K, class R>
struct ResidentConfig {
  static_assert(K % R::kThreads == 0, "the sorted write-out gives each thread K / threads slots");
  // The histogram shares its storage with out[] (16 KB at K = 2048).
  static constexpr int kBinBits = R::kBinBits;
  static constexpr int kBins = 1 << kBinBits;
  static constexpr int kFirstBinBits = R::kFirstBinBits;
  static constexpr int kFirstBins = 1 << kFirstBinBits;
  static_assert(kFirstBins <= kBins, "the first pass's bins share the histogram");
  static_assert(kFirstBins % R::kThreads == 0 && kBins % R::kThreads == 0,
                "each lane owns whole rows of 32 bins (device::pick_striped_bin)");
  // Histogram passes a row takes at most: the first, then kBinBits a pass.
  static constexpr int kMaxPasses = 1 + (32 - kFirstBinBits + kBinBits - 1) / kBinBits;
  static_assert(R::kThreads % 32 == 0 && R::kThreads / 32 <= 32, "whole warps, at most 32");
  static constexpr int kBinsPerThread = kBins / R::kThreads;  // rows of 32 bins a warp owns
  static constexpr int kFirstBinsPerThread = kFirstBins / R::kThreads;  // the same in the first pass
  using Scan = cub::BlockScan<std::uint32_t, R::kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  using BlockSort = cub::BlockRadixSort<std::uint64_t, R::kThreads, K / R::kThreads>;

  using BinPick = device::BinPick;  // the pass's bin of the wanted rank

  struct SharedStorage {
    union {
      // Slot s holds the key of row position s - misalignment (< 4), so the
      // row's 16-byte aligned body sits on 16-byte aligned slots; the first
      // and last slot groups are padded with kPadKey.
      alignas(16) std::uint32_t keys[R::kMaxLen + 8];
      typename BlockSort::TempStorage sort;  // sorted write-out, after emission
    } row;
    union {
      std::uint32_t histogram[kBins + 1];  // steps 1-2; zero between passes; [kBins]: spare (never read)
      std::uint64_t out[K];            // step 3: emitted order keys
    } work;
    typename Scan::TempStorage scan;
    std::uint32_t warp_sums[R::kThreads / 32];  // the pick's per-warp bin sums (device::pick_striped_bin)
    BinPick pick;  // broadcast of the pass's bin
    device::BlockKeyRange<R::kThreads> key_range;  // the trace of a whole-bin row (its least key)
    std::uint32_t emitted;    // keys appended to out[] from slot 0 (the top K, or those above the K-th)
    std::uint32_t tie_slots;  // ties appended (at slots count_gt + it; may pass K - count_gt)
  };
};

}  // namespace dsa::selection::topk
