// How the selection kernels read score rows and record candidates: the
// vectorised row visitor, the filter's warp-aggregated append into
// shared-memory candidate buffers, and the 64-bit order key of a selected
// (key, position). Shared by the standalone top-k and, later, the fused kernel.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/keys.h"
#include "selection/device/radix.cuh"

namespace dsa::selection::device {

// Order key of a selected score: larger means earlier in sorted output (key
// descending, then position ascending). Score keys are >= kNegInfKey > 0, so
// 0 never encodes a score and marks an empty (padding) slot.
inline constexpr std::uint64_t kEmptySlot = 0;
__device__ __forceinline__ std::uint64_t order_key(std::uint32_t key, std::int32_t pos) {
  return (static_cast<std::uint64_t>(key) << 32) | ~static_cast<std::uint32_t>(pos);
}
__device__ __forceinline__ std::int32_t order_pos(std::uint64_t order) {
  return static_cast<std::int32_t>(~static_cast<std::uint32_t>(order));
}

// The key ~pos ranks positions so that the largest is the smallest index
// (deterministic tie cut, as in the model).
__device__ __forceinline__ std::uint32_t index_order_key(std::int32_t pos) {
  return ~static_cast<std::uint32_t>(pos);
}

inline constexpr int kGroupSize = 4;  // elements of one 16-byte load

// Up to Groups * 4 row elements one thread holds after one round of loads:
// element e = 4u + j is at row position pos0 + u * group_stride + j and
// present when bit e of `valid` is set; an absent element holds kAbsentBits (a
// NaN, which fails every float compare). Values stay floats: the filter
// compares them directly.
inline constexpr std::uint32_t kAbsentBits = 0x7FC00000u;  // a quiet NaN

template <int Groups>
struct Batch {
  static constexpr int kElements = Groups * kGroupSize;
  static_assert(kElements <= 32, "the filter's masks and `valid` hold one bit per element");
  float value[Groups][kGroupSize];
  std::int32_t pos0;          // position of element 0
  std::int32_t group_stride;  // positions from one 16-byte group to the next
  std::uint32_t valid;
  __device__ __forceinline__ bool present(int e) const { return (valid >> e) & 1u; }
  __device__ __forceinline__ float at(int e) const { return value[e / kGroupSize][e % kGroupSize]; }
  // Arithmetic only, so e may be known only at run time (unsigned: the
  // division and remainder are a shift and a mask, no sign fix-up).
  __device__ __forceinline__ std::int32_t pos(unsigned e) const {
    return pos0 + static_cast<std::int32_t>(e / kGroupSize) * group_stride + static_cast<std::int32_t>(e % kGroupSize);
  }
};

// Calls fn(batch) over the row [0, len): every thread of the block calls fn
// the same number of times, so fn may use warp collectives. The body is read
// with 16-byte loads, Groups of them in flight per thread; the unaligned head
// (row need only be 4-byte aligned) and the tail (< 4 elements each) form one
// last batch holding at most one element per thread.
template <int Threads, int Groups, class Fn>
__device__ __forceinline__ void for_each_row_batch(const float* row, std::int32_t len, Fn&& fn) {
  const auto misalign = static_cast<std::int32_t>((reinterpret_cast<std::uintptr_t>(row) / sizeof(float)) % kGroupSize);
  const std::int32_t head = min(len, (kGroupSize - misalign) % kGroupSize);
  const std::int32_t vectors = (len - head) / kGroupSize;
  const float4* body = reinterpret_cast<const float4*>(row + head);
  const auto tid = static_cast<std::int32_t>(threadIdx.x);
  constexpr std::int32_t kRound = Threads * Groups;  // 16-byte groups per round
  // One round from group `base`. Full rounds (every load present) take no
  // predicate and no NaN fill (the predicated form spent ~30 instructions a
  // round on them at Groups = 6, docs/perf-log.md, T36); only the
  // last round can be partial.
  const auto round = [&](std::int32_t base, auto full) {
    constexpr bool kFull = decltype(full)::value;
    Batch<Groups> b;
    b.valid = kFull ? (Groups * kGroupSize >= 32 ? 0xFFFFFFFFu : (1u << (Groups * kGroupSize)) - 1u) : 0u;
    b.pos0 = head + kGroupSize * (base + tid);
    b.group_stride = kGroupSize * Threads;
#pragma unroll
    for (int u = 0; u < Groups; ++u) {
      const std::int32_t i = base + u * Threads + tid;
      float4 v;
      if constexpr (kFull) {
        v = __ldg(body + i);
      } else {
        const float absent = __uint_as_float(kAbsentBits);
        v = i < vectors ? __ldg(body + i) : make_float4(absent, absent, absent, absent);
        b.valid |= (i < vectors ? 0xFu : 0u) << (kGroupSize * u);
      }
      b.value[u][0] = v.x;
      b.value[u][1] = v.y;
      b.value[u][2] = v.z;
      b.value[u][3] = v.w;
    }
    fn(b);
  };
  std::int32_t base = 0;
  for (; base + kRound <= vectors; base += kRound) round(base, std::true_type{});
  if (base < vectors) round(base, std::false_type{});
  const std::int32_t tail_start = head + kGroupSize * vectors;
  const std::int32_t pos = tid < head ? tid : tail_start + (tid - head);
  const bool present = tid < head || pos < len;
  Batch<Groups> b;  // every field is set below
  b.group_stride = kGroupSize * Threads;
#pragma unroll
  for (int u = 0; u < Groups; ++u) {
#pragma unroll
    for (int j = 0; j < kGroupSize; ++j) b.value[u][j] = __uint_as_float(kAbsentBits);
  }
  b.value[0][0] = present ? __ldg(row + pos) : __uint_as_float(kAbsentBits);
  b.pos0 = pos;
  b.valid = present ? 1u : 0u;
  fn(b);
}

// The filter's comparison with tau, two exact forms of key > tau / key == tau:
// on floats when tau is the canonical key of a float above -inf (then a NaN,
// whose key is -inf's, fails both tests as a float compare does, and -0 == +0
// in both), else on keys (tau <= key(-inf): NaN and -inf pass).
// kAbsentFails: a Batch's absent elements (kAbsentBits, a NaN) fail both tests,
// so the filter needs no presence test (~3 of ~9 instructions an element in
// the SASS, docs/perf-log.md, T29).
struct FloatThreshold {
  static constexpr bool kAbsentFails = true;
  float tau;
  __device__ __forceinline__ bool above(float v) const { return v > tau; }
  __device__ __forceinline__ bool equal(float v) const { return v == tau; }
};
struct KeyThreshold {
  static constexpr bool kAbsentFails = false;
  std::uint32_t tau;
  __device__ __forceinline__ bool above(float v) const { return score_key(v) > tau; }
  __device__ __forceinline__ bool equal(float v) const { return score_key(v) == tau; }
};
__device__ __forceinline__ bool float_comparable(std::uint32_t tau) {
  return tau > kNegInfKey && score_key(key_score(tau)) == tau;
}

// The filter's shared-memory destination: keys > tau with their positions,
// and the positions of keys == tau. A slot past a capacity is handed out but
// not stored; the exact counts are kept apart, so overflow is detected.
struct CandidateBuffers {
  std::uint32_t* keys;      // [capacity]
  std::int32_t* pos;        // [capacity]
  std::uint32_t capacity;
  std::uint32_t* slots;     // slots handed out for keys > tau
  std::int32_t* tie_pos;    // [tie_capacity]
  std::uint32_t tie_capacity;
  std::uint32_t* tie_slots; // slots handed out for keys == tau
};

// What one thread's filter steps found: exact counts, and the greatest key
// it stored (a bound for the candidates' radix select).
struct FilterTally {
  std::uint32_t count_gt = 0;  // keys > tau
  std::uint32_t count_eq = 0;  // keys == tau
  std::uint32_t greatest = 0;  // the greatest key stored in the buffers (0: none)
};

// Filter step of one batch (warp-collective): counts this thread's keys > tau
// and == tau into the tally and appends them to the buffers while there
// is room. A warp round (32 threads x 16-32 elements at 3% pass rate) usually has
// a candidate, so the append is one atomic per warp round, not per group
// (warp_count_scan and warp_claim: a shuffle scan of the lanes' counts).
// Each thread then visits only its own set bits (a warp loops as often as
// its busiest lane, usually once or twice, instead of 16 predicated slots);
// a candidate's key is read again from the row (`row`: the batch's
// positions index it; the line was just loaded), since its register cannot
// be picked by a run-time index.
// kTies = false: keys == tau are neither counted nor stored (one compare an
// element instead of two), for a tau that is unlikely to be a score of the
// row; the caller must then prove the answer from count_gt alone.
template <bool kTies, int Groups, class Threshold>
__device__ __forceinline__ void filter_batch(const Batch<Groups>& b, const Threshold& tau, const CandidateBuffers& out,
                                             const float* row, FilterTally& tally) {
  std::uint32_t gt = 0, eq = 0;
#pragma unroll
  for (int e = 0; e < Batch<Groups>::kElements; ++e) {
    const bool present = Threshold::kAbsentFails || b.present(e);
    gt |= static_cast<std::uint32_t>(present && tau.above(b.at(e))) << e;
    if constexpr (kTies) eq |= static_cast<std::uint32_t>(present && tau.equal(b.at(e))) << e;
  }
  tally.count_gt += __popc(gt);
  if constexpr (kTies) tally.count_eq += __popc(eq);
  if (__any_sync(kFullWarp, gt != 0)) {
    std::uint32_t total = 0;
    const std::uint32_t n = __popc(gt);
    std::uint32_t slot = warp_claim(out.slots, n, warp_count_scan(n, total));
    for (std::uint32_t m = gt; m != 0 && slot < out.capacity; m &= m - 1, ++slot) {
      const std::int32_t pos = b.pos(static_cast<unsigned>(__ffs(m) - 1));
      const std::uint32_t key = score_key_fast(__ldg(row + pos));
      out.keys[slot] = key;
      out.pos[slot] = pos;
      tally.greatest = max(tally.greatest, key);
    }
  }
  if (kTies && __any_sync(kFullWarp, eq != 0)) {
    std::uint32_t total = 0;
    const std::uint32_t n = __popc(eq);
    std::uint32_t slot = warp_claim(out.tie_slots, n, warp_count_scan(n, total));
    for (std::uint32_t m = eq; m != 0 && slot < out.tie_capacity; m &= m - 1, ++slot) {
      out.tie_pos[slot] = b.pos(static_cast<unsigned>(__ffs(m) - 1));
    }
  }
}

}  // namespace dsa::selection::device
