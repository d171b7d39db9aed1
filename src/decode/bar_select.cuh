// The paged indexer's bar selection (PagedPlan::bar_select, plan.h): each
// row's top K from candidates the scoring kernel keeps, with no score
// stored and no pass over a row's scores after it.
//   * BarFilterSink (blocks of one query): a math thread keeps a score, as
//     an order key (score key, position), only when its score key is at or
//     above the unit's bar. It counts the entries it keeps by their top
//     kSelectBinBits bits in shared memory (a histogram per unit slot) and
//     stages them per lane. When a lane's slots fill, the warp's lanes drop
//     the entries the bar has passed since, and the warp copies the rest to
//     the row's candidate area in the workspace (one claim on the row's
//     count) if a lane still holds many; all of them at the unit's end. An
//     area holds an entry for each key of the row, so none outruns it.
//   * Its helper warp (scoring/config.h, kHelperWarp) keeps adding the
//     unit's new counts into the row's histogram in the workspace and
//     raising the bar from it while the unit runs (a look is a chain of a
//     few L2 round trips, then a short pause): the lower edge of the
//     highest bin that has at least K of the row's kept entries (every
//     piece's, as counted so far) at or above it. A unit is a piece
//     of one row (blocks of one query), so those entries are K real keys of
//     the row, each above every key under the bar: a key left out is below
//     K others and in no top K, whatever the tie rule. The row's kept
//     entries therefore hold its top K and every key tied with the K-th.
//     A row whose scores crowd into a few bins (shifted scores, near-ties)
//     would keep all of its keys under a bin's edge, so once its bar's bin
//     alone holds K kept entries the row zooms into that bin: its pieces'
//     math warps count their kept entries there by the next kBarZoomBits
//     bits too, the helpers add those counts into the row's, and they
//     raise the bar inside the bin on the same certificate: K kept entries
//     in the bins above and the sub-bins at or above the bar.
//   * A row of fewer than stored_below keys, or one whose query is zero
//     (every score 0, one tie no bar cuts), stores its scores instead,
//     as floats over its own area (its pieces' math warps through
//     StoreSink; its helper only waits out its units), and the top-k
//     selects it from them as the unfused route would (flagged kRowStored,
//     common/row_range.cuh, by the zero kernel, for tools). A short row
//     keeps most of its keys before any bar rises (a piece of n keys keeps
//     about K (1 + ln(n / K))), so entries of twice a score's bytes cost
//     more than the scores. The plan sees only the table's width, never the
//     lengths, so only a choice made here, row by row, lets the route run
//     long rows and short ones each its faster way (docs/perf-log.md D66,
//     D69).
//   * bar_zero_kernel zeroes the rows' state before the scoring kernel,
//     which is launched programmatically and waits for it before its first
//     claim (not a stored row's histograms: nothing counts into them).
//   * The select stage is the standalone top-k (selection/topk), launched
//     programmatically, with the long rows given as entries
//     (TopkHooks::entries: the window select over the entries at or above
//     the row's floor) and the short ones as scores: one kernel, so a batch
//     of short rows costs what the unfused route's top-k costs. Any option
//     (ties, sorted, values). Three launches, none of them repairs.
// Why: at large batches the unfused pipeline's score stores cost the
// scoring kernel ~7 % and its top-k another ~4 % over the math-only control
// (docs/perf-log.md D25, D28), and the control's math warps wait on full
// stages ~30 % of their time (D30), so a sink that adds a compare and, for
// the few keys above the bar, an append can hide in that slack. The bar is
// what sets the entry rate: the streaming selection's bar (each warpgroup's
// own top K, raised only at its cuts) let ~24 % of the keys in (D30).
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/sm90/barrier.cuh"
#include "common/sm90/grid_dependency.cuh"
#include "common/warp.h"
#include "decode/plan.h"
#include "decode/select.cuh"
#include "scoring/config.h"
#include "scoring/scoring_kernel.cuh"
#include "selection/device/candidates.cuh"
#include "selection/device/radix.cuh"

namespace dsa::decode {

// Entries a staging lane holds before its warp copies them out; the lanes
// that stage at one query a block (lane % 4 == 0: the lanes that own a key
// row's score), and the staging rows' width (one more, against bank
// conflicts down a column).
inline constexpr int kBarLaneSlots = 64;
// A lane whose slots fill first drops the entries the bar has passed since
// they were staged; its warp writes its entries out only when some lane
// still holds more than this many. An entry staged early in a unit mostly
// falls under the bar before it would be written: beside the key stream,
// the entries' DRAM writes cost the scoring kernel several times their
// bytes' transfer time (docs/perf-log.md, D58).
inline constexpr std::uint32_t kBarWriteAbove = kBarLaneSlots * 3 / 4;
inline constexpr int kBarStagers = kWarpSize / 4;
inline constexpr int kBarStagedWidth = kBarStagers + 1;
// The helper's pause between two looks at the histogram: a unit at large
// batches runs for hundreds of microseconds, and a look takes a few hundred
// cycles of the helper's issue slots beside the math warps.
inline constexpr unsigned kBarHelperPauseNs = 256;
// Bins a helper lane reads in one step of its walk down the histogram.
inline constexpr int kBarBinsPerLane = 4;
inline constexpr int kBarBinsPerStep = kBarBinsPerLane * kWarpSize;
static_assert(kSelectBins % kBarBinsPerStep == 0, "the walk's steps tile the histogram");

// The bar's key for histogram bin b: the least score key in the bin.
__device__ __forceinline__ std::uint32_t bar_key(std::uint32_t bin) { return bin << (32 - kSelectBinBits); }

// Inside a zoomed bin (plan.h, kBarZoomBits): a key's sub-bin (its bits
// after the bin's), and the least key of sub-bin s of bin b.
inline constexpr int kBarZoomShift = 32 - kSelectBinBits - kBarZoomBits;
inline constexpr std::uint32_t kBarNoZoom = 0xffffffffu;  // no bin is kSelectBins or above
static_assert(kBarZoomBins % kBarBinsPerStep == 0, "the walk's steps tile the zoomed bin's histogram");
__device__ __forceinline__ std::uint32_t zoom_sub(std::uint32_t key) {
  return (key >> kBarZoomShift) & (kBarZoomBins - 1);
}
__device__ __forceinline__ std::uint32_t zoom_key(std::uint32_t bin, std::uint32_t sub) {
  return bar_key(bin) | (sub << kBarZoomShift);
}
// The slot's bar word, which the math warps compare keys with: the bar (a
// bin's or a sub-bin's least key, so its low kBarZoomShift bits are 0), or
// the bar less one when the bar's bin is the row's zoomed bin (bit 0 set).
// The math warps learn of the zoom with the word they read anyway and test
// for it only on the keys they keep; a word one under the bar keeps one
// more key value, which is never wrong (the select stage's floor is the
// bar itself).
__device__ __forceinline__ std::uint32_t bar_word(std::uint32_t bar, bool zoomed) { return zoomed ? bar - 1 : bar; }
__device__ __forceinline__ bool word_zoomed(std::uint32_t word) { return (word & 1u) != 0; }
static_assert(kBarZoomShift > 0, "bit 0 is below every bar");

// The highest bin b >= floor with at least k counts in bins b and above,
// or floor when there is none (a warp, converged; every lane gets it;
// load(i) reads count i; no bin above `highest` has a count). The walk goes
// down from highest's step and stops at floor's: a bin below floor is never
// a higher bar. Counts are read as they stand while others add to them: a
// count read low, or one above a stale `highest`, only lowers the bar.
// in_bin (nullable): the count read for the bin returned, 0 when that is
// floor and the walk did not read its count.
template <class Load>
__device__ __forceinline__ std::uint32_t bar_bin(Load load, std::uint32_t k, std::uint32_t floor,
                                                 std::uint32_t highest, std::uint32_t* in_bin = nullptr) {
  if (in_bin != nullptr) *in_bin = 0;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  std::uint32_t above = 0;  // counts in the bins over the step
  const int first = (static_cast<int>(highest) / kBarBinsPerStep + 1) * kBarBinsPerStep;
  for (int top = first; top > static_cast<int>(floor); top -= kBarBinsPerStep) {
    // This lane's bins, highest first: top - 1 - kBarBinsPerLane * lane - i.
    const int high = top - 1 - kBarBinsPerLane * lane;
    std::uint32_t c[kBarBinsPerLane];
    std::uint32_t mine = 0;
#pragma unroll
    for (int i = 0; i < kBarBinsPerLane; ++i) {
      c[i] = load(high - i);
      mine += c[i];
    }
    std::uint32_t step = 0;
    const std::uint32_t inclusive = selection::device::warp_count_scan(mine, step);  // lanes 0..lane: higher bins
    if (above + step >= k) {
      const int holder = __ffs(__ballot_sync(kFullWarp, above + inclusive >= k)) - 1;
      std::uint32_t bin = 0, count = 0;
      if (lane == holder) {
        std::uint32_t sum = above + inclusive - mine;
        bin = static_cast<std::uint32_t>(high);
#pragma unroll
        for (int i = 0; i < kBarBinsPerLane; ++i) {
          sum += c[i];
          count = c[i];
          if (sum >= k) break;
          bin = static_cast<std::uint32_t>(high - i - 1);
        }
      }
      bin = __shfl_sync(kFullWarp, bin, holder);
      count = __shfl_sync(kFullWarp, count, holder);
      if (in_bin != nullptr && bin >= floor) *in_bin = count;
      return bin > floor ? bin : floor;
    }
    above += step;
  }
  return floor;
}

// What push_bins added: the highest bin it added to (0: none) and the
// counts it added.
struct Pushed {
  std::uint32_t highest;
  std::uint32_t count;
};

// The unit's new counts from its bins (bins floor's step and up, taken and
// zeroed one by one: none of the math warps' additions is lost) added into
// the row's histogram in the workspace (a warp, converged; every lane gets
// the result).
// Bins: kSelectBins, or kBarZoomBins for a zoomed bin's sub-bins.
template <int Bins>
__device__ __forceinline__ Pushed push_bins(std::uint32_t* bins, std::uint32_t* row_bins, std::uint32_t floor) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  std::uint32_t highest = 0, count = 0;
  for (int top = Bins; top > static_cast<int>(floor); top -= kBarBinsPerStep) {
#pragma unroll
    for (int i = 0; i < kBarBinsPerLane; ++i) {
      const int b = top - 1 - kBarBinsPerLane * lane - i;
      const std::uint32_t n = atomicExch(&bins[b], 0u);
      if (n != 0) {
        atomicAdd(&row_bins[b], n);
        highest = max(highest, static_cast<std::uint32_t>(b));
        count += n;
      }
    }
  }
  return {__reduce_max_sync(kFullWarp, highest), __reduce_add_sync(kFullWarp, count)};
}

struct BarFilterSink {
  static constexpr bool kHelper = true;
  // The helper's walks (the bins', then the zoomed bin's sub-bins) do not
  // fit the paged producers' 40 registers; the math warps at one query a
  // block need far fewer than the 224 this leaves them.
  static constexpr int kHelperRegs = 48;
  std::uint32_t* count;       // [rows] entries claimed in the row's area (zeroed before the launch)
  std::uint32_t* floor;       // [rows] the highest of the row's pieces' last bars (zeroed likewise)
  std::uint64_t* candidates;  // [rows, capacity] order keys (score key, position)
  // [rows, kSelectBins] (zeroed likewise): the row's kept entries by bin,
  // every piece's, which the helpers add their units' counts into and raise
  // their bars from, so a piece's bar follows the whole row's entries.
  std::uint32_t* row_bins;
  std::uint32_t* row_top;     // [rows] (zeroed likewise): the highest bin of row_bins with a count
  std::uint32_t* row_total;   // [rows] (zeroed likewise): row_bins' counts in all
  // [rows] (zeroed likewise): 1 + the bin the row zoomed into, or 0. Set
  // once, by the first helper whose bar's bin holds K of the row's kept
  // entries; every piece of the row then counts its kept entries in that
  // bin into row_sub as well.
  std::uint32_t* row_zoom;
  std::uint32_t* row_sub;      // [rows, kBarZoomBins] (zeroed likewise): those entries by sub-bin
  std::uint32_t* row_sub_top;  // [rows] (zeroed likewise): the highest sub-bin of row_sub with a count
  std::uint32_t capacity;
  std::uint32_t k;            // K
  // [rows] the zero kernel's RowFlag: rows flagged kRowStored (too short,
  // or a zero query) store their scores here (over their areas, as floats)
  // instead of keeping entries.
  const std::uint32_t* flags;
  scoring::StoreSink store;

  struct Shared {
    // Per unit slot: the kept entries' counts by bin, the bar word (a kept
    // entry's key is at or above it; 0 keeps every key) and the barrier
    // every math thread arrives on after its last entry of the unit.
    std::uint32_t bins[scoring::kUnitSlots][kSelectBins];
    std::uint32_t bar[scoring::kUnitSlots];  // bar words (bar_word)
    // Per unit slot: the kept entries in the row's zoomed bin by sub-bin,
    // once the slot's bar word says the bar is in it.
    std::uint32_t sub[scoring::kUnitSlots][kBarZoomBins];
    std::uint64_t done[scoring::kUnitSlots];
    // [math warp][entry][staging lane]
    std::uint64_t staged[scoring::kMathWarps][kBarLaneSlots][kBarStagedWidth];
  };
  template <int R>
  struct Lane {
    std::uint32_t slot;    // the unit's slot
    std::uint32_t staged;  // this lane's entries staged
    bool stores;           // the unit's row stores its scores (flagged kRowStored)
  };

  __device__ void init(Shared& sh) const {
    for (int i = static_cast<int>(threadIdx.x); i < scoring::kUnitSlots * kSelectBins; i += static_cast<int>(blockDim.x)) {
      sh.bins[i / kSelectBins][i % kSelectBins] = 0;
    }
    for (int i = static_cast<int>(threadIdx.x); i < scoring::kUnitSlots * kBarZoomBins;
         i += static_cast<int>(blockDim.x)) {
      sh.sub[i / kBarZoomBins][i % kBarZoomBins] = 0;
    }
    if (threadIdx.x == 0) {
      for (int s = 0; s < scoring::kUnitSlots; ++s) {
        sh.bar[s] = 0;
        sm90::barrier_init(&sh.done[s], scoring::kMathThreads);
      }
    }
  }
  // The row's flag, read by lane 0 once the zero kernel has ended (the
  // scoring kernel's CTAs cannot start beside its blocks, which hold the
  // register file, so the wait is for its last blocks at most): the same
  // choice for the whole warp.
  template <int R>
  __device__ Lane<R> begin(std::uint32_t slot, std::int64_t t0, int lane, const RowRange (&)[R], int) const {
    static_assert(R == 1, "one query a block: a unit is a piece of one row");
    sm90::wait_for_prerequisite_grids();
    const bool stores = __shfl_sync(kFullWarp, lane == 0 && flags[t0] == kRowStored ? 1 : 0, 0) != 0;
    return {slot, 0u, stores};
  }

  // The calling thread's math warp (its rows of `staged`).
  __device__ __forceinline__ static int math_warp() {
    return static_cast<int>(threadIdx.x) / kWarpSize - scoring::kFirstMathWarp;
  }

  // The slot's bar word (bar_word), by an atomic (the helper writes it by
  // atomics: any value it had is at or under a certified bar), one lane's
  // read for the warp.
  __device__ __forceinline__ static std::uint32_t warp_bar(Shared& sh, std::uint32_t slot, int lane) {
    std::uint32_t bar = 0;
    if (lane == 0) bar = atomicAdd(&sh.bar[slot], 0u);
    return __shfl_sync(kFullWarp, bar, 0);
  }

  // Drops this lane's staged entries under the unit's bar word as it
  // stands (warp-collective): the word is at or under a certified bar, so
  // such an entry is below K of the row's keys, in no top K and no tie with
  // the K-th, as if it had never been kept. A lane touches only its own
  // column, which no lane reads until the next flush's __syncwarp.
  template <int R>
  __device__ __forceinline__ void sift(Lane<R>& st, Shared& sh, int lane) const {
    const int warp = math_warp();
    const std::uint32_t bar = warp_bar(sh, st.slot, lane);  // a word: at or under the bar
    std::uint32_t kept = 0;
    for (std::uint32_t i = 0; i < st.staged; ++i) {
      const std::uint64_t entry = sh.staged[warp][i][lane / 4];
      if (static_cast<std::uint32_t>(entry >> 32) >= bar) sh.staged[warp][kept++][lane / 4] = entry;
    }
    st.staged = kept;
  }

  // Copies the warp's staged entries to row t0's area (warp-collective): one
  // claim on the row's count for the warp, then the entries in staging-lane
  // order, coalesced. The area holds every key of the row (entries past it,
  // which would be a bug, are counted, not stored; the top-k reads no
  // more than the area).
  template <int R>
  __device__ __forceinline__ void flush(Lane<R>& st, Shared& sh, std::int64_t t0, int lane) const {
    const int warp = math_warp();
    __syncwarp();  // every lane's staged entries are visible to the warp
    std::uint32_t total = 0;
    const std::uint32_t inclusive = selection::device::warp_count_scan(st.staged, total);
    if (total != 0) {  // the same for every lane
      sm90::wait_for_prerequisite_grids();  // the zero kernel's counts
      const std::uint32_t exclusive = inclusive - st.staged;
      const std::uint32_t base = __shfl_sync(kFullWarp, selection::device::warp_claim(count + t0, st.staged, inclusive), 0);
      std::uint32_t start[kBarStagers];  // staging lane j's first entry in the warp's run
#pragma unroll
      for (int j = 0; j < kBarStagers; ++j) start[j] = __shfl_sync(kFullWarp, exclusive, 4 * j);
      std::uint64_t* area = candidates + t0 * capacity;
      for (std::uint32_t e = lane; e < total; e += kWarpSize) {
        // The last staging lane whose run starts at or before e (lanes with
        // nothing staged share their successor's start and are passed over).
        int j = 0;
        std::uint32_t first = 0;
#pragma unroll
        for (int m = 1; m < kBarStagers; ++m) {
          if (start[m] <= e) {
            j = m;
            first = start[m];
          }
        }
        if (base + e < capacity) area[base + e] = sh.staged[warp][e - first][j];
      }
    }
    st.staged = 0;
    __syncwarp();  // every entry is read before any lane stages again
  }

  template <int R>
  __device__ __forceinline__ void put(Lane<R>& st, Shared& sh, std::int64_t t0, int lane, const std::int32_t (&key)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
    if (st.stores) {  // the same for the whole warp
      scoring::StoreSink::Lane<R> none;
      scoring::StoreSink::Shared unused;
      store.put(none, unused, t0, lane, key, score, valid);
      return;
    }
    const int warp = math_warp();
    const std::uint32_t bar = warp_bar(sh, st.slot, lane);  // a word: at or under the bar
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::uint32_t k_bits = score_key_fast(score[0][half]);
      if (valid[0][half] && k_bits >= bar) {
        const std::uint32_t bin = select_bin(k_bits);
        atomicAdd(&sh.bins[st.slot][bin], 1u);
        // Entries kept in the zoomed bin are counted by sub-bin too (those
        // kept before the warp saw the flag are not: the counts read low).
        if (word_zoomed(bar) && bin == select_bin(bar + 1)) atomicAdd(&sh.sub[st.slot][zoom_sub(k_bits)], 1u);
        sh.staged[warp][st.staged][lane / 4] = selection::device::order_key(k_bits, key[half]);
        ++st.staged;
      }
    }
    if (__any_sync(kFullWarp, st.staged > kBarLaneSlots - 2)) {
      sift(st, sh, lane);
      if (__any_sync(kFullWarp, st.staged > kBarWriteAbove)) flush(st, sh, t0, lane);
    }
  }

  // Every math thread once a unit: the rest of its warp's entries at or
  // above the bar out, then its arrival on the slot's barrier (its additions
  // to the slot's bins are done).
  template <int R>
  __device__ void finish(Lane<R>& st, Shared& sh, std::int64_t t0, int lane) const {
    if (!st.stores) {
      sift(st, sh, lane);
      flush(st, sh, t0, lane);
    }
    sm90::barrier_arrive(&sh.done[st.slot]);
  }

  // The row's zoomed bin (the helper warp, converged; every lane gets it),
  // once the bar's bin alone holds K of the row's kept entries: the one
  // another piece set, else `bin` (set here, once for the row).
  __device__ __forceinline__ std::uint32_t find_zoom(std::int64_t t0, std::uint32_t bin, int lane) const {
    std::uint32_t z = 0;  // 1 + the zoomed bin
    if (lane == 0) {
      z = atomicCAS(row_zoom + t0, 0u, bin + 1);
      if (z == 0) z = bin + 1;
    }
    return __shfl_sync(kFullWarp, z, 0) - 1;
  }

  // The helper warp: for each unit (the math warps' order of slots), until
  // every math thread is done with the unit, adds the slot's new counts
  // into the row's histogram and raises the slot's bar from it (inside the
  // row's zoomed bin from its sub-bin counts, once the bar is there); then
  // adds the last counts, raises the row's floor to the unit's last bar
  // (the K entries at or above it are in the row's area once the kernel
  // ends: every math thread flushes before it arrives), zeroes the counts
  // and the bar word for the slot's next unit and releases the slot
  // (unit_empty, every lane).
  __device__ void help(Shared& sh, scoring::SharedStorage& smem) const {
    const int lane = static_cast<int>(threadIdx.x % kWarpSize);
    // The zero kernel's row histograms and floors. Every CTA with a unit
    // waits here, so the grid never ends before that kernel does, whatever
    // its math warps claimed.
    sm90::wait_for_prerequisite_grids();
    for (std::uint32_t u = 0;; ++u) {
      const auto [slot, parity] = sm90::ring_slot<scoring::kUnitSlots>(u);
      sm90::barrier_wait(&smem.unit_full[slot], parity);
      const scoring::Unit unit = smem.unit[slot];
      if (unit.tiles == 0) return;
      // A row that stores its scores counts nothing and has no bar: the
      // slot is released once its math threads are done with it.
      if (flags[unit.t0] == kRowStored) {
        sm90::barrier_wait(&sh.done[slot], parity);
        sm90::barrier_arrive(&smem.unit_empty[slot]);
        continue;
      }
      std::uint32_t* row = row_bins + unit.t0 * kSelectBins;
      std::uint32_t* subs = row_sub + unit.t0 * kBarZoomBins;
      // The slot's bar as this warp raised it: a bin's least key, or one of
      // its sub-bins' in the zoomed bin (select_bin(bar) is the bar's bin
      // either way), published as its word (bar_word).
      std::uint32_t bar = 0;
      std::uint32_t zoom = kBarNoZoom;  // the row's zoomed bin, once seen
      const auto publish = [&] {
        if (lane == 0) atomicExch(&sh.bar[slot], bar_word(bar, select_bin(bar) == zoom));
      };
      for (;;) {
        const std::uint32_t bin = select_bin(bar);
        // Lane 0 decides for the warp: lanes testing on their own could see
        // the phase complete at different times and part ways.
        std::uint32_t done = 0;
        if (lane == 0) done = cuda::ptx::mbarrier_test_wait_parity(&sh.done[slot], parity) ? 1u : 0u;
        if (__shfl_sync(kFullWarp, done, 0) != 0) break;
        const Pushed pushed = push_bins<kSelectBins>(sh.bins[slot], row, bin);
        // The row's highest bin and its counts in all (two independent
        // atomics, one latency); no walk while it has fewer than K.
        std::uint32_t highest = 0, total = 0;
        if (lane == 0) {
          highest = max(atomicMax(row_top + unit.t0, pushed.highest), pushed.highest);
          total = atomicAdd(row_total + unit.t0, pushed.count) + pushed.count;
        }
        highest = __shfl_sync(kFullWarp, highest, 0);
        total = __shfl_sync(kFullWarp, total, 0);
        if (total >= k) {
          std::uint32_t in_bin = 0;
          const std::uint32_t b = bar_bin([&](int i) { return __ldcg(row + i); }, k, bin, highest, &in_bin);
          // (Never bin 0: its least key is 0, which has no word under it.)
          const bool zoom_now = zoom == kBarNoZoom && in_bin >= k && b != 0;
          if (zoom_now) zoom = find_zoom(unit.t0, b, lane);
          if (b > bin || zoom_now) {
            bar = max(bar, bar_key(b));
            publish();
          }
          if (zoom == select_bin(bar)) {
            // K of the row's entries at or above sub-bin s of the bin: those
            // in the bins above it (all of them) and those counted in it
            // since the zoom (some of them); both only ever read low.
            const Pushed sub = push_bins<kBarZoomBins>(sh.sub[slot], subs, zoom_sub(bar));
            std::uint32_t sub_top = 0, above = 0;
            if (lane == 0) sub_top = max(atomicMax(row_sub_top + unit.t0, sub.highest), sub.highest);
            for (std::uint32_t b2 = zoom + 1 + lane; b2 <= highest; b2 += kWarpSize) above += __ldcg(row + b2);
            above = __reduce_add_sync(kFullWarp, above);
            sub_top = __shfl_sync(kFullWarp, sub_top, 0);
            if (above < k) {
              const std::uint32_t s =
                  bar_bin([&](int i) { return __ldcg(subs + i); }, k - above, zoom_sub(bar), sub_top);
              if (zoom_key(zoom, s) > bar) {
                bar = zoom_key(zoom, s);
                publish();
              }
            }
          }
        }
        __nanosleep(kBarHelperPauseNs);
      }
      const Pushed pushed = push_bins<kSelectBins>(sh.bins[slot], row, select_bin(bar));
      if (lane == 0) {  // for the row's other pieces
        atomicMax(row_top + unit.t0, pushed.highest);
        atomicAdd(row_total + unit.t0, pushed.count);
      }
      if (zoom != kBarNoZoom) {  // every sub-bin taken (and so zeroed) for the slot's next unit
        const Pushed sub = push_bins<kBarZoomBins>(sh.sub[slot], subs, 0);
        if (lane == 0) atomicMax(row_sub_top + unit.t0, sub.highest);
      }
      if (lane == 0 && bar != 0) atomicMax(floor + unit.t0, bar);
      for (int i = lane; i < kSelectBins; i += kWarpSize) sh.bins[slot][i] = 0;
      if (lane == 0) sh.bar[slot] = 0;
      sm90::barrier_arrive(&smem.unit_empty[slot]);  // every lane, after its own stores
    }
  }
};

// The rows' state (plan.h, BarState: counts, floors, histograms) zeroed
// before the scoring kernel, which is launched programmatically and starts
// at once, and each row's RowFlag written: kRowStored for a row that
// stores its scores, kRowDone for one that keeps entries. A block a row:
// the row's range read once, and a storing row has only its six words
// zeroed (nothing counts into its histograms), so a batch of short rows
// costs a launch and a load a block. The scoring kernel's CTAs take the
// whole register file, so none starts on an SM before this kernel's
// blocks there end: its time is on the operator's path.
// A row stores its scores when it has fewer than stored_below keys, or
// (stored_below > 0) when its query is all zero: every score is then 0,
// one tie, which no bar can cut, so as entries the whole row would be kept
// at 8 bytes a key and re-read by every pass of the top-k's select.
inline constexpr int kBarZeroThreads = 256;
inline constexpr int kBarQueryBytes = 64 * kHeadDim;  // a row's query: one token, 64 heads, FP8
static_assert(kBarQueryBytes % (kBarZeroThreads * 16) == 0, "a row's query in 16-byte loads over the block");
struct BarZeroArgs {
  std::uint32_t* state;  // [kBarStateWords * rows]
  std::uint32_t* flags;  // [rows] out: kRowStored or kRowDone (RowFlag)
  std::int64_t rows;
  const std::int32_t* ks;  // the batch's ranges, as the scoring kernel reads them
  const std::int32_t* ke;
  std::int64_t num_keys;
  std::int32_t stored_below;
  const std::uint8_t* q;  // [rows, 64, kHeadDim] FP8 e4m3
};
__global__ void __launch_bounds__(kBarZeroThreads) bar_zero_kernel(const BarZeroArgs a) {
  sm90::allow_dependent_launch();
  const std::int64_t row = blockIdx.x;
  const RowRange r = row_range(a.ks, a.ke, nullptr, row, a.num_keys);
  bool stored = row_stores_scores(r, a.stored_below);
  if (!stored && a.stored_below > 0 && r.end > r.begin) {  // the same for every thread
    // A zero query: every byte +0 or -0 (e4m3's sign bit alone).
    const auto* q = reinterpret_cast<const uint4*>(a.q + row * kBarQueryBytes);
    std::uint32_t bits = 0;
#pragma unroll
    for (int i = 0; i < kBarQueryBytes / 16 / kBarZeroThreads; ++i) {
      const uint4 v = __ldg(q + i * kBarZeroThreads + threadIdx.x);
      bits |= v.x | v.y | v.z | v.w;
    }
    stored = __syncthreads_or((bits & 0x7F7F7F7Fu) != 0) == 0;
  }
  if (threadIdx.x < kBarBins) a.state[threadIdx.x * a.rows + row] = 0;
  if (threadIdx.x == 0) a.flags[row] = stored ? kRowStored : kRowDone;
  if (stored) return;  // the same for every thread
  std::uint32_t* bins = a.state + kBarBins * a.rows + row * kSelectBins;
  for (int i = static_cast<int>(threadIdx.x); i < kSelectBins; i += kBarZeroThreads) bins[i] = 0;
  std::uint32_t* subs = a.state + kBarZoomSub * a.rows + row * kBarZoomBins;
  for (int i = static_cast<int>(threadIdx.x); i < kBarZoomBins; i += kBarZeroThreads) subs[i] = 0;
}

}  // namespace dsa::decode
