// The shared primitives: FP8 e4m3 decode/encode and the order-preserving key map.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/fp8.h"
#include "common/keys.h"

namespace dsa {
namespace {

// Independent formula for an e4m3fn byte (OCP FP8 spec): bias 7, no infinities.
double e4m3_formula(int byte) {
  const int sign = byte >> 7, exp = (byte >> 3) & 15, man = byte & 7;
  const double mag = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -mag : mag;
}

TEST(Fp8, DecodesEveryByteExactly) {
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), e4m3_formula(b)) << "byte " << b;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
}

TEST(Fp8, EncodeRoundTripsEveryFiniteByte) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(static_cast<std::uint8_t>(b))), b) << b;
  }
}

TEST(Fp8, EncodeRoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), float_to_fp8_e4m3(1.0f));    // halfway: even mantissa
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), float_to_fp8_e4m3(1.25f));   // halfway: up to even
  EXPECT_EQ(float_to_fp8_e4m3(1.07f), float_to_fp8_e4m3(1.125f));    // above halfway
  EXPECT_EQ(float_to_fp8_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(3.0f, -11)), 0x01);  // 0.75 of a 2^-9 step rounds up
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);  // exactly half a step: to even (0)
}

TEST(Keys, PreserveOrder) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ascending = {-inf, -3.4e38f, -1.0f, -1e-30f, -1e-45f, 0.0f,
                                        1e-45f, 1e-30f, 1.0f, 1.0000001f, 3.4e38f, inf};
  for (std::size_t i = 1; i < ascending.size(); ++i) {
    EXPECT_LT(score_key(ascending[i - 1]), score_key(ascending[i])) << ascending[i];
    EXPECT_EQ(key_score(score_key(ascending[i])), ascending[i]);
  }
}

TEST(Keys, CanonicaliseNegativeZeroAndNan) {
  EXPECT_EQ(score_key(-0.0f), score_key(0.0f));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(score_key(std::nanf("")), score_key(-inf));
  EXPECT_EQ(score_key(-std::nanf("")), score_key(-inf));
  EXPECT_EQ(score_key(-inf), kNegInfKey);
  EXPECT_LT(score_key(std::nanf("")), score_key(-3.4e38f));
}

}  // namespace
}  // namespace dsa
