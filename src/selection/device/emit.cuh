// Emission of a row's winners and the write-out of a row: once the item set
// that holds the answer is known (a candidate buffer, the row itself), the
// standalone top-k and the fused operator's select stage finish a row with
// the same code (model.h steps 4-5).
//
// Item sets are visitors: items(fn) makes every thread of the block call
// fn(key, pos, present) the same number of times, so fn may use warp
// collectives.
#pragma once

#include <cstdint>
#include <limits>

#include "common/keys.h"
#include "selection/device/candidates.cuh"
#include "selection/device/radix.cuh"

namespace dsa::selection::device {

// Emitter::select_and_emit_window: histogram passes of kWindowBins linear
// bins, and the K-th key's bin ranked by one warp once it holds at most
// kResolveCapacity keys (two a lane). 2048 bins over the ~2^24 keys of a
// sampled row's candidates leave that bin a handful of keys on model-like
// rows; 1024 measured the same and 4096 1.4 % slower at 4096 x 32K
// (docs/perf-log.md, T92, T93).
inline constexpr int kWindowBinBits = 11;
inline constexpr int kWindowBins = 1 << kWindowBinBits;
inline constexpr int kResolveCapacity = 2 * kWarpSize;

// Shared memory of select_and_emit_window for a block of kWarps warps
// (the histogram itself is the caller's: kWindowBins words, usually
// aliasing the emission's out[], which the select writes only after its
// last pass).
template <int kWarps>
struct WindowSelectShared {
  static_assert(kWindowBins % (kWarpSize * kWarps) == 0, "each warp owns whole rows of 32 bins");
  static constexpr int kRows = kWindowBins / (kWarpSize * kWarps);  // rows of 32 bins a warp owns (pick_striped_bin)
  std::uint32_t resolve_keys[kResolveCapacity];  // the items of the K-th key's bin
  std::int32_t resolve_pos[kResolveCapacity];
  std::uint32_t warp_sums[kWarps];  // pick_striped_bin's
  BinPick pick;                     // pick_striped_bin's broadcast
  std::uint32_t resolve_count;      // items gathered into resolve_* (the select zeroes it)
};

template <int K>
class Emitter {
 public:
  // out: K order-key slots; emitted: the slot counter (0 at entry).
  __device__ Emitter(std::uint64_t* out, std::uint32_t* emitted, RadixShared<std::uint32_t>& radix,
                     bool smallest_index_ties)
      : out_(out), emitted_(emitted), radix_(radix), smallest_index_ties_(smallest_index_ties) {}

  // Appends every present item with pred(key, pos) to out. Slots past K are
  // dropped: only kAny ties reach them (emit_ties).
  template <class Items, class Pred>
  __device__ void emit_if(const Items& items, const Pred& pred) const {
    items([&](std::uint32_t key, std::int32_t pos, bool present) {
      const bool take = present && pred(key, pos);
      if (__any_sync(kFullWarp, take)) {
        const std::uint32_t slot = warp_append<1>(take ? 1u : 0u, emitted_);
        if (take && slot < K) out_[slot] = order_key(key, pos);
      }
    });
  }

  // Appends `take` of the items with key == kth. Every other winner must be
  // emitted (and a barrier passed) before: kAny ties race for the last
  // `take` slots below K. Smallest-index ties: the cut is the take-th largest
  // ~pos among the tied items (distinct, so exactly `take` pass it).
  template <class Items>
  __device__ void emit_ties(const Items& items, std::uint32_t kth, std::uint32_t take) const {
    if (!smallest_index_ties_) {
      emit_if(items, [kth](std::uint32_t key, std::int32_t) { return key == kth; });
      return;
    }
    const auto tied_order_keys = [&](auto&& fn) {
      items([&](std::uint32_t key, std::int32_t pos, bool present) { fn(index_order_key(pos), present && key == kth); });
    };
    const std::uint32_t cut = block_radix_select(tied_order_keys, take, radix_).kth_key;
    emit_if(items, [kth, cut](std::uint32_t key, std::int32_t pos) {
      return key == kth && index_order_key(pos) >= cut;
    });
  }

  // Select and emission over an item set that holds the answer (k <= its
  // size, every key in [lo, hi]) by KeyWindow passes, where
  // select_and_emit's 8-bit radix takes 2-3 passes of 3 barriers and an
  // emission visit: histogram passes of kWindowBins bins (the first over
  // [lo, hi], each later one over the bin before) find the bin holding the
  // k-th largest key, rank r in it; then one of
  //  - r == the bin's count: the top k are the keys >= its bottom (one
  //    emission visit);
  //  - the bin holds at most kResolveCapacity items: one visit emits the
  //    keys above the bin and gathers the bin's items; warp 0 ranks them
  //    (key descending, position ascending: items' positions must be
  //    distinct; that order serves both tie modes) and emits the first r;
  //  - the bin is one key (more ties than that): the keys above it, then
  //    r ties (emit_ties);
  //  - else the next pass narrows the window to the bin.
  // The histogram must be zero at entry (the caller zeroes it before one of
  // its own barriers); the select sets its other state itself. Returns the
  // k-th largest key in
  // warp 0 (every thread on the whole-bin and ties endings); out[] is
  // complete after the caller's next barrier. The caller's trace reads the
  // result from thread 0.
  template <int kWarps, class Items>
  __device__ std::uint32_t select_and_emit_window(const Items& items, std::uint32_t k, std::uint32_t lo,
                                                  std::uint32_t hi, std::uint32_t* histogram,
                                                  WindowSelectShared<kWarps>& sh) const {
    using Window = KeyWindow<kWindowBinBits>;
    Window w(lo, hi);
    std::uint32_t rank = k;  // inside w
    // The whole-bin ending's minimum and the resolve's count, read only
    // after the first pass's barrier.
    if (threadIdx.x == 0) {
      radix_.least = 0xFFFFFFFFu;
      sh.resolve_count = 0;
    }
    for (;;) {
      items([&](std::uint32_t key, std::int32_t, bool present) {
        if (present && w.holds(key)) atomicAdd(&histogram[w.bin(key)], 1u);
      });
      __syncthreads();
      const BinPick pick =
          pick_striped_bin<kWarps, WindowSelectShared<kWarps>::kRows>(histogram, sh.warp_sums, sh.pick, rank);
      const std::uint32_t r = rank - pick.above;  // 1 <= r <= pick.in
      const std::uint32_t bottom = w.bin_bottom(pick.bin), top = w.bin_top(pick.bin);
      // The pick left the histogram zero and no one reads it again, so the
      // emission may overwrite it. Every branch is the same for every thread.
      if (r == pick.in) return emit_at_least<true>(items, bottom);
      if (pick.in <= static_cast<std::uint32_t>(kResolveCapacity)) return resolve_bin(items, bottom, top, r, sh);
      if (w.shift == 0) {
        emit_if(items, [bottom](std::uint32_t key, std::int32_t) { return key > bottom; });
        __syncthreads();
        emit_ties(items, bottom, r);
        return bottom;
      }
      rank = r;
      w = Window(bottom, top);
    }
  }

  // Radix select and emission over an item set that holds the answer: emits
  // its top k and returns the k-th largest key. lo/hi: bounds of the item
  // keys, when known (block_radix_select).
  template <class Items>
  __device__ std::uint32_t select_and_emit(const Items& items, std::uint32_t k, std::uint32_t lo = 0,
                                           std::uint32_t hi = 0xFFFFFFFFu) const {
    const auto keys = [&](auto&& fn) {
      items([&](std::uint32_t key, std::int32_t, bool present) { fn(key, present); });
    };
    const RadixResult<std::uint32_t> kth = block_radix_select<true>(keys, k, radix_, lo, hi);
    // The top k are the keys >= the bin's bound, no tie to cut; the k-th
    // largest is the least of them (for the caller's trace;
    // block_radix_select<true> left radix.least ~0).
    if (kth.whole_bin) return emit_at_least<false>(items, kth.kth_key);
    emit_if(items, [&](std::uint32_t key, std::int32_t) { return key > kth.kth_key; });
    __syncthreads();
    emit_ties(items, kth.kth_key, kth.take_equal);
    return kth.kth_key;
  }

 private:
  // The whole-bin endings of both selects: emits every item with key >=
  // bottom and returns the least of them (every thread; radix.least ~0 at
  // entry). Ends with a barrier. kCounted: emit_counted's two visits (the
  // window select's cheap item sets), else emit_if's one (the radix
  // select's repairs visit the row in global memory).
  template <bool kCounted, class Items>
  __device__ std::uint32_t emit_at_least(const Items& items, std::uint32_t bottom) const {
    std::uint32_t least = 0xFFFFFFFFu;
    const auto take = [&](std::uint32_t key, std::int32_t) {
      const bool taken = key >= bottom;
      if (taken) least = min(least, key);
      return taken;
    };
    if constexpr (kCounted) {
      emit_counted(items, take);
    } else {
      emit_if(items, take);
    }
    least = __reduce_min_sync(kFullWarp, least);
    if (lane_id() == 0) atomicMin(&radix_.least, least);
    __syncthreads();
    return radix_.least;
  }

  // The window select's emissions visit their items twice (shared-memory
  // candidates, or the fused stage's spill area, both cheap to read again):
  // the first visit counts the warp's taken items and claims their slots
  // with one atomic, the second stores them at ballot offsets. emit_if's
  // atomic a visit step put a shared atomic's round trip on the path of
  // every step (~6 a warp at 32K rows).
  // claim_counted: the first visit; returns the warp's first slot (every
  // lane), to be advanced by the popcount of each later step's ballot.
  template <class Items, class Pred>
  __device__ std::uint32_t claim_counted(const Items& items, const Pred& pred) const {
    std::uint32_t mine = 0;
    items([&](std::uint32_t key, std::int32_t pos, bool present) { mine += present && pred(key, pos) ? 1u : 0u; });
    const std::uint32_t total = __reduce_add_sync(kFullWarp, mine);
    std::uint32_t base = 0;
    if (lane_id() == 0 && total != 0) base = atomicAdd(emitted_, total);
    return __shfl_sync(kFullWarp, base, 0);
  }
  // emit_counted: both visits (every taken item gets a slot below K: no
  // slot check).
  template <class Items, class Pred>
  __device__ void emit_counted(const Items& items, const Pred& pred) const {
    std::uint32_t slot = claim_counted(items, pred);
    const unsigned lower = (1u << lane_id()) - 1;
    items([&](std::uint32_t key, std::int32_t pos, bool present) {
      store_claimed(present && pred(key, pos), key, pos, lower, slot);
    });
  }
  // The second visit's step (warp-collective): the lanes that take their
  // item store it at `slot` plus the takers below them (lower: the lanes
  // below this one, computed once a visit), and every lane advances `slot`
  // past the warp's takers.
  __device__ __forceinline__ void store_claimed(bool take, std::uint32_t key, std::int32_t pos, unsigned lower,
                                                std::uint32_t& slot) const {
    const unsigned voters = __ballot_sync(kFullWarp, take);
    if (take) out_[slot + __popc(voters & lower)] = order_key(key, pos);
    slot += __popc(voters);
  }

  // select_and_emit_window's resolve: the keys above top, and the r-th
  // largest first of the (at most kResolveCapacity) items in [bottom, top].
  // Returns the k-th key in warp 0 (0 elsewhere); no barrier at the end.
  template <int kWarps, class Items>
  __device__ std::uint32_t resolve_bin(const Items& items, std::uint32_t bottom, std::uint32_t top, std::uint32_t r,
                                       WindowSelectShared<kWarps>& sh) const {
    std::uint32_t above_slot = claim_counted(items, [top](std::uint32_t key, std::int32_t) { return key > top; });
    const unsigned lower = (1u << lane_id()) - 1;
    items([&](std::uint32_t key, std::int32_t pos, bool present) {
      const bool above = present && key > top;
      const bool in_bin = present && !above && key >= bottom;
      store_claimed(above, key, pos, lower, above_slot);
      if (__any_sync(kFullWarp, in_bin)) {
        const std::uint32_t bin_slot = warp_append<1>(in_bin ? 1u : 0u, &sh.resolve_count);
        if (in_bin) {
          sh.resolve_keys[bin_slot] = key;
          sh.resolve_pos[bin_slot] = pos;
        }
      }
    });
    __syncthreads();
    if (threadIdx.x >= kWarpSize) return 0;
    const std::uint32_t m = sh.resolve_count;  // the bin's count, <= kResolveCapacity
    const unsigned lane = lane_id();
    const bool has0 = lane < m, has1 = lane + kWarpSize < m;
    const std::uint32_t key0 = has0 ? sh.resolve_keys[lane] : 0u;
    const std::int32_t pos0 = has0 ? sh.resolve_pos[lane] : 0;
    const std::uint32_t key1 = has1 ? sh.resolve_keys[lane + kWarpSize] : 0u;
    const std::int32_t pos1 = has1 ? sh.resolve_pos[lane + kWarpSize] : 0;
    // Each item's place in the order key descending, position ascending
    // (positions are distinct, so the order is strict). Unrolled by 4: four
    // steps' shared loads in flight at once.
    std::uint32_t place0 = 0, place1 = 0;
#pragma unroll 4
    for (std::uint32_t j = 0; j < m; ++j) {
      const std::uint32_t key = sh.resolve_keys[j];
      const std::int32_t pos = sh.resolve_pos[j];
      place0 += (key > key0 || (key == key0 && pos < pos0)) ? 1u : 0u;
      place1 += (key > key1 || (key == key1 && pos < pos1)) ? 1u : 0u;
    }
    const bool take0 = has0 && place0 < r, take1 = has1 && place1 < r;
    std::uint32_t slot = warp_append<2>((take0 ? 1u : 0u) + (take1 ? 1u : 0u), emitted_);
    if (take0) out_[slot++] = order_key(key0, pos0);
    if (take1) out_[slot] = order_key(key1, pos1);
    // The k-th key: the least taken one (r >= 1 are taken).
    return __reduce_min_sync(kFullWarp, min(take0 ? key0 : 0xFFFFFFFFu, take1 ? key1 : 0xFFFFFFFFu));
  }

  std::uint64_t* out_;
  std::uint32_t* emitted_;
  RadixShared<std::uint32_t>& radix_;
  bool smallest_index_ties_;
};

// A row of len <= K keys needs no selection: every position, then padding
// (kEmptySlot), into out[K]. No barrier.
template <int K, int Threads>
__device__ void emit_whole_row(std::uint64_t* out, const float* row, std::int32_t len) {
  for (int slot = threadIdx.x; slot < K; slot += Threads) {
    out[slot] = slot < len ? order_key(score_key(__ldg(row + slot)), slot) : kEmptySlot;
  }
}

// write_row's most common case (unsorted, any ties, no values) in a select
// per slot and no branch: write_row's general slot costs ~20 instructions
// (docs/perf-log.md, T25). Kept apart from write_row: inlined there,
// the sampled kernel spills at 64 registers.
template <int K, int Threads>
__device__ void write_indices(const std::uint64_t* out, std::int32_t* indices, std::int32_t offset) {
  for (int slot = threadIdx.x; slot < K; slot += Threads) {
    const std::uint64_t order = out[slot];
    indices[slot] = order == kEmptySlot ? -1 : order_pos(order) + offset;
  }
}

// K order keys (kEmptySlot = padding) -> the row's indices (pos + offset)
// and values (value_of(pos, key)), in sorted order when asked. Smallest-index
// ties promise bit-identical runs, which the atomic slot order of `out` is
// not: that mode writes the sorted order too. The sort's storage may alias
// `out` and any buffer no thread reads after the barrier before the call.
template <int K, int Threads, class BlockSort, class ValueOf>
__device__ void write_row(const std::uint64_t* out, typename BlockSort::TempStorage& sort_storage,
                          std::int32_t* indices, float* values, std::int32_t offset, bool sorted,
                          bool smallest_index_ties, const ValueOf& value_of) {
  const auto write = [&](int slot, std::uint64_t order) {
    std::int32_t index = -1;
    float value = -std::numeric_limits<float>::infinity();
    if (order != kEmptySlot) {
      const std::int32_t pos = order_pos(order);
      index = pos + offset;
      if (values != nullptr) value = value_of(pos, static_cast<std::uint32_t>(order >> 32));
    }
    indices[slot] = index;
    if (values != nullptr) values[slot] = value;
  };
  if (!sorted && !smallest_index_ties) {
    for (int slot = threadIdx.x; slot < K; slot += Threads) write(slot, out[slot]);
    return;
  }
  constexpr int kPerThread = K / Threads;
  std::uint64_t items[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) items[i] = out[threadIdx.x * kPerThread + i];
  __syncthreads();  // out is read: the sort may overwrite it
  BlockSort(sort_storage).SortDescendingBlockedToStriped(items);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) write(i * Threads + threadIdx.x, items[i]);
}

}  // namespace dsa::selection::device
