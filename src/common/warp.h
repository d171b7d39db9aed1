// The warp as every kernel counts it. No CUDA header: host-side sizes use it.
#pragma once

namespace dsa {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullWarp = 0xFFFFFFFFu;  // every lane: the *_sync collectives' mask

}  // namespace dsa
