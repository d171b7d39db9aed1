// Seeded generators. Reproducibility rule: every random value comes from a
// splitmix64 stream keyed by (seed, tensor name, row), and every transform
// after it uses only IEEE basic operations (+ - * / sqrt, exact scalings), so
// the same spec gives the same bytes with any standard library, thread count
// or work split. No std::*_distribution (their algorithms differ between
// standard libraries) and no libm transcendental (last-ulp differences). The
// one compiler dependence left is floating-point contraction: a build that
// fuses a * b + c into an FMA (-ffp-contract=fast with FMA enabled) rounds
// differently; x86-64 builds without -mfma do not fuse.
#include "tools/generators.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/fp8.h"
#include "common/keys.h"
#include "common/parallel.h"

namespace dsa::tools {
namespace {

// ------------------------------------------------------------- randomness --

constexpr std::uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// splitmix64's output function: a bijective avalanche mix of 64 bits.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a, to turn a tensor name into part of a stream key.
constexpr std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

// log(c) for c in [1, 2) by the series log(c) = 2 atanh(z), z = (c-1)/(c+1)
// <= 1/3, summed far past double precision. Evaluated at compile time only
// (kLogCellCentres is constexpr), where GCC and Clang round exactly as IEEE.
constexpr double series_log(double c) {
  constexpr int kLastOddPower = 59;  // (1/3)^59 < 1e-28
  const double z = (c - 1.0) / (c + 1.0);
  double sum = 0.0, power = z;
  for (int p = 1; p <= kLastOddPower; p += 2) {
    sum += power / p;
    power *= z * z;
  }
  return 2.0 * sum;
}

constexpr int kLogCellBits = 7;
constexpr int kLogCells = 1 << kLogCellBits;

// log of the centre of each of the kLogCells cells of [1, 2).
constexpr std::array<double, kLogCells> kLogCellCentres = [] {
  std::array<double, kLogCells> table{};
  for (int i = 0; i < kLogCells; ++i) table[i] = series_log(1.0 + (i + 0.5) / kLogCells);
  return table;
}();

// Natural log of a positive normal double, for the normal sampler. x = 2^e m
// with m in [1, 2) near the centre c of its cell: log(m) = log(c) + 2 atanh(z),
// z = (m - c) / (m + c), |z| <= 2^-9, where two series terms leave an error
// below 2e-14 * max(1, |log x|). Exact bit operations and IEEE basic
// arithmetic only, so the result does not depend on the platform's libm.
double sample_log(double x) {
  constexpr std::uint64_t kMantissaMask = (1ull << 52) - 1;
  constexpr std::uint64_t kExponentOfOne = 1023ull << 52;
  constexpr double kLn2 = 0.69314718055994530942;
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const int e = static_cast<int>(bits >> 52) - 1023;
  const auto cell = static_cast<int>((bits >> (52 - kLogCellBits)) & (kLogCells - 1));
  const double m = std::bit_cast<double>((bits & kMantissaMask) | kExponentOfOne);
  const double c = 1.0 + (cell + 0.5) / kLogCells;
  const double z = (m - c) / (m + c);
  return e * kLn2 + kLogCellCentres[cell] + 2.0 * z * (1.0 + z * z * (1.0 / 3.0));
}

// One random stream: splitmix64 (a Weyl sequence through mix64).
class Rng {
 public:
  explicit Rng(std::uint64_t state) : state_(state) {}

  std::uint64_t next() {
    state_ += kGoldenGamma;
    return mix64(state_);
  }
  // Uniform in [0, 1) with 53 random bits (exact in double).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] for hi - lo < 2^32, by integer multiply-shift
  // (bias below 2^-32, irrelevant for test data).
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const auto n = static_cast<std::uint64_t>(hi - lo + 1);
    return lo + static_cast<std::int64_t>(((next() >> 32) * n) >> 32);
  }

 private:
  std::uint64_t state_;
};

// The stream of item `index` of tensor `name`: items are seeded independently
// so that rows can be generated in any order, on any thread.
Rng stream(std::uint64_t seed, std::string_view name, std::uint64_t index) {
  const std::uint64_t base = mix64(seed ^ hash_name(name));
  return Rng(mix64(base + mix64(index + kGoldenGamma)));
}

// Fills `out` with standard normals by Marsaglia's polar form of Box-Muller
// (a log and a sqrt per pair, both reproducible here; an odd count drops the
// last pair's second value). Two passes per batch: first points (u, v) of the
// unit disc minus its centre, by rejection from [-1, 1)^2 with 32 bits per
// coordinate from one draw (a rejected point is overwritten, not branched
// over); then log, division and sqrt over independent points, which pipeline
// instead of waiting on each other.
void fill_normal(Rng& rng, std::span<float> out) {
  constexpr std::size_t kBatch = 64;  // pairs per pass
  std::array<double, kBatch> u, v, s;
  std::size_t done = 0;
  while (done < out.size()) {
    const std::size_t pairs = std::min(kBatch, (out.size() - done + 1) / 2);
    for (std::size_t i = 0; i < pairs;) {
      const std::uint64_t bits = rng.next();
      u[i] = static_cast<std::int32_t>(bits >> 32) * 0x1.0p-31;
      v[i] = static_cast<std::int32_t>(bits & 0xFFFFFFFFu) * 0x1.0p-31;
      s[i] = u[i] * u[i] + v[i] * v[i];
      i += (s[i] < 1.0 && s[i] > 0.0) ? 1 : 0;
    }
    for (std::size_t i = 0; i < pairs; ++i) {
      const double factor = std::sqrt(-2.0 * sample_log(s[i]) / s[i]);
      out[done++] = static_cast<float>(u[i] * factor);
      if (done < out.size()) out[done++] = static_cast<float>(v[i] * factor);
    }
  }
}

// A bell-shaped sample from one 64-bit draw, for the score matrices where a
// polar normal per element is too slow: the sum of three 21-bit uniforms
// (Irwin-Hall, n = 3), centred and scaled to unit variance. Range [-3, 3);
// every step is exact in float (the sum is below 2^23).
float bell(std::uint64_t bits) {
  constexpr std::uint64_t kMask = (1ull << 21) - 1;
  const auto sum =
      static_cast<float>((bits & kMask) + ((bits >> 21) & kMask) + ((bits >> 42) & kMask));
  return (sum * 0x1.0p-21f - 1.5f) * 2.0f;
}

// A float (1 + m) * 2^exp with m from the low 23 bits: magnitudes cover
// [2^exp, 2^(exp+1)) evenly, exactly.
float power_of_two_spread(std::uint64_t bits, int exp) {
  constexpr std::uint64_t kMantissaMask = (1ull << 23) - 1;
  return std::ldexp(1.0f + static_cast<float>(bits & kMantissaMask) * 0x1.0p-23f, exp);
}

// Random sign and magnitude in [2^-8, 2^8) with a uniform octave, from one
// draw: sign bit 63, octave bits 32-35, mantissa bits 0-22.
float mixed_sign_value(std::uint64_t bits) {
  constexpr int kMinExp = -8;
  const float magnitude = power_of_two_spread(bits, static_cast<int>((bits >> 32) & 15) + kMinExp);
  return (bits >> 63) != 0 ? -magnitude : magnitude;
}

// ----------------------------------------------------------- parallelism --

// Items are seeded by index, so parallel_blocks' split (common/parallel.h)
// does not change the generated bytes.

// ------------------------------------------------------------------- FP8 --

// float -> e4m3 at table cost, bit-identical to dsa::float_to_fp8_e4m3 for
// every float. Round-to-nearest-even onto 3 mantissa bits depends only on the
// sign, the exponent, the top 4 mantissa bits (3 kept + the round bit; fewer
// are kept in the subnormal range) and whether any lower bit is set (sticky);
// saturation at 448 and NaN are decided by the same bits. So the exact encoder
// is evaluated once per (top 13 bits, sticky) class (checked against it over
// all 2^32 floats when this was written).
class Fp8Encoder {
 public:
  Fp8Encoder() {
    for (std::uint32_t top = 0; top < (1u << kTopBits); ++top) {
      for (std::uint32_t sticky = 0; sticky < 2; ++sticky) {
        const float representative = std::bit_cast<float>((top << kLowBits) | sticky);
        table_[(top << 1) | sticky] = float_to_fp8_e4m3(representative);
      }
    }
  }
  std::uint8_t operator()(float x) const {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    const std::uint32_t sticky = (bits & ((1u << kLowBits) - 1)) != 0 ? 1u : 0u;
    return table_[((bits >> kLowBits) << 1) | sticky];
  }

 private:
  static constexpr int kLowBits = 19;             // below the round bit
  static constexpr int kTopBits = 32 - kLowBits;  // sign, exponent, 4 mantissa bits
  std::array<std::uint8_t, (1u << (kTopBits + 1))> table_{};
};

const Fp8Encoder& encode_fp8() {
  static const Fp8Encoder encoder;
  return encoder;
}

using KeyRow = std::array<float, kHeadDim>;

// Per-row quantisation as FP8 KV caches do it: scale = amax / 448 maps the
// largest element to the top of the e4m3 range. Returns the scale (> 0).
float quantise_row(const KeyRow& x, std::uint8_t* out) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  // An all-zero row (never drawn in practice) still needs a valid scale.
  const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
  const Fp8Encoder& encode = encode_fp8();
  for (int d = 0; d < kHeadDim; ++d) out[d] = encode(x[d] / scale);
  return scale;
}

KeyRow normal_row(Rng& rng) {
  KeyRow x;
  fill_normal(rng, x);
  return x;
}

// ------------------------------------------------------- indexer inputs ---

// Distribution constants (docs/design.md explains the choices).
constexpr int kTiesPoolRows = 8;             // distinct key rows under kTies
constexpr int kTiesZeroQueryPeriod = 4;      // every 4th query row has q == 0
constexpr float kDeadReluQueryMean = -0.6f;  // q mean against non-negative keys
constexpr double kDeadReluLiveKeys = 0.1;    // keys drawn model-like (half their dots > 0)
constexpr float kShiftedNoisyBelow = 16.0f;  // FP8 elements that get noise (row amax is 448)
constexpr double kShiftedScale = 1000.0;     // k_scale in [1000, 1001)
constexpr double kShiftedScaleSpread = 1e-3;
constexpr int kSmallIntMax = 3;  // q, k in [-3, 3]
constexpr float kSmallIntWeights[] = {-2.0f, -1.0f, -0.5f, 0.5f, 1.0f, 2.0f};
constexpr int kSmallIntMinScaleExp = -2;  // k_scale in {0.25, ..., 4}
constexpr int kSmallIntMaxScaleExp = 2;

bool is_zero_query_row(Distribution dist, std::int64_t t) {
  return dist == Distribution::kTies && t % kTiesZeroQueryPeriod == kTiesZeroQueryPeriod - 1;
}

// q[t] : [H, D] FP8, drawn one head (D values) at a time.
void fill_q_row(Distribution dist, std::int64_t t, Rng& rng, std::span<std::uint8_t> row) {
  const Fp8Encoder& encode = encode_fp8();
  if (is_zero_query_row(dist, t)) {
    std::fill(row.begin(), row.end(), std::uint8_t{0});
    return;
  }
  for (std::size_t head = 0; head < row.size(); head += kHeadDim) {
    std::uint8_t* out = &row[head];
    if (dist == Distribution::kSmallInteger) {
      for (int d = 0; d < kHeadDim; ++d) {
        out[d] = encode(static_cast<float>(rng.uniform_int(-kSmallIntMax, kSmallIntMax)));
      }
      continue;
    }
    const KeyRow x = normal_row(rng);
    const float shift = dist == Distribution::kDeadRelu ? kDeadReluQueryMean : 0.0f;
    for (int d = 0; d < kHeadDim; ++d) out[d] = encode(x[d] + shift);
  }
}

// w[t] : [H] fp32.
void fill_w_row(Distribution dist, Rng& rng, std::span<float> row) {
  const float inv_sqrt_h = 1.0f / std::sqrt(static_cast<float>(row.size()));
  switch (dist) {
    case Distribution::kDeadRelu:
    case Distribution::kShifted:
      // Positive weights: live heads add up instead of cancelling (dead-relu
      // scores are 0 or positive; shifted scores stay far from 0).
      fill_normal(rng, row);
      for (float& w : row) w = std::fabs(w) * inv_sqrt_h;
      return;
    case Distribution::kMixedSign:
      for (float& w : row) w = mixed_sign_value(rng.next());
      return;
    case Distribution::kSmallInteger:
      for (float& w : row) {
        w = kSmallIntWeights[rng.uniform_int(0, std::size(kSmallIntWeights) - 1)];
      }
      return;
    default:
      fill_normal(rng, row);
      for (float& w : row) w *= inv_sqrt_h;
      return;
  }
}

// Rows shared by all keys of a problem, drawn before the per-key streams.
struct KeyContext {
  std::vector<std::uint8_t> pool;               // kTies: [kTiesPoolRows, D] FP8
  std::vector<float> pool_scale;                // kTies: [kTiesPoolRows]
  std::array<std::uint8_t, kHeadDim> center{};  // kShifted: the row every key is close to
};

KeyContext make_key_context(Distribution dist, std::uint64_t seed) {
  KeyContext ctx;
  if (dist == Distribution::kTies) {
    ctx.pool.resize(static_cast<std::size_t>(kTiesPoolRows) * kHeadDim);
    for (int i = 0; i < kTiesPoolRows; ++i) {
      Rng rng = stream(seed, "k-pool", i);
      ctx.pool_scale.push_back(quantise_row(normal_row(rng), &ctx.pool[i * kHeadDim]));
    }
  } else if (dist == Distribution::kShifted) {
    Rng rng = stream(seed, "k-center", 0);
    quantise_row(normal_row(rng), ctx.center.data());
  }
  return ctx;
}

// k[s] : the first D bytes of the row, and k_scale[s].
void fill_k_row(Distribution dist, const KeyContext& ctx, Rng& rng, std::uint8_t* row,
                float* scale) {
  switch (dist) {
    case Distribution::kTies: {
      const auto i = rng.uniform_int(0, kTiesPoolRows - 1);
      std::memcpy(row, &ctx.pool[i * kHeadDim], kHeadDim);
      *scale = ctx.pool_scale[i];
      return;
    }
    case Distribution::kDeadRelu: {
      const bool live = rng.uniform() < kDeadReluLiveKeys;
      KeyRow x = normal_row(rng);
      if (!live) {
        for (float& v : x) v = std::fabs(v);
      }
      *scale = quantise_row(x, row);
      return;
    }
    case Distribution::kShifted: {
      // Noise in FP8 code space, so quantisation cannot amplify it: the lowest
      // mantissa bit of each small element flips at random (one step, at most
      // 1 of the row's 448), which moves dots by well under 0.1 %.
      static_assert(kHeadDim == 2 * 64, "one 64-bit draw per 64 elements");
      const std::array<std::uint64_t, 2> flips = {rng.next(), rng.next()};  // drawn in order
      for (int d = 0; d < kHeadDim; ++d) {
        const bool small = std::fabs(fp8_e4m3_to_float(ctx.center[d])) < kShiftedNoisyBelow;
        const bool flip = small && ((flips[d / 64] >> (d % 64)) & 1) != 0;
        row[d] = flip ? ctx.center[d] ^ 1u : ctx.center[d];
      }
      *scale = static_cast<float>(kShiftedScale * (1.0 + kShiftedScaleSpread * rng.uniform()));
      return;
    }
    case Distribution::kSmallInteger: {
      const Fp8Encoder& encode = encode_fp8();
      for (int d = 0; d < kHeadDim; ++d) {
        row[d] = encode(static_cast<float>(rng.uniform_int(-kSmallIntMax, kSmallIntMax)));
      }
      const auto exp =
          static_cast<int>(rng.uniform_int(kSmallIntMinScaleExp, kSmallIntMaxScaleExp));
      *scale = std::ldexp(1.0f, exp);
      return;
    }
    default: *scale = quantise_row(normal_row(rng), row); return;
  }
}

// --------------------------------------------------------------- layouts --

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

void check_shape(std::int64_t T, std::int64_t N) {
  require(T >= 0, "T must be >= 0 (got " + std::to_string(T) + ")");
  require(N >= 0 && N <= std::numeric_limits<std::int32_t>::max(),
          "N must be in [0, INT32_MAX] (got " + std::to_string(N) + ")");
}

void require_t_le_n(Layout layout, std::int64_t T, std::int64_t N) {
  require(T <= N, std::string(to_string(layout)) + " layout needs T <= N (got T = " +
                      std::to_string(T) + ", N = " + std::to_string(N) + ")");
}

using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;  // [ks, ke) per row

Ranges causal_suffix(std::int64_t T, std::int64_t N) {
  Ranges r;
  for (std::int64_t t = 0; t < T; ++t) r.emplace_back(0, N - T + t + 1);
  return r;
}

// Random sequence lengths >= 1 summing to N (needs N >= count).
std::vector<std::int64_t> split_lengths(std::int64_t N, std::int64_t count, Rng& rng) {
  // Weights within a factor 10 keep every sequence a visible share of N.
  constexpr std::int64_t kMinWeight = 100, kMaxWeight = 1000;
  std::vector<std::int64_t> weight(count);
  for (auto& w : weight) w = rng.uniform_int(kMinWeight, kMaxWeight);
  const std::int64_t total = std::accumulate(weight.begin(), weight.end(), std::int64_t{0});
  std::vector<std::int64_t> length(count);
  std::int64_t used = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    length[i] = 1 + (N - count) * weight[i] / total;
    used += length[i];
  }
  length.back() += N - used;  // the rounding remainder
  return length;
}

// Queries per sequence proportional to its length (largest remainders), at
// most its length. T <= N = sum(length) makes the cap hold: a sequence gets
// floor(T*L/N) <= L, plus one only when the fraction is non-zero (< L then).
std::vector<std::int64_t> split_queries(std::int64_t T, const std::vector<std::int64_t>& length) {
  const std::int64_t N = std::accumulate(length.begin(), length.end(), std::int64_t{0});
  std::vector<std::int64_t> queries(length.size());
  std::vector<std::size_t> order(length.size());
  std::int64_t given = 0;
  for (std::size_t i = 0; i < length.size(); ++i) {
    queries[i] = T * length[i] / N;
    given += queries[i];
    order[i] = i;
  }
  auto remainder = [&](std::size_t i) { return T * length[i] % N; };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return remainder(a) > remainder(b); });
  for (std::int64_t j = 0; j < T - given; ++j) ++queries[order[j]];
  return queries;
}

Ranges varlen_batch(std::int64_t T, std::int64_t N, Rng& rng) {
  constexpr std::int64_t kMinSequences = 3, kMaxSequences = 8;
  Ranges r;
  if (N == 0) return r;  // T == 0 too
  const std::int64_t count = std::min(N, rng.uniform_int(kMinSequences, kMaxSequences));
  const std::vector<std::int64_t> length = split_lengths(N, count, rng);
  const std::vector<std::int64_t> queries = split_queries(T, length);
  std::int64_t start = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    // The last queries[i] tokens of the sequence, each causal inside it.
    for (std::int64_t p = length[i] - queries[i]; p < length[i]; ++p) {
      r.emplace_back(start, start + p + 1);
    }
    start += length[i];
  }
  return r;
}

// Zigzag context parallelism: a rank holds a head chunk at c0 and the mirrored
// tail chunk ending at N - c0; odd rows additionally use a sliding window, so
// some ranges start after 0.
Ranges context_parallel(std::int64_t T, std::int64_t N, Rng& rng) {
  const std::int64_t head = T / 2, tail = T - head;
  const std::int64_t c0 = rng.uniform_int(0, (N - T) / 2);
  const std::int64_t c1 = N - c0 - tail;  // >= c0 + head because 2 * c0 <= N - T
  const std::int64_t window =
      rng.uniform_int(std::max<std::int64_t>(1, N / 4), std::max<std::int64_t>(1, N / 2));
  Ranges r;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t ke = t < head ? c0 + t + 1 : c1 + (t - head) + 1;
    const std::int64_t ks = t % 2 == 1 ? std::max<std::int64_t>(0, ke - window) : 0;
    r.emplace_back(ks, ke);
  }
  return r;
}

Ranges boundary(std::int64_t T, std::int64_t N, int K, Rng& rng) {
  const std::int64_t K64 = K;
  const std::array<std::int64_t, 5> lengths = {0, 1, K64 - 1, K64, K64 + 1};
  const std::int64_t cycle = static_cast<std::int64_t>(lengths.size()) + 1;  // + one random
  Ranges r;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t slot = t % cycle;
    const std::int64_t wanted =
        slot < static_cast<std::int64_t>(lengths.size()) ? lengths[slot] : rng.uniform_int(0, N);
    const std::int64_t len = std::clamp<std::int64_t>(wanted, 0, N);
    const std::int64_t ks = rng.uniform_int(0, N - len);
    r.emplace_back(ks, ks + len);
  }
  return r;
}

Ranges layout_ranges(Layout layout, std::int64_t T, std::int64_t N, int K, std::uint64_t seed) {
  Rng rng = stream(seed, "ranges", 0);
  switch (layout) {
    case Layout::kCausalSuffix: require_t_le_n(layout, T, N); return causal_suffix(T, N);
    case Layout::kVarlenBatch: require_t_le_n(layout, T, N); return varlen_batch(T, N, rng);
    case Layout::kContextParallel: require_t_le_n(layout, T, N); return context_parallel(T, N, rng);
    case Layout::kBoundary: return boundary(T, N, K, rng);
    case Layout::kFull: return Ranges(T, {0, N});
  }
  throw std::invalid_argument("unknown layout");
}

// ---------------------------------------------------------- score matrices --

constexpr std::int64_t kScoreStrideAlign = 4;
constexpr std::int64_t kScoreStridePad = 4;
constexpr int kTiesDistinctScores = 16;
constexpr double kDeadScoreLive = 0.05;  // fraction of positive scores
constexpr double kShiftedScoreBase = 1000.0;
constexpr double kShiftedScoreSpread = 1e-3;
constexpr int kSmallIntScoreMax = 64;

// Row t's values over its range; elements draw one 64-bit value each (these
// matrices reach hundreds of millions of elements).
void fill_score_row(Distribution dist, std::int64_t t, Rng& rng, std::span<float> row) {
  switch (dist) {
    case Distribution::kModelLike: {
      // One statement per draw: argument evaluation order is unspecified.
      float mu = 0.0f;
      fill_normal(rng, std::span(&mu, 1));
      const auto sigma_exp = static_cast<int>(rng.uniform_int(-2, 3));
      const float sigma = power_of_two_spread(rng.next(), sigma_exp);
      for (float& v : row) v = mu + sigma * bell(rng.next());
      return;
    }
    case Distribution::kTies: {
      std::array<float, kTiesDistinctScores> values;
      for (float& v : values) v = bell(rng.next());
      if (is_zero_query_row(dist, t)) values.fill(values[0]);  // all equal
      for (float& v : row) v = values[rng.next() % kTiesDistinctScores];
      return;
    }
    case Distribution::kDeadRelu: {
      const auto live = static_cast<std::uint64_t>(kDeadScoreLive * 0x1.0p32);
      for (float& v : row) {
        const std::uint64_t bits = rng.next();
        v = (bits >> 32) < live ? power_of_two_spread(bits, static_cast<int>((bits >> 23) & 7) - 4)
                                : 0.0f;
      }
      return;
    }
    case Distribution::kMixedSign:
      for (float& v : row) v = mixed_sign_value(rng.next());
      return;
    case Distribution::kShifted:
      for (float& v : row) {
        v = static_cast<float>(kShiftedScoreBase + kShiftedScoreSpread * bell(rng.next()));
      }
      return;
    case Distribution::kSmallInteger:
      for (float& v : row) {
        // (top 32 bits * 129) >> 32 is uniform on [0, 128].
        const std::uint64_t u = ((rng.next() >> 32) * (2 * kSmallIntScoreMax + 1)) >> 32;
        v = static_cast<float>(static_cast<std::int64_t>(u) - kSmallIntScoreMax);
      }
      return;
  }
}

std::string problem_name(const ProblemSpec& spec) {
  return std::string(to_string(spec.dist)) + "/" + std::string(to_string(spec.layout));
}

constexpr std::int64_t kParallelMinKeyRows = 4096;
constexpr std::int64_t kParallelMinElements = 1 << 20;

}  // namespace

// ------------------------------------------------------------------ names --

std::string_view to_string(Distribution d) {
  switch (d) {
    case Distribution::kModelLike: return "model-like";
    case Distribution::kTies: return "ties";
    case Distribution::kDeadRelu: return "dead-relu";
    case Distribution::kMixedSign: return "mixed-sign";
    case Distribution::kShifted: return "shifted";
    case Distribution::kSmallInteger: return "small-integer";
  }
  return "unknown";
}

std::string_view to_string(Layout l) {
  switch (l) {
    case Layout::kCausalSuffix: return "causal-suffix";
    case Layout::kVarlenBatch: return "varlen-batch";
    case Layout::kContextParallel: return "context-parallel";
    case Layout::kBoundary: return "boundary";
    case Layout::kFull: return "full";
  }
  return "unknown";
}

std::vector<Distribution> all_distributions() {
  return {Distribution::kModelLike, Distribution::kTies,    Distribution::kDeadRelu,
          Distribution::kMixedSign, Distribution::kShifted, Distribution::kSmallInteger};
}

std::vector<Layout> all_layouts() {
  return {Layout::kCausalSuffix, Layout::kVarlenBatch, Layout::kContextParallel, Layout::kBoundary,
          Layout::kFull};
}

bool parse_distribution(std::string_view name, Distribution* out) {
  for (Distribution d : all_distributions()) {
    if (to_string(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

bool parse_layout(std::string_view name, Layout* out) {
  for (Layout l : all_layouts()) {
    if (to_string(l) == name) {
      *out = l;
      return true;
    }
  }
  return false;
}

// ------------------------------------------------------------- generators --

void make_ranges(Layout layout, std::int64_t T, std::int64_t N, int K, std::uint64_t seed,
                 std::vector<std::int32_t>* ks, std::vector<std::int32_t>* ke) {
  check_shape(T, N);
  const Ranges ranges = layout_ranges(layout, T, N, K, seed);
  ks->resize(ranges.size());
  ke->resize(ranges.size());
  for (std::size_t t = 0; t < ranges.size(); ++t) {
    (*ks)[t] = static_cast<std::int32_t>(ranges[t].first);
    (*ke)[t] = static_cast<std::int32_t>(ranges[t].second);
  }
}

IndexerProblem make_indexer_problem(const ProblemSpec& spec) {
  check_shape(spec.T, spec.N);
  require(spec.H > 0, "H must be > 0 (got " + std::to_string(spec.H) + ")");
  const std::int64_t stride = spec.k_row_stride == 0 ? kHeadDim : spec.k_row_stride;
  require(stride >= kHeadDim && stride % 16 == 0,
          "k_row_stride must be 0 or a multiple of 16 that is >= D (got " +
              std::to_string(spec.k_row_stride) + ")");

  IndexerProblem p;
  p.name = problem_name(spec);
  p.seed = spec.seed;
  p.T = spec.T;
  p.N = spec.N;
  p.H = spec.H;
  p.D = kHeadDim;
  p.k_row_stride = stride;
  make_ranges(spec.layout, spec.T, spec.N, spec.K, spec.seed, &p.ks, &p.ke);

  const std::int64_t q_row = static_cast<std::int64_t>(spec.H) * kHeadDim;
  p.q.resize(spec.T * q_row);
  p.w.resize(spec.T * spec.H);
  parallel_blocks(spec.T, 0, kParallelMinElements / q_row, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      Rng q_rng = stream(spec.seed, "q", t);
      fill_q_row(spec.dist, t, q_rng, std::span(p.q).subspan(t * q_row, q_row));
      Rng w_rng = stream(spec.seed, "w", t);
      fill_w_row(spec.dist, w_rng, std::span(p.w).subspan(t * spec.H, spec.H));
    }
  });

  // Padding bytes of each k row keep 0x7F (an FP8 NaN) so a kernel reading
  // past D shows it in its scores.
  p.k.assign(spec.N * stride, std::uint8_t{0x7F});
  p.k_scale.resize(spec.N);
  const KeyContext ctx = make_key_context(spec.dist, spec.seed);
  parallel_blocks(spec.N, 0, kParallelMinKeyRows, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t s = begin; s < end; ++s) {
      Rng rng = stream(spec.seed, "k", s);
      fill_k_row(spec.dist, ctx, rng, &p.k[s * stride], &p.k_scale[s]);
    }
  });
  return p;
}

ScoresProblem make_scores_problem(const ProblemSpec& spec) {
  check_shape(spec.T, spec.N);
  ScoresProblem p;
  p.name = problem_name(spec);
  p.seed = spec.seed;
  p.T = spec.T;
  p.N = spec.N;
  p.stride =
      (spec.N + kScoreStrideAlign - 1) / kScoreStrideAlign * kScoreStrideAlign + kScoreStridePad;
  make_ranges(spec.layout, spec.T, spec.N, spec.K, spec.seed, &p.ks, &p.ke);

  // NaN everywhere a row's range does not reach, stride padding included.
  p.scores.assign(spec.T * p.stride, std::numeric_limits<float>::quiet_NaN());
  const std::int64_t rows_per_block = std::max<std::int64_t>(1, kParallelMinElements / p.stride);
  parallel_blocks(spec.T, 0, rows_per_block, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      Rng rng = stream(spec.seed, "scores", t);
      std::span<float> row(&p.scores[t * p.stride + p.ks[t]], p.ke[t] - p.ks[t]);
      fill_score_row(spec.dist, t, rng, row);
    }
  });
  return p;
}

MergeProblem make_merge_problem(const MergeSpec& spec) {
  const std::int64_t slice = kMergeSliceKeysPerPartK * spec.part_k;
  if (spec.P < 1 || spec.R < 0 || spec.part_k < 1 ||
      spec.P > std::numeric_limits<std::int32_t>::max() / slice) {
    throw std::invalid_argument("make_merge_problem: need P >= 1, R >= 0, part_k >= 1 and P * " +
                                std::to_string(kMergeSliceKeysPerPartK) + " * part_k <= INT32_MAX (got P=" +
                                std::to_string(spec.P) + " R=" + std::to_string(spec.R) +
                                " part_k=" + std::to_string(spec.part_k) + ")");
  }
  MergeProblem m;
  m.name = "merge/" + std::string(to_string(spec.dist));
  m.seed = spec.seed;
  m.P = spec.P;
  m.R = spec.R;
  m.part_k = spec.part_k;
  const auto entries = static_cast<std::size_t>(spec.P * spec.R * spec.part_k);
  m.values.assign(entries, std::numeric_limits<float>::quiet_NaN());
  m.indices.assign(entries, -1);
  parallel_items(spec.R, 0, [&](std::int64_t r) {
    thread_local std::vector<float> scores;
    thread_local std::vector<std::int32_t> order;
    scores.resize(static_cast<std::size_t>(spec.P * slice));
    Rng rng = stream(spec.seed, "merge", static_cast<std::uint64_t>(r));
    fill_score_row(spec.dist, r, rng, scores);
    // A strict total order, so the lists do not depend on the sort's algorithm.
    const auto better = [&](std::int32_t a, std::int32_t b) {
      const std::uint32_t ka = score_key(scores[a]), kb = score_key(scores[b]);
      return ka != kb ? ka > kb : a < b;
    };
    const bool short_row = r % kMergeShortRowPeriod == kMergeShortRowPeriod - 1;
    for (std::int64_t p = 0; p < spec.P; ++p) {
      const std::int64_t len = short_row ? spec.part_k * p / (2 * spec.P) : slice;
      order.resize(static_cast<std::size_t>(len));
      std::iota(order.begin(), order.end(), static_cast<std::int32_t>(p * slice));
      const std::int64_t count = std::min(spec.part_k, len);
      std::nth_element(order.begin(), order.begin() + count, order.end(), better);
      std::sort(order.begin(), order.begin() + count, better);
      const std::int64_t base = (p * spec.R + r) * spec.part_k;
      for (std::int64_t i = 0; i < count; ++i) {
        m.indices[base + i] = order[i];
        m.values[base + i] = scores[order[i]];
      }
    }
  });
  return m;
}

}  // namespace dsa::tools
