// Configuration of the FP8 indexer scoring kernel (docs/design.md, "Scoring").
//
// A CTA scores blocks of queries against runs of key tiles (schedule.cuh).
// The GEMM is laid
// out with keys as M and (query, head) pairs as N: a 64-key tile times
// 256 (query, head) columns per wgmma, so a thread's accumulators hold whole
// head groups of a few queries and the head reduction needs two shuffles and
// no shared memory.
#pragma once

#include <cstdint>

#include "common/sm90/barrier.cuh"
#include "common/warp.h"
#include "dsa_topk/dsa_topk.h"
#include "scoring/schedule.cuh"
#include "scoring/tile.h"

namespace dsa::scoring {

using ::dsa::kHeadDim;                       // D (dsa_topk.h): bytes of one FP8 row
// kTileKeys, kTileCols: scoring/tile.h.
inline constexpr int kStages = 8;            // key tiles in flight

// The CTA's warp roles (scoring_kernel.cuh): warpgroup 0 produces (thread 0
// issues the loads, warp kSchedulerWarp writes the units), and the
// kMathWarpgroups after it multiply and run the sink on alternate tiles; a
// math warp's index among the math warps is its warp index less
// kFirstMathWarp.
inline constexpr int kWarpgroupThreads = 128;  // wgmma's unit
inline constexpr int kWarpgroupWarps = kWarpgroupThreads / kWarpSize;
inline constexpr int kMathWarpgroups = 2;    // alternate tiles (ping-pong)
inline constexpr int kThreads = kWarpgroupThreads * (1 + kMathWarpgroups);
inline constexpr int kSchedulerWarp = 1;
// Warp 3 of warpgroup 0 has no role in the loop (thread 0 and, over a
// paged cache, lane 0 of warp 2 load): a sink may run a helper on it
// (scoring_kernel.cuh, kSinkHasHelper).
inline constexpr int kHelperWarp = 3;
inline constexpr int kFirstMathWarp = kWarpgroupWarps;
inline constexpr int kMathThreads = kWarpgroupThreads * kMathWarpgroups;
inline constexpr int kMathWarps = kMathThreads / kWarpSize;

// setmaxnreg budgets. setmaxnreg.inc waits until the CTA's pool has the
// registers, and the pool is what the launch allotted (168 per thread, 65536
// / kThreads in steps of 8): a split over it deadlocks. The producer
// warpgroup (TMA thread, scheduler warp) fits in 24 (the scheduler works in
// 32-bit block and tile counts for that); the fused filter's math needs 240.
// A key source (scoring_kernel.cuh) may take more for its producer; the
// math warpgroups get what is left.
inline constexpr int kContiguousProducerRegs = 24;
inline constexpr int kRegisterPool = (65536 / kThreads) / 8 * 8 * kThreads;
constexpr int math_regs(int producer_regs) {
  return (kRegisterPool - kWarpgroupThreads * producer_regs) / kMathThreads / 8 * 8;
}
static_assert(math_regs(kContiguousProducerRegs) == 240, "the fused filter's math needs 240 registers");
static_assert(kWarpgroupThreads * kContiguousProducerRegs + kMathThreads * math_regs(kContiguousProducerRegs) <=
                  kRegisterPool,
              "setmaxnreg budgets exceed the registers the launch allots");

// kCols: the (query, head) columns of a block, kTileCols but for decode's
// narrow blocks (64 or 128: one or two requests' tokens, PagedKeys); the
// shared storage is sized for kTileCols either way.
template <int kHeads, int kCols = kTileCols>
struct Shape {
  static constexpr int kColumns = kCols;
  static constexpr int kQueries = kCols / kHeads;      // queries per CTA block
  static constexpr int kHeadGroups = kHeads / 8;       // 8-column groups per query
  static constexpr int kAccumulators = kCols / 2;      // a thread's share of the 64 x kCols tile
  static_assert(kCols == 64 || kCols == 128 || kCols == kTileCols, "a wgmma wrapper exists for N = 64, 128, 256");
  static_assert(kQueries >= 1, "a block holds at least one query");
  static_assert(kQueries <= kTileCols / 32, "SharedStorage::rows holds kTileCols / 32 rows (H >= 32)");
};

inline constexpr int kMaxSmemBytes = 227 * 1024;  // dynamic shared memory a CTA may have (H100/H200)

inline constexpr int kUnitSlots = 2;         // units in flight: the next unit's queries load
                                             // while the current one finishes

// Shared memory of one CTA; the launcher sizes it with sizeof (+1 KiB for
// aligning the base to the 1 KiB the 128-byte swizzle needs).
struct alignas(1024) SharedStorage {
  std::uint8_t keys[kStages][kTileKeys * kHeadDim];  // [stage][key][d], 128-byte swizzled
  std::uint8_t q[kUnitSlots][kTileCols * kHeadDim];  // [slot][query * H + head][d], 128-byte swizzled
  float key_scale[kStages][kTileKeys];
  float half_w[kUnitSlots][kTileCols];               // [slot][query * H + head]: 0.5 * w (0 past T)
  RowRange rows[kUnitSlots][kTileCols / 32];         // [slot][query]: the unit's row ranges (empty past T)
  Unit unit[kUnitSlots];
  sm90::Pipeline<kStages> pipeline;
  std::uint64_t unit_keys[kUnitSlots];   // unit written (the scheduler warp's lane 0): the producers' wait
  std::uint64_t unit_full[kUnitSlots];   // unit, half_w and rows written (the scheduler warp's 32 lanes)
  std::uint64_t q_full[kUnitSlots];      // the unit's Q block landed (TMA)
  std::uint64_t unit_empty[kUnitSlots];  // every math thread (and producer, if several) is done with the slot
  std::int64_t warp_sums[kThreads / kWarpSize];  // the run search (find_run)
  RunStart run;
};
inline constexpr std::uint32_t kKeyTileBytes = kTileKeys * kHeadDim;
inline constexpr std::uint32_t kScaleTileBytes = kTileKeys * sizeof(float);

}  // namespace dsa::scoring
