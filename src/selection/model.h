// CPU model of the GPU selection algorithm (docs/design.md, "Selection").
//
// This is the algorithm the standalone GPU top-k and the fused kernel
// implement, written plainly so it can be property-tested against the exact
// reference. One row at a time:
//
//  1. Threshold. Take S = min(`sample_size`, len) scores at the midpoints of
//     S equal strides, positions floor((2i+1) * len / (2S)) for i < S (every
//     position when S == len), and pick as threshold tau the sample of rank
//        j = ceil(S*K/len + guard * sqrt(S*K/len)) + 1   (1 = largest)
//     so that about j*len/S >= K scores of the row are >= tau. If j > S,
//     tau = the smallest key, 0 (every score passes).
//  2. Filter (one pass, compare and append only). The row is cut into
//     segments of `segment_len` consecutive keys (a CTA's or warp's share of
//     the row on the GPU). Each segment appends the (key, index) of every score
//     with key >= tau to its own buffer of `segment_capacity` entries; a full
//     segment buffer spills into the row's shared spill area of
//     `spill_capacity` entries; when that is full too the candidate is dropped
//     and the segment is flagged. Every passing score is counted.
//  3. Certificate. If count >= K and nothing was dropped, the candidates hold
//     every score >= tau, there are at least K of them, so the K-th largest
//     score of the row is >= tau and the exact top-K is among the candidates.
//  4. Radix select on the candidates: 4 passes of 8-bit digits on the uint32
//     keys, most significant first, find the K-th largest key `kth` and how
//     many candidates equal to it must be taken.
//  5. Emission: every candidate with key > kth, plus the needed number of
//     key == kth. Default ties: any (the model takes the first in candidate
//     order). Deterministic ties: the smallest indices, found by the same radix
//     select on ~index among the tied candidates.
//
// Failure classes and their exact repairs, applied in this order:
//  * total overflow (count > total capacity: segments' buffers + spill): tau
//    was far too low. Repair: radix select over the whole row restricted to
//    keys >= tau (count >= K proves the answer lies there). When the total
//    capacity is below K, count may be < K too; then the answer reaches
//    below tau and the select runs over the whole row unrestricted.
//  * segment overflow (some candidates dropped, count <= total capacity):
//    repair: discard the flagged segments' stored entries (in their buffers
//    and in the spill: which of them were dropped is unknown once segments
//    race for the spill) and re-filter only the flagged segments with the
//    same tau into a repair buffer (at most `count` entries), which makes the
//    candidate set complete again. A drop means the spill and one segment
//    buffer are full, so count > segment_capacity + spill_capacity: the
//    underflow below can follow only when that sum is below K.
//  * underflow (count < K): tau was too high. Every candidate is selected and
//    the remaining K - count come from a radix select over the whole row
//    restricted to keys < tau.
// Rows with len <= K are emitted directly and never enter the pipeline.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "selection/threshold.h"

namespace dsa::selection {

struct ModelConfig {
  int k = 2048;
  int sample_size = 4096;          // S
  float guard = kThresholdGuard;   // standard deviations of the sample rank estimate (threshold.h)
  std::int64_t segment_len = 8192; // keys per segment
  int segment_capacity = 2048;     // candidate entries per segment buffer
  int spill_capacity = 4096;       // candidate entries of the row's spill area
  TieBreak ties = TieBreak::kAny;
  // Test hooks that force a failure class: when `force_threshold` is set the
  // sampled estimate is replaced by `forced_threshold_key`.
  bool force_threshold = false;
  std::uint32_t forced_threshold_key = 0;
};

enum class ModelPath : std::uint8_t {
  kDirect,           // len <= K: all indices emitted, no selection
  kCertified,        // certificate held: radix select on candidates
  kUnderflow,        // count < K, repaired
  kSegmentOverflow,  // dropped candidates, repaired by re-filtering segments
  kTotalOverflow,    // count > total capacity, repaired by full-row select
};
const char* to_string(ModelPath path);

struct ModelRowTrace {
  ModelPath path = ModelPath::kDirect;
  std::uint32_t threshold_key = 0;
  std::int64_t count = 0;           // scores with key >= threshold
  std::int64_t dropped = 0;         // candidates that found no room
  int overflowed_segments = 0;
  bool underflow_after_repair = false;  // segment repair completed, then count < K
  std::uint32_t kth_key = 0;        // key of the K-th largest score (0 for kDirect)
};

// Selects the top min(K, len) of `row` (scores of keys base .. base+len-1).
// Writes min(K, len) indices (absolute: base + position) to `out_indices`
// (in emission order, unsorted) and returns the trace of the path it took.
ModelRowTrace model_select_row(std::span<const float> row, std::int64_t base, const ModelConfig& config,
                               std::vector<std::int32_t>* out_indices);

// The exact radix select the model uses: the K-th largest key among `keys`
// (1 <= k <= keys.size()) and how many keys equal to it belong to the top k.
struct RadixResult {
  std::uint32_t kth_key = 0;
  std::int64_t take_equal = 0;  // of the keys == kth_key, how many are in the top k
};
RadixResult radix_select(std::span<const std::uint32_t> keys, std::int64_t k);

}  // namespace dsa::selection
