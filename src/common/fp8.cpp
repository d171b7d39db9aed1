#include "common/fp8.h"

#include <cmath>
#include <cstring>

namespace dsa {

std::uint8_t float_to_fp8_e4m3(float value) {
  if (std::isnan(value)) return 0x7F;
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float mag = std::fabs(value);
  if (mag >= kFp8E4m3Max) return sign | 0x7E;  // saturate to 448 (inf too)
  // The smallest normal is 2^-6; below it the step is 2^-9 (subnormals).
  int exp = 0;
  std::frexp(mag, &exp);         // mag = f * 2^exp, f in [0.5, 1)
  int e = exp - 1;               // mag = 1.x * 2^e
  if (e < -6) e = -6;            // subnormal range shares the 2^-9 step
  const float step = std::ldexp(1.0f, e - 3);
  // Round half to even in units of `step` (exact: mag/step < 2^5).
  float units = std::nearbyint(mag / step);
  float rounded = units * step;
  if (rounded >= kFp8E4m3Max) return sign | 0x7E;
  // Encode `rounded` exactly by searching the 127 magnitudes (called off the
  // hot path: generators and tests only).
  std::uint8_t best = 0;
  for (int b = 0; b < 0x7F; ++b) {
    if (fp8_e4m3_to_float(static_cast<std::uint8_t>(b)) == rounded) {
      best = static_cast<std::uint8_t>(b);
      break;
    }
  }
  return sign | best;
}

}  // namespace dsa
