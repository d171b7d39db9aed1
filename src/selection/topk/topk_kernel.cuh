// The standalone top-k kernel: one CTA selects one row (docs/design.md, "GPU
// top-k"), following the steps of selection/model.h:
//   1. threshold tau from strided samples (a histogram over a key window of
//      the samples, refined over the chosen bin while it is too coarse);
//   2. one streaming pass: keys > tau -> candidate buffer, keys == tau -> tie
//      buffer, exact counts of both;
//   3. the path the counts prove exact (RowPath), then radix select and
//      emission of the K winners into shared memory as order keys;
//   4. optional block radix sort, and the write-out of indices (and values).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/sm90/prefetch.cuh"
#include "selection/device/candidates.cuh"
#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"
#include "selection/topk/config.h"
#include "selection/topk/topk.h"

namespace dsa::selection::topk {

struct KernelParams {
  const float* scores;          // [T, stride] fp32
  std::int64_t stride;          // elements between rows
  const std::int32_t* ks;       // [T]
  const std::int32_t* ke;       // [T]
  std::int64_t num_cols;        // every row is read clamped to [0, num_cols) (row_range)
  std::int32_t* indices;        // [T, K]
  float* values;                // [T, K] or null
  bool relative_indices;        // write s - ks[t] instead of s
  bool smallest_index_ties;     // TieBreak::kSmallestIndex
  bool sorted;                  // descending score (then ascending index)
  bool force_threshold;         // TopkHooks
  std::uint32_t forced_threshold_key;
  bool forced_tau_tie_free;     // TopkHooks
  RowTrace* trace;              // [T] or null
  const std::uint32_t* row_mask;  // [T] or null: rows with 0 are skipped
  std::uint32_t prefetch_bytes;   // of its row's start a sampled CTA prefetches into L2 (a multiple of 16; topk.cu)
};

// The work of one CTA on one row (geometry G, config.h). Item sets (candidates, ties, row ranges) are
// visitors: items(fn) makes every thread call fn(key, pos, present) the same
// number of times, so fn may use warp collectives.
template <int K, class G>
class RowSelect {
 public:
  using Cfg = Config<K, G>;
  using Storage = typename Cfg::SharedStorage;

  __device__ RowSelect(Storage& sh, const KernelParams& p, const float* row, std::int32_t len)
      : sh_(sh), p_(p), row_(row), len_(len) {}

  // Rows with len > K: leaves the K winners in sh.out and returns the trace.
  __device__ RowTrace select() {
    prefetch_row();
    RowTrace trace{};
    bool tie_free = false;
    const std::uint32_t tau = threshold(trace, tie_free);
    bool ties_counted = true;
    const std::uint32_t greatest = filter(tau, tie_free, ties_counted);
    const std::uint32_t count_gt = sh_.count_gt, count_eq = sh_.count_eq;
    trace.threshold_key = tau;
    trace.count_gt = count_gt;
    trace.count_eq = ties_counted ? count_eq : kUncounted;
    const auto all = [](std::uint32_t, std::int32_t) { return true; };
    if (count_gt >= K) {  // (always, when the filter skipped the ties)
      // The K-th key is > tau, and every key > tau is a candidate unless the
      // buffer overflowed; then the row itself is the item set.
      if (count_gt <= static_cast<std::uint32_t>(G::kCandidateCapacity)) {
        // The candidates' keys lie in [tau + 1, greatest]: the select starts
        // at the first digit where the bounds differ (candidates within one
        // octave share the top 9 bits; measured -0.6 % at 64K, since the
        // whole-bin stop already ended most selects early: docs/perf-log.md
        // "Session 11").
        trace.path = RowPath::kCertified;
        trace.kth_key = emitter().template select_and_emit_window<Cfg::kWarps>(
            candidate_items(count_gt), K, tau + 1, greatest, sh_.select_histogram, sh_.window);
      } else {
        trace.path = RowPath::kOverflow;
        trace.kth_key = select_and_emit(row_items(tau + 1, kMaxKey), K);
      }
    } else if (count_gt + count_eq >= K) {
      // The K-th key is tau: all keys > tau (count_gt < K <= capacity, all
      // stored) plus K - count_gt of the keys == tau.
      trace.kth_key = tau;
      emit_if(candidate_items(count_gt), all);
      __syncthreads();
      const std::uint32_t take = K - count_gt;
      if (!p_.smallest_index_ties || count_eq <= Cfg::kTieCapacity) {
        // kAny needs any `take` ties; min(count_eq, K) >= take are stored.
        trace.path = RowPath::kThresholdTie;
        emit_ties(tie_items(min(count_eq, static_cast<std::uint32_t>(Cfg::kTieCapacity)), tau), tau, take);
      } else {
        trace.path = RowPath::kTieRepair;
        emit_ties(row_items(tau, tau), tau, take);
      }
    } else {
      // Underflow: the count_gt + count_eq < K keys >= tau are all stored and
      // all selected; the rest is the top of the keys < tau (tau > 0 here,
      // since len > K keys are >= 0).
      trace.path = RowPath::kUnderflow;
      emit_if(candidate_items(count_gt), all);
      emit_if(tie_items(count_eq, tau), all);
      trace.kth_key = select_and_emit(row_items(0, tau - 1), K - count_gt - count_eq);
    }
    return trace;
  }

  // Thread 0 starts one bulk L2 prefetch of the row's first
  // p.prefetch_bytes (its whole 16-byte units): the copy engine fetches
  // them from DRAM while the CTA takes its samples and threshold, and the
  // filter's loads then hit L2 (docs/perf-log.md "Session 16").
  __device__ void prefetch_row() const {
    if (threadIdx.x != 0) return;
    const auto begin = (reinterpret_cast<std::uintptr_t>(row_) + 15) & ~std::uintptr_t{15};
    const auto body_end = reinterpret_cast<std::uintptr_t>(row_ + len_) & ~std::uintptr_t{15};
    sm90::prefetch_l2_bulk(begin, body_end < begin + p_.prefetch_bytes ? body_end : begin + p_.prefetch_bytes);
  }

  // Rows with len <= K: every position, then padding.
  __device__ void direct() { device::emit_whole_row<K, G::kThreads>(sh_.out, row_, len_); }

  // sh.out (K order keys) -> indices/values of the row, sorted if asked.
  __device__ void write_out(std::int64_t row_index, std::int32_t ks) {
    const float* row = row_;
    device::write_row<K, G::kThreads, typename Cfg::BlockSort>(
        sh_.out, sh_.phase.sort, p_.indices + row_index * K,
        p_.values != nullptr ? p_.values + row_index * K : nullptr, p_.relative_indices ? 0 : ks, p_.sorted,
        p_.smallest_index_ties, [row](std::int32_t pos, std::uint32_t) { return __ldg(row + pos); });  // the score's own bits
  }

 private:
  static constexpr std::uint32_t kMaxKey = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t kUncounted = std::numeric_limits<std::uint32_t>::max();  // RowTrace::count_eq

  // S: enough samples that e = S*K/len >= G::kMinExpectedInTop (then the
  // expected candidate count K*(1 + guard/sqrt(e)) stays well below the
  // buffer), within [kMinSamples, G::kMaxSamples], and at most len.
  __device__ static std::int32_t sample_count(std::int32_t len) {
    const std::int64_t wanted = static_cast<std::int64_t>(G::kMinExpectedInTop) * len / K;
    const auto clamped = static_cast<std::int32_t>(wanted < kMinSamples     ? kMinSamples
                                                   : wanted > G::kMaxSamples ? G::kMaxSamples
                                                                            : wanted);
    return min(len, clamped);
  }

  using KeyWindow = device::KeyWindow<kThresholdBinBits>;

  // One histogram pass over the first s stored samples restricted to window
  // w: the bin holding the window's rank-th largest sample (1 <= rank <= the
  // samples in w), picked by device::pick_owned_bin, which leaves the
  // histogram zero for the next pass. The histogram must be zero and the
  // samples visible at entry. Ends with a barrier; every thread gets the
  // result.
  __device__ typename Cfg::BinPick pick_sample_bin(const KeyWindow& w, std::int32_t s, std::uint32_t rank) {
    auto& th = sh_.phase.threshold;
    // A plain atomic (ATOMS.POPC.INC), as in every other histogram: the
    // merged form (__match_any_sync per round, one atomic per distinct bin)
    // held this pass ~5 K cycles a row and cost 32K rows 4-10 %
    // (docs/perf-log.md "Session 15"). No warp collective, so the loop needs
    // no block-uniform trip count.
    for (std::int32_t i = threadIdx.x; i < s; i += G::kThreads) {
      const std::uint32_t key = th.sample_keys[i];
      if (w.holds(key)) atomicAdd(&th.histogram[w.bin(key)], 1u);
    }
    __syncthreads();
    std::uint32_t in_window = 0;  // >= rank (the caller's rank is inside w)
    return device::pick_owned_bin<typename Cfg::BinScan, Cfg::kBinsPerThread>(th.histogram, th.scan, sh_.pick, rank,
                                                                             in_window);
  }

  // Step 1 (model.h): tau at or below the sample of rank j = ceil(e + guard *
  // sqrt(e)) + 1, e = S*K/len, among S midpoint samples; 0 (every key passes)
  // when j > S. Any tau is exact (the counts pick the path); tau is the bottom
  // of the histogram bin holding rank j, so the bin adds candidates. While
  // the samples at or above the bin's bottom pass j * (1 + kMaxBinExcess),
  // the bin itself is histogrammed again (at most 3 passes: 12 bits each over
  // a 32-bit span); one key per bin gives tau = the sample itself, as on
  // tie-heavy rows, whose tied value must be tau, not above it.
  // tie_free: tau is the bottom of a bin of samples more than one key wide
  // (the rank-j sample lies in it, and is most likely above its bottom), so
  // the filter may skip the tie compare; false for a forced tau, tau = 0 and
  // a one-key bin (the tied value of a tie-heavy row); a forced tau takes
  // TopkHooks::forced_tau_tie_free.
  // Records the histogram passes in trace. Ends with a barrier in every branch.
  __device__ std::uint32_t threshold(RowTrace& trace, bool& tie_free) {
    // Samples come in groups of kSampleGroup neighbours (one 32-byte sector)
    // unless every key is a sample.
    std::int32_t s = sample_count(len_);
    if (s < len_) s -= s % kSampleGroup;
    const double expected = static_cast<double>(s) * K / len_;
    const double rank = fmax(1.0, ceil(expected + kGuard * sqrt(expected)) + 1.0);
    if (p_.force_threshold || rank > s) {
      __syncthreads();  // the counters thread 0 reset are visible to the filter
      tie_free = p_.force_threshold && p_.forced_tau_tie_free;
      return p_.force_threshold ? p_.forced_threshold_key : 0u;
    }
    auto& th = sh_.phase.threshold;
    std::uint32_t lo = kMaxKey, hi = 0;
    if (s == len_) {
      for (std::int32_t i = threadIdx.x; i < s; i += G::kThreads) {
        const std::uint32_t key = score_key(__ldg(row_ + i));
        th.sample_keys[i] = key;
        lo = min(lo, key);
        hi = max(hi, key);
      }
    } else {
      // Group g: the sector at the midpoint of the g-th of s / kSampleGroup
      // equal stretches of the row's sector-aligned body. A sample read
      // alone cost a whole sector (32 bytes for 4); with the row read once
      // by the filter that was a third of the traffic at 32K rows.
      const auto misalign = static_cast<std::int32_t>((reinterpret_cast<std::uintptr_t>(row_) / sizeof(float)) % kSampleGroup);
      const std::int32_t head = (kSampleGroup - misalign) % kSampleGroup;
      const std::int32_t sectors = (len_ - head) / kSampleGroup;
      const std::int32_t groups = s / kSampleGroup;
      const float4* body = reinterpret_cast<const float4*>(row_ + head);
      for (std::int32_t g = threadIdx.x; g < groups; g += G::kThreads) {
        const std::int64_t sector = (2 * static_cast<std::int64_t>(g) + 1) * sectors / (2 * groups);
        const float4 a = __ldg(body + 2 * sector), b = __ldg(body + 2 * sector + 1);
        const float v[kSampleGroup] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < kSampleGroup; ++j) {
          const std::uint32_t key = score_key_fast(v[j]);
          th.sample_keys[kSampleGroup * g + j] = key;
          lo = min(lo, key);
          hi = max(hi, key);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < Cfg::kBinsPerThread; ++b) th.histogram[threadIdx.x * Cfg::kBinsPerThread + b] = 0;
    sh_.key_range.publish(lo, hi);
    __syncthreads();  // samples, key range and zeroed histogram visible
    sh_.key_range.gather(lo, hi);
    KeyWindow window(lo, hi);
    auto wanted = static_cast<std::uint32_t>(rank);  // rank inside the window
    std::uint32_t above = 0;                          // samples above the window
    for (;;) {
      ++trace.threshold_passes;
      const typename Cfg::BinPick pick = pick_sample_bin(window, s, wanted);
      const double through = above + pick.above + pick.in;  // samples >= the bin's bottom
      if (window.shift == 0 || through <= rank * (1.0 + kMaxBinExcess)) {
        tie_free = window.shift != 0;
        return window.bin_bottom(pick.bin);
      }
      above += pick.above;
      wanted -= pick.above;
      window = KeyWindow(window.bin_bottom(pick.bin), window.bin_top(pick.bin));
    }
  }

  // Step 2: one pass over the row; exact counts land in sh.count_gt/count_eq.
  // Returns the greatest key stored in the candidate buffer (every thread;
  // 0 when none). With tie_free (threshold()) and a float tau, the pass
  // first compares once an element (keys > tau only: ~2.5 of ~5 instructions
  // an element, docs/perf-log.md "Session 11"); if that finds fewer than K,
  // which the sampled rank makes a ~4-sigma miss, the row is filtered again
  // with both compares. ties_counted: sh.count_eq holds the row's ties (else
  // count_gt >= K, and the ties were not looked at).
  __device__ std::uint32_t filter(std::uint32_t tau, bool tie_free, bool& ties_counted) {
    // The candidates' select histogram (select_and_emit_window), zero at
    // its first pass: out[] is not written before the emission.
    for (int b = threadIdx.x; b < device::kWindowBins; b += G::kThreads) sh_.select_histogram[b] = 0;
    const device::CandidateSink sink{sh_.phase.candidates.keys, sh_.phase.candidates.pos,
                                     static_cast<std::uint32_t>(G::kCandidateCapacity),
                                     &sh_.gt_slots, sh_.tie_pos, Cfg::kTieCapacity, &sh_.tie_slots};
    std::uint32_t greatest = 0;
    // One pass; ends with a barrier, the counts and `greatest` then visible.
    const auto pass = [&](auto ties, const auto& threshold) {
      device::FilterTally tally;
      device::for_each_row_batch<G::kThreads, G::kLoadUnroll>(row_, len_, [&](const auto& batch) {
        device::filter_batch<decltype(ties)::value>(batch, threshold, sink, row_, tally);
      });
      const std::uint32_t count_gt = __reduce_add_sync(device::kFullWarp, tally.count_gt);
      const std::uint32_t count_eq = __reduce_add_sync(device::kFullWarp, tally.count_eq);
      if (device::lane_id() == 0) {
        atomicAdd(&sh_.count_gt, count_gt);
        atomicAdd(&sh_.count_eq, count_eq);
      }
      sh_.key_range.publish(0, tally.greatest);  // the samples' range is no longer read
      __syncthreads();
      std::uint32_t least = 0;
      sh_.key_range.gather(least, greatest);
    };
    using WithTies = std::true_type;
    using WithoutTies = std::false_type;
    ties_counted = true;
    if (!device::float_comparable(tau)) {
      pass(WithTies{}, device::KeyThreshold{tau});
      return greatest;
    }
    const device::FloatThreshold threshold{key_score(tau)};
    if (tie_free) {
      pass(WithoutTies{}, threshold);
      if (sh_.count_gt >= K) {  // the same for every thread
        ties_counted = false;
        return greatest;
      }
      __syncthreads();  // every thread has read count_gt
      if (threadIdx.x == 0) sh_.gt_slots = sh_.count_gt = 0;
      __syncthreads();
    }
    pass(WithTies{}, threshold);
    return greatest;
  }

  // The first n stored candidates (n <= capacity).
  __device__ auto candidate_items(std::uint32_t n) {
    return [this, n](auto&& fn) {
      for (std::uint32_t base = 0; base < n; base += G::kThreads) {
        const std::uint32_t i = base + threadIdx.x;
        const bool present = i < n;
        fn(present ? sh_.phase.candidates.keys[i] : 0u, present ? sh_.phase.candidates.pos[i] : 0, present);
      }
    };
  }

  // The first n stored tie positions, all with key tau (n <= tie capacity).
  __device__ auto tie_items(std::uint32_t n, std::uint32_t tau) {
    return [this, n, tau](auto&& fn) {
      for (std::uint32_t base = 0; base < n; base += G::kThreads) {
        const std::uint32_t i = base + threadIdx.x;
        const bool present = i < n;
        fn(tau, present ? sh_.tie_pos[i] : 0, present);
      }
    };
  }

  // The row's elements with lo <= key <= hi, read from global memory (repairs:
  // one 16-byte load per round, as the emission inside fn needs registers).
  __device__ auto row_items(std::uint32_t lo, std::uint32_t hi) {
    return [this, lo, hi](auto&& fn) {
      device::for_each_row_batch<G::kThreads, kRepairLoadUnroll>(row_, len_, [&](const auto& batch) {
#pragma unroll
        for (int e = 0; e < batch.kElements; ++e) {
          const std::uint32_t key = score_key(batch.at(e));
          fn(key, batch.pos(e), batch.present(e) && lo <= key && key <= hi);
        }
      });
    };
  }

  // Steps 4-5 (selection/device/emit.cuh).
  __device__ device::Emitter<K> emitter() const {
    return device::Emitter<K>(sh_.out, &sh_.emitted, sh_.radix, p_.smallest_index_ties);
  }
  template <class Items, class Pred>
  __device__ void emit_if(const Items& items, const Pred& pred) {
    emitter().emit_if(items, pred);
  }
  template <class Items>
  __device__ void emit_ties(const Items& items, std::uint32_t kth, std::uint32_t take) {
    emitter().emit_ties(items, kth, take);
  }
  // lo <= every item's key <= hi (block-uniform bounds).
  template <class Items>
  __device__ std::uint32_t select_and_emit(const Items& items, std::uint32_t k, std::uint32_t lo = 0,
                                           std::uint32_t hi = kMaxKey) {
    return emitter().select_and_emit(items, k, lo, hi);
  }

  Storage& sh_;
  const KernelParams& p_;
  const float* row_;   // scores of positions 0 .. len-1 (key index ks + pos)
  std::int32_t len_;
};

template <int K, class G>
__global__ void __launch_bounds__(G::kThreads, G::kMinCtasPerSm) topk_kernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto& sh = *reinterpret_cast<typename Config<K, G>::SharedStorage*>(smem);
  const std::int64_t t = blockIdx.x;
  if (p.row_mask != nullptr && p.row_mask[t] == 0) return;  // the same for every thread
  const RowRange range = row_range(p.ks, p.ke, nullptr, t, p.num_cols);
  const std::int32_t ks = range.begin;
  const std::int32_t len = range.end - range.begin;
  RowSelect<K, G> row(sh, p, p.scores + t * p.stride + ks, len);
  if (threadIdx.x == 0) {
    sh.gt_slots = sh.tie_slots = sh.count_gt = sh.count_eq = sh.emitted = 0;
  }
  RowTrace trace{RowPath::kDirect, 0, 0, 0, 0, 0};
  if (len <= K) {
    row.direct();
  } else {
    trace = row.select();
  }
  __syncthreads();  // sh.out is complete
  row.write_out(t, ks);
  if (p.trace != nullptr && threadIdx.x == 0) p.trace[t] = trace;
}

}  // namespace dsa::selection::topk
