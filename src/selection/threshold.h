// The sampled threshold's rank (selection/model.h, step 1), once for the
// selection model, the standalone top-k and the fused operator's threshold
// stage. Of a row's S samples, e = S K / len are expected in its top K; tau
// is the sample of rank j = ceil(e + guard sqrt(e)) + 1 (at least 1), so the
// top K reach below tau only when that count runs `guard` standard
// deviations above e (underflow). No CUDA header.
#pragma once

#include <cmath>

#include "common/host_device.h"

namespace dsa::selection {

// Underflow, the costly failure (a repair), is then a ~4-sigma event per row.
inline constexpr double kThresholdGuard = 4.0;

// j for `expected` = e; a j above the row's sample count means no sample
// is low enough, and tau = 0 (every key passes).
DSA_HD double threshold_rank(double expected, double guard = kThresholdGuard) {
  return fmax(1.0, ceil(expected + guard * sqrt(expected)) + 1.0);
}

}  // namespace dsa::selection
