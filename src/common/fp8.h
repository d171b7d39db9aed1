// FP8 e4m3fn (float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits.
// No infinities; 0x7f / 0xff are NaN; largest finite magnitude is 448.
// Every e4m3 value is exactly representable in fp32, so decode is exact, and the
// product of two e4m3 values (<= 8 significant bits) is exact in fp32 too.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace dsa {

inline constexpr float kFp8E4m3Max = 448.0f;

// 0x7f and 0xff, the only NaN encodings (e4m3fn has no infinities).
DSA_HD bool fp8_is_nan(std::uint8_t byte) { return (byte & 0x7F) == 0x7F; }

// Exact decode of one e4m3fn byte.
DSA_HD float fp8_e4m3_to_float(std::uint8_t byte) {
  const std::uint32_t sign = static_cast<std::uint32_t>(byte & 0x80u) << 24;
  const std::uint32_t exp = (byte >> 3) & 0xFu;
  const std::uint32_t man = byte & 0x7u;
  std::uint32_t bits;
  if (exp == 0xFu && man == 0x7u) {
    bits = sign | 0x7FC00000u;  // NaN
  } else if (exp == 0) {
    if (man == 0) {
      bits = sign;  // +-0
    } else {
      // Subnormal: man * 2^-9. Normalise: value = 1.m' * 2^(e) with e in [-9, -7].
      int shift = 0;
      std::uint32_t m = man;
      while ((m & 0x4u) == 0) {
        m <<= 1;
        ++shift;
      }
      const std::uint32_t e32 = static_cast<std::uint32_t>(127 - 7 - shift);
      bits = sign | (e32 << 23) | ((m & 0x3u) << 21);
    }
  } else {
    bits = sign | ((exp + 120u) << 23) | (man << 20);
  }
  float out;
  __builtin_memcpy(&out, &bits, sizeof(out));
  return out;
}

// Round-to-nearest-even encode with saturation to +-448 (what a quantizer that
// scales by amax/448 produces). NaN encodes to 0x7f. Used by the generators.
std::uint8_t float_to_fp8_e4m3(float value);

}  // namespace dsa
