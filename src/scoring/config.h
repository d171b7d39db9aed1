// Configuration of the FP8 indexer scoring kernel (docs/design.md, "Scoring").
//
// One CTA scores a block of queries against a chunk of keys. The GEMM is laid
// out with keys as M and (query, head) pairs as N: a 64-key tile times
// 256 (query, head) columns per wgmma, so a thread's accumulators hold whole
// head groups of a few queries and the head reduction needs two shuffles and
// no shared memory.
#pragma once

#include <cstdint>

#include "common/sm90/barrier.cuh"

namespace dsa::scoring {

inline constexpr int kHeadDim = 128;         // D: bytes of one FP8 row
inline constexpr int kTileKeys = 64;         // M of one wgmma: keys per tile
inline constexpr int kTileCols = 256;        // N of one wgmma: (query, head) columns
inline constexpr int kStages = 8;            // key tiles in flight
inline constexpr int kMathWarpgroups = 2;    // alternate tiles (ping-pong)
inline constexpr int kThreads = 128 * (1 + kMathWarpgroups);  // warpgroup 0 produces
inline constexpr int kProducerRegs = 40;     // setmaxnreg budgets
inline constexpr int kMathRegs = 232;

template <int kHeads>
struct Shape {
  static constexpr int kQueries = kTileCols / kHeads;  // queries per CTA block
  static constexpr int kHeadGroups = kHeads / 8;       // 8-column groups per query
};

// Shared memory of one CTA; the launcher sizes it with sizeof (+1 KiB for
// aligning the base to the 1 KiB the 128-byte swizzle needs).
struct alignas(1024) SharedStorage {
  std::uint8_t keys[kStages][kTileKeys * kHeadDim];  // [stage][key][d], 128-byte swizzled
  std::uint8_t q[kTileCols * kHeadDim];              // [query * H + head][d], 128-byte swizzled
  float key_scale[kStages][kTileKeys];
  sm90::Pipeline<kStages> pipeline;
  std::uint64_t q_full;
};

inline constexpr std::uint32_t kKeyTileBytes = kTileKeys * kHeadDim;
inline constexpr std::uint32_t kScaleTileBytes = kTileKeys * sizeof(float);
inline constexpr std::uint32_t kQBytes = kTileCols * kHeadDim;

}  // namespace dsa::scoring
