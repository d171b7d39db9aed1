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

template <int K>
class Emitter {
 public:
  // out: K order-key slots; emitted: the slot counter (0 at entry).
  __device__ Emitter(std::uint64_t* out, std::uint32_t* emitted, RadixShared& radix, bool smallest_index_ties)
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

  // Radix select and emission over an item set that holds the answer: emits
  // its top k and returns the k-th largest key. lo/hi: bounds of the item
  // keys, when known (block_radix_select).
  template <class Items>
  __device__ std::uint32_t select_and_emit(const Items& items, std::uint32_t k, std::uint32_t lo = 0,
                                           std::uint32_t hi = 0xFFFFFFFFu) const {
    const auto keys = [&](auto&& fn) {
      items([&](std::uint32_t key, std::int32_t, bool present) { fn(key, present); });
    };
    const RadixResult kth = block_radix_select<true>(keys, k, radix_, lo, hi);
    if (kth.whole_bin) {
      // The top k are the keys >= the bin's bound, no tie to cut; the k-th
      // largest is the least of them (for the caller's trace).
      std::uint32_t least = 0xFFFFFFFFu;
      emit_if(items, [&](std::uint32_t key, std::int32_t) {
        const bool take = key >= kth.kth_key;
        if (take) least = min(least, key);
        return take;
      });
      least = __reduce_min_sync(kFullWarp, least);
      if (lane_id() == 0) atomicMin(&radix_.least, least);
      __syncthreads();
      return radix_.least;
    }
    emit_if(items, [&](std::uint32_t key, std::int32_t) { return key > kth.kth_key; });
    __syncthreads();
    emit_ties(items, kth.kth_key, kth.take_equal);
    return kth.kth_key;
  }

 private:
  std::uint64_t* out_;
  std::uint32_t* emitted_;
  RadixShared& radix_;
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
// (docs/perf-log.md "Session 10"). Kept apart from write_row: inlined there,
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
