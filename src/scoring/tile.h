// The scoring kernel's tile and the rows of scores it stores, for host code
// that plans launches without the kernel's CUDA headers (fused/plan.h,
// decode/plan.h); scoring/config.h holds the rest of the kernel's shape.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dsa::scoring {

inline constexpr int kTileKeys = 64;   // M of one wgmma: keys per tile
inline constexpr int kTileCols = 256;  // N of one wgmma: (query, head) columns

// Floats between rows of a scores buffer the scoring kernel stores
// (StoreSink) and the standalone top-k reads: num_keys rounded up to whole
// float4s, at least one, so every row starts 16-byte aligned.
constexpr std::int64_t score_row_stride(std::int64_t num_keys) {
  return std::max<std::int64_t>(4, (num_keys + 3) / 4 * 4);
}

}  // namespace dsa::scoring
