// The standalone top-k kernel: one CTA selects one row (docs/design.md, "GPU
// top-k"), following the steps of selection/model.h:
//   1. threshold tau from strided samples (a histogram over a key window of
//      the samples, refined over the chosen bin while it is too coarse);
//   2. one streaming pass: keys > tau -> candidate buffer, keys == tau -> tie
//      buffer, exact counts of both;
//   3. the path the counts prove exact (TopkPath), then radix select and
//      emission of the K winners into shared memory as order keys;
//   4. optional block radix sort, and the write-out of indices (and values).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/sm90/grid_dependency.cuh"
#include "common/sm90/prefetch.cuh"
#include "selection/device/candidates.cuh"
#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"
#include "selection/threshold.h"
#include "selection/topk/config.h"
#include "selection/topk/topk.h"
#include "selection/topk/trace.h"

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
  TopkRowTrace* trace;              // [T] or null
  const std::uint32_t* row_mask;  // [T] or null: rows with 0 are skipped
  std::uint32_t prefetch_bytes;   // of its row's start a sampled CTA prefetches into L2 (a multiple of 16; topk.cu)
  bool after_producer;            // TopkHooks: launched programmatically after the scores' producer
};

// A CTA of a launch with after_producer waits for the producer's end before
// it reads anything; an ordinary launch skips the instruction (measured
// 0.6 % on 4096 x 8K / 16K when every CTA took it).
__device__ __forceinline__ void wait_for_producer(const KernelParams& p) {
  if (p.after_producer) sm90::wait_for_prerequisite_grids();
}

// The work of one CTA on one row (geometry G, config.h), or of one CTA of a
// cluster that splits the row (select_split). Item sets (candidates, ties,
// row ranges) are visitors: items(fn) makes every thread call fn(key, pos,
// present) the same number of times, so fn may use warp collectives.
template <int K, class G>
class RowSelect {
 public:
  using Cfg = Config<K, G>;
  using Storage = typename Cfg::SharedStorage;

  __device__ RowSelect(Storage& sh, const KernelParams& p, const float* row, std::int32_t len)
      : sh_(sh), p_(p), row_(row), len_(len) {}

  // Rows with len > K: leaves the K winners in sh.out and returns the trace.
  __device__ TopkRowTrace select() {
    prefetch(0, len_);
    TopkRowTrace trace{};
    bool tie_free = false;
    const std::uint32_t tau = threshold(trace, tie_free);
    bool ties_counted = true;
    const Totals totals = filter(tau, tie_free, ties_counted, Alone{sh_});
    finish(trace, tau, totals, ties_counted);
    return trace;
  }

  // select() for a row split over the CTAs of this CTA's cluster (one row a
  // cluster, every CTA of it here): each takes the row's samples and
  // threshold (the same tau: a function of the samples alone) and filters
  // its own part of the row (split_point); the counts of every pass are the
  // cluster's sums, so every CTA takes the same branches; the others then
  // write their candidates and ties into rank 0's buffers, and rank 0
  // selects. Returns true on rank 0 (the K winners in sh.out, the trace
  // set), false on the others, which are done.
  __device__ bool select_split(TopkRowTrace& trace) {
    const auto cluster = cooperative_groups::this_cluster();
    // A CTA may write another's shared memory only once that one has
    // started (racecheck: "a block that might not have entered yet"): each
    // arrives here and waits before the filter's first exchange, by when
    // the threshold has long hidden the barrier.
    auto started = cluster.barrier_arrive();
    const unsigned rank = cluster.block_rank(), size = cluster.num_blocks();
    const std::int32_t begin = split_point(rank, size), end = split_point(rank + 1, size);
    prefetch(begin, end - begin);
    // The row's pointer and length wait in shared memory while the filter
    // reads this CTA's part through row_ and len_ (held in registers across
    // the filter as well, they spilled in a build with LongRows CTAs at K =
    // 512 and 1024); the threshold's barriers publish them.
    if (threadIdx.x == 0) {
      sh_.split.row = row_;
      sh_.split.len = len_;
    }
    bool tie_free = false;
    const std::uint32_t tau = threshold(trace, tie_free);
    cluster.barrier_wait(std::move(started));
    row_ += begin;
    len_ = end - begin;
    bool ties_counted = true;
    const Totals totals = filter(tau, tie_free, ties_counted, Clustered{sh_});
    row_ = sh_.split.row;
    len_ = sh_.split.len;
    if (cluster.block_rank() != 0) push_split(totals, ties_counted);
    cluster.sync();  // the parts' candidates and ties are in rank 0's buffers
    if (cluster.block_rank() != 0) return false;
    finish(trace, tau, totals, ties_counted);
    return true;
  }

  // An entry row (KernelParams::entries) instead of select(): its entries
  // at or above the floor packed into the candidate buffer (past its
  // capacity every pass reads the area again and skips the rest), then the
  // window select over them, or all of them when they are at most K (a
  // floor above 0 has K entries at or above it, so only a row whose floor
  // is 0 has fewer). Leaves the K winners in sh.out. The floor keeps every
  // tie with the K-th entry, so any tie rule cuts among the entries.
  __device__ void select_entries(const EntryRows& e, std::int64_t t) {
    const std::uint64_t* area = e.areas + t * e.capacity;
    // An area holds an entry for each key of the row, so the count never
    // passes it; the clamp keeps a broken count inside the area.
    const std::uint32_t c = min(e.count[t], static_cast<std::uint32_t>(e.capacity));
    const std::uint32_t floor = e.floor[t];
    auto& cand = sh_.phase.candidates;
    constexpr auto kCapacity = static_cast<std::uint32_t>(G::kCandidateCapacity);
    std::uint32_t lo = kMaxKey, hi = 0;
    __syncthreads();  // topk_row's zeroed counters visible
#pragma unroll 4
    for (std::uint32_t i = threadIdx.x; i < c; i += G::kThreads) {
      const std::uint64_t v = __ldg(area + i);
      const auto key = static_cast<std::uint32_t>(v >> 32);
      if (key < floor) continue;
      lo = min(lo, key);
      hi = max(hi, key);
      const std::uint32_t slot = atomicAdd(&sh_.gt_slots, 1u);
      if (slot < kCapacity) {
        cand.keys[slot] = key;
        cand.pos[slot] = device::order_pos(v);
      }
    }
    sh_.key_range.publish(lo, hi);
    __syncthreads();  // the count, the packed entries and the key range visible
    const std::uint32_t n = sh_.gt_slots;
    sh_.key_range.gather(lo, hi);
    // Rows of at most K entries pad out[]; longer ones select into it, with
    // the select's histogram (sharing out's storage) zero until then.
    if (n <= K) {
      for (int i = threadIdx.x; i < K; i += G::kThreads) sh_.out[i] = device::kEmptySlot;
    } else {
      for (int b = threadIdx.x; b < device::kWindowBins; b += G::kThreads) sh_.select_histogram[b] = 0;
    }
    __syncthreads();
    const bool in_smem = n <= kCapacity;  // the same for every thread
    const std::uint32_t end = in_smem ? n : c;
    const auto items = [&](auto&& fn) {
      for (std::uint32_t base = 0; base < end; base += G::kThreads) {
        const std::uint32_t i = base + threadIdx.x;
        bool present = i < end;
        std::uint32_t key = 0;
        std::int32_t pos = 0;
        if (present) {
          if (in_smem) {
            key = cand.keys[i];
            pos = cand.pos[i];
          } else {
            const std::uint64_t v = __ldg(area + i);
            key = static_cast<std::uint32_t>(v >> 32);
            pos = device::order_pos(v);
            present = key >= floor;
          }
        }
        fn(key, pos, present);
      }
    };
    if (n <= K) {
      emit_if(items, [](std::uint32_t, std::int32_t) { return true; });
    } else {
      emitter().template select_and_emit_window<Cfg::kWarps>(items, K, lo, hi, sh_.select_histogram, sh_.window);
    }
  }

 private:
  // What the filter found in the whole row (all CTAs of a split row).
  struct Totals {
    std::uint32_t count_gt;  // keys > tau
    std::uint32_t count_eq;  // keys == tau (0 when not counted)
    std::uint32_t greatest;  // the greatest key stored in a candidate buffer (0: none)
  };

  // A filter pass's counts -> the row's: one CTA's are the row's.
  struct Alone {
    Storage& sh;
    __device__ Totals operator()(std::uint32_t greatest) const { return {sh.count_gt, sh.count_eq, greatest}; }
    __device__ void before_reset() const { __syncthreads(); }  // every thread has read count_gt
  };
  // ... or the sums over the cluster's CTAs: warp 0's lane r writes this
  // CTA's counts into rank r's table (remote stores, which do not wait as
  // remote loads after the barrier would: a pull measured ~3.3 K cycles a
  // pass at 64 x 128K in two parts, docs/perf-log.md, T110, T111). Ends
  // with the cluster barrier; every CTA gets the same totals.
  struct Clustered {
    Storage& sh;
    __device__ Totals operator()(std::uint32_t greatest) const {
      const auto cluster = cooperative_groups::this_cluster();
      const unsigned size = cluster.num_blocks(), rank = cluster.block_rank();
      if (threadIdx.x < size) {
        Storage* other = cluster.map_shared_rank(&sh, threadIdx.x);
        other->split.count_gt[rank] = sh.count_gt;
        other->split.count_eq[rank] = sh.count_eq;
        other->split.greatest_of[rank] = greatest;
      }
      cluster.sync();  // every rank's counts are in every table
      Totals t{0, 0, 0};
      for (unsigned r = 0; r < size; ++r) {
        t.count_gt += sh.split.count_gt[r];
        t.count_eq += sh.split.count_eq[r];
        t.greatest = max(t.greatest, sh.split.greatest_of[r]);
      }
      return t;
    }
    // Every CTA has read every other's counts before any resets its own.
    __device__ void before_reset() const { cooperative_groups::this_cluster().sync(); }
  };

  // The start of rank r's part of the row among `size`: r * len / size,
  // moved up to the next 128-byte boundary of the row's memory (each part's
  // loads then start on whole lines); 0 for rank 0, len for rank `size`.
  __device__ std::int32_t split_point(unsigned r, unsigned size) const {
    if (r == 0) return 0;
    if (r >= size) return len_;
    constexpr std::int64_t kLine = 128 / sizeof(float);
    const auto base = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(row_) / sizeof(float)) % kLine);
    const std::int64_t even = static_cast<std::int64_t>(len_) * r / size;
    const std::int64_t aligned = (base + even + kLine - 1) / kLine * kLine - base;
    return static_cast<std::int32_t>(aligned < len_ ? aligned : len_);
  }

  // A rank other than 0 of a split row: its candidates (when the row's all
  // fit the buffer, so each rank stored all of its own) and ties (when the
  // row needs them; each rank stored up to the tie capacity) written into
  // rank 0's buffers after those of the ranks before it, positions moved
  // from the rank's part to the row (remote stores: the ranks write at
  // once, where rank 0 reading them rank by rank measured ~15 K cycles at 16
  // parts, docs/perf-log.md, T110, T111). The cluster barrier after it
  // publishes them.
  __device__ void push_split(const Totals& totals, bool ties_counted) {
    const auto cluster = cooperative_groups::this_cluster();
    const unsigned rank = cluster.block_rank();
    Storage* root = cluster.map_shared_rank(&sh_, 0);
    const std::int32_t shift = split_point(rank, cluster.num_blocks());
    constexpr auto kTieCapacity = static_cast<std::uint32_t>(Cfg::kTieCapacity);
    std::uint32_t at_gt = 0, at_eq = 0;
    for (unsigned r = 0; r < rank; ++r) {
      at_gt += sh_.split.count_gt[r];
      at_eq = min(at_eq + min(sh_.split.count_eq[r], kTieCapacity), kTieCapacity);
    }
    if (totals.count_gt <= static_cast<std::uint32_t>(G::kCandidateCapacity)) {
      const std::uint32_t n = sh_.split.count_gt[rank];
      for (std::uint32_t i = threadIdx.x; i < n; i += G::kThreads) {
        root->phase.candidates.keys[at_gt + i] = sh_.phase.candidates.keys[i];
        root->phase.candidates.pos[at_gt + i] = sh_.phase.candidates.pos[i] + shift;
      }
    }
    if (ties_counted && totals.count_gt < K) {
      const std::uint32_t n = min(sh_.split.count_eq[rank], kTieCapacity);
      for (std::uint32_t i = threadIdx.x; i < n && at_eq + i < kTieCapacity; i += G::kThreads) {
        root->tie_pos[at_eq + i] = sh_.tie_pos[i] + shift;
      }
    }
  }

  // Steps 3-5 once the filter's totals are known: the path they prove exact,
  // its selection and emission into sh.out.
  __device__ void finish(TopkRowTrace& trace, std::uint32_t tau, const Totals& totals, bool ties_counted) {
    const std::uint32_t count_gt = totals.count_gt, count_eq = totals.count_eq, greatest = totals.greatest;
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
        // octave share the top 9 bits; measured -0.6 % at 64K, as the
        // whole-bin stop already ends most selects early: docs/perf-log.md,
        // T34).
        trace.path = TopkPath::kCertified;
        trace.kth_key = emitter().template select_and_emit_window<Cfg::kWarps>(
            candidate_items(count_gt), K, tau + 1, greatest, sh_.select_histogram, sh_.window);
      } else {
        trace.path = TopkPath::kOverflow;
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
        trace.path = TopkPath::kThresholdTie;
        emit_ties(tie_items(min(count_eq, static_cast<std::uint32_t>(Cfg::kTieCapacity)), tau), tau, take);
      } else {
        trace.path = TopkPath::kTieRepair;
        emit_ties(row_items(tau, tau), tau, take);
      }
    } else {
      // Underflow: the count_gt + count_eq < K keys >= tau are all stored and
      // all selected; the rest is the top of the keys < tau (tau > 0 here,
      // since len > K keys are >= 0).
      trace.path = TopkPath::kUnderflow;
      emit_if(candidate_items(count_gt), all);
      emit_if(tie_items(count_eq, tau), all);
      trace.kth_key = select_and_emit(row_items(0, tau - 1), K - count_gt - count_eq);
    }
  }

 public:
  // Rows with len <= K: every position, then padding.
  __device__ void direct() { device::emit_whole_row<K, G::kThreads>(sh_.out, row_, len_); }

  // sh.out (K order keys) -> indices/values of the row, sorted if asked.
  // Values are the scores' own bits, or with kFromKeys (an entry row, whose
  // scores were not stored) the keys' scores: score_key is invertible on
  // every score but NaN, which ranks (and is reported) as -inf.
  template <bool kFromKeys = false>
  __device__ void write_out(std::int64_t row_index, std::int32_t ks) const {
    const float* row = row_;
    const auto write = [&](const auto& value) {
      device::write_row<K, G::kThreads, typename Cfg::BlockSort>(
          sh_.out, sh_.phase.sort, p_.indices + row_index * K,
          p_.values != nullptr ? p_.values + row_index * K : nullptr, p_.relative_indices ? 0 : ks, p_.sorted,
          p_.smallest_index_ties, value);
    };
    if constexpr (kFromKeys) {
      write([](std::int32_t, std::uint32_t key) { return key_score(key); });
    } else {
      write([row](std::int32_t pos, std::uint32_t) { return __ldg(row + pos); });
    }
  }

 private:
  static constexpr std::uint32_t kMaxKey = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t kUncounted = std::numeric_limits<std::uint32_t>::max();  // TopkRowTrace::count_eq

  // Thread 0 starts one bulk L2 prefetch of the first p.prefetch_bytes (its
  // whole 16-byte units) of the row's positions [begin, begin + len): the
  // copy engine fetches them from DRAM while the CTA takes its samples and
  // threshold, and the filter's loads then hit L2 (docs/perf-log.md,
  // T83-T87).
  __device__ void prefetch(std::int32_t begin, std::int32_t len) const {
    if (threadIdx.x != 0) return;
    const auto first = (reinterpret_cast<std::uintptr_t>(row_ + begin) + 15) & ~std::uintptr_t{15};
    const auto body_end = reinterpret_cast<std::uintptr_t>(row_ + begin + len) & ~std::uintptr_t{15};
    sm90::prefetch_l2_bulk(first, body_end < first + p_.prefetch_bytes ? body_end : first + p_.prefetch_bytes);
  }

  // S: enough samples that e = S*K/len >= G::kMinExpectedInTop (then the
  // expected candidate count K*(1 + guard/sqrt(e)) stays well below the
  // buffer), within [kMinRowSamples, G::kMaxSamples], and at most len.
  __device__ static std::int32_t sample_count(std::int32_t len) {
    const std::int64_t wanted = static_cast<std::int64_t>(G::kMinExpectedInTop) * len / K;
    const auto clamped = static_cast<std::int32_t>(wanted < kMinRowSamples  ? kMinRowSamples
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
    // (docs/perf-log.md, T76). No warp collective, so the loop needs
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
  __device__ std::uint32_t threshold(TopkRowTrace& trace, bool& tie_free) {
    // Samples come in groups of kSampleGroup neighbours (one 32-byte sector)
    // unless every key is a sample.
    std::int32_t s = sample_count(len_);
    if (s < len_) s -= s % kSampleGroup;
    const double expected = static_cast<double>(s) * K / len_;
    const double rank = threshold_rank(expected);
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

  // Step 2: one pass over row_ (the row, or this CTA's part of a split row:
  // the stored positions are the part's); exact counts land in
  // sh.count_gt/count_eq, and `totals` (Alone or Clustered) turns them
  // into the row's. Returns the row's counts and the greatest
  // key stored in a candidate buffer (every thread; 0 when none). With
  // tie_free (threshold()) and a float tau, the pass first compares once an
  // element (keys > tau only: ~2.5 of ~5 instructions an element,
  // docs/perf-log.md, T35); if that finds fewer than K, which the
  // sampled rank makes a ~4-sigma miss, the row is filtered again with both
  // compares. ties_counted: count_eq holds the row's ties (else count_gt >=
  // K, and the ties were not looked at).
  template <class RowTotals>
  __device__ Totals filter(std::uint32_t tau, bool tie_free, bool& ties_counted, const RowTotals& totals) {
    // The candidates' select histogram (select_and_emit_window), zero at
    // its first pass: out[] is not written before the emission.
    for (int b = threadIdx.x; b < device::kWindowBins; b += G::kThreads) sh_.select_histogram[b] = 0;
    const device::CandidateBuffers buffers{sh_.phase.candidates.keys, sh_.phase.candidates.pos,
                                           static_cast<std::uint32_t>(G::kCandidateCapacity),
                                           &sh_.gt_slots, sh_.tie_pos, Cfg::kTieCapacity, &sh_.tie_slots};
    // One pass; ends with a barrier, the totals then known to every thread.
    const auto pass = [&](auto ties, const auto& threshold) {
      device::FilterTally tally;
      device::for_each_row_batch<G::kThreads, G::kLoadUnroll>(row_, len_, [&](const auto& batch) {
        device::filter_batch<decltype(ties)::value>(batch, threshold, buffers, row_, tally);
      });
      const std::uint32_t count_gt = __reduce_add_sync(device::kFullWarp, tally.count_gt);
      const std::uint32_t count_eq = __reduce_add_sync(device::kFullWarp, tally.count_eq);
      if (device::lane_id() == 0) {
        atomicAdd(&sh_.count_gt, count_gt);
        atomicAdd(&sh_.count_eq, count_eq);
      }
      sh_.key_range.publish(0, tally.greatest);  // the samples' range is no longer read
      __syncthreads();
      std::uint32_t least = 0, greatest = 0;
      sh_.key_range.gather(least, greatest);
      return totals(greatest);
    };
    using WithTies = std::true_type;
    using WithoutTies = std::false_type;
    ties_counted = true;
    if (!device::float_comparable(tau)) return pass(WithTies{}, device::KeyThreshold{tau});
    const device::FloatThreshold threshold{key_score(tau)};
    if (tie_free) {
      const Totals once = pass(WithoutTies{}, threshold);
      if (once.count_gt >= K) {  // the same for every thread
        ties_counted = false;
        return once;
      }
      totals.before_reset();
      if (threadIdx.x == 0) sh_.gt_slots = sh_.count_gt = 0;
      __syncthreads();
    }
    return pass(WithTies{}, threshold);
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
  const float* row_;   // scores of positions 0 .. len-1 (key index ks + pos); a split row's filter: its part
  std::int32_t len_;
};

// One row a CTA (kSplit false), or one row a cluster (kSplit: the row's
// CTAs are consecutive blocks, rank 0 writes the result). kEntries: rows
// with a key that entries.stored does not flag are entry rows (EntryRows).
template <int K, class G, bool kSplit, bool kEntries = false>
__device__ __forceinline__ void topk_row(const KernelParams& p, const EntryRows& entries = {}) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto& sh = *reinterpret_cast<typename Config<K, G>::SharedStorage*>(smem);
  unsigned rank = 0;
  std::int64_t t = blockIdx.x;
  if constexpr (kSplit) {
    const auto cluster = cooperative_groups::this_cluster();
    rank = cluster.block_rank();
    t = blockIdx.x / cluster.num_blocks();
  }
  if (p.row_mask != nullptr && p.row_mask[t] == 0) return;  // the same for every thread of the cluster
  const RowRange range = row_range(p.ks, p.ke, nullptr, t, p.num_cols);
  const std::int32_t ks = range.begin;
  const std::int32_t len = range.end - range.begin;
  // An entry row is decided before the scored rows' state is set up (the
  // flag's load inside it cost the wide instance a spill).
  const bool entry_row = kEntries && len > 0 && entries.stored[t] == 0;  // the same for every thread
  RowSelect<K, G> row(sh, p, p.scores + t * p.stride + ks, len);
  if (threadIdx.x == 0) {
    sh.gt_slots = sh.tie_slots = sh.count_gt = sh.count_eq = sh.emitted = 0;
  }
  if constexpr (kEntries) {
    static_assert(!kSplit, "an entry row is one CTA's");
    if (entry_row) {
      row.select_entries(entries, t);
      __syncthreads();  // sh.out is complete
      row.template write_out<true>(t, ks);
      return;
    }
  }
  TopkRowTrace trace{TopkPath::kDirect, 0, 0, 0, 0, 0};
  if (len <= K) {
    if (rank != 0) return;  // no other CTA of the cluster reads this one
    row.direct();
  } else if constexpr (kSplit) {
    if (!row.select_split(trace)) return;
  } else {
    trace = row.select();
  }
  __syncthreads();  // sh.out is complete
  row.write_out(t, ks);
  if (p.trace != nullptr && threadIdx.x == 0) p.trace[t] = trace;
}

// `entries`: TopkHooks::entries, read by the kEntries instance only (a
// parameter of its own, so the other instances' KernelParams and code stay
// as they are).
template <int K, class G, bool kEntries = false>
__global__ void __launch_bounds__(G::kThreads, G::kMinCtasPerSm) topk_kernel(const KernelParams p,
                                                                            const EntryRows entries) {
  wait_for_producer(p);
  topk_row<K, G, false, kEntries>(p, entries);
}

// Launched with a cluster of 2 to kMaxSplit CTAs a row (grid = rows x
// cluster size).
template <int K, class G>
__global__ void __launch_bounds__(G::kThreads, G::kMinCtasPerSm) topk_split_kernel(const KernelParams p) {
  wait_for_producer(p);
  topk_row<K, G, true>(p);
}

}  // namespace dsa::selection::topk
