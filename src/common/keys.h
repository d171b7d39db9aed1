// The order-preserving map from fp32 scores to uint32 keys used by every
// selection path (CPU model, standalone GPU top-k, fused kernel, repair).
//
// key(a) < key(b)  <=>  a < b  for non-NaN a, b, with two canonicalisations that
// make key equality the same as score equality under the contract:
//   * -0.0 maps like +0.0 (they compare equal as floats);
//   * NaN maps like -inf (contract: a NaN score ranks as -inf).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace dsa {

inline constexpr std::uint32_t kNegInfKey = 0x007FFFFFu;  // score_key(-inf)

DSA_HD std::uint32_t score_key(float score) {
  std::uint32_t bits;
  __builtin_memcpy(&bits, &score, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return kNegInfKey;  // NaN
  if (bits == 0x80000000u) bits = 0;                           // -0.0
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

#ifdef __CUDACC__
// score_key in four instructions for the hot loops of the GPU selection:
// adding +0 turns -0 into +0, fmaxf with -inf turns NaN into -inf (IEEE
// maxNum returns the non-NaN operand), then the usual sign flip. Equal to
// score_key for every one of the 2^32 inputs (DevicePrimitives test,
// exhaustive); needs IEEE adds (no fast-math flush of -0 or denormals).
__device__ __forceinline__ std::uint32_t score_key_fast(float score) {
  const std::uint32_t bits = __float_as_uint(fmaxf(score + 0.0f, -__int_as_float(0x7F800000)));
  return bits ^ (static_cast<std::uint32_t>(static_cast<std::int32_t>(bits) >> 31) | 0x80000000u);
}
#endif

// Inverse of score_key on canonical keys (never yields -0.0 or NaN).
DSA_HD float key_score(std::uint32_t key) {
  const std::uint32_t bits = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float out;
  __builtin_memcpy(&out, &bits, sizeof(out));
  return out;
}

}  // namespace dsa
