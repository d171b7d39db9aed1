// Generators: determinism, range layouts and the measured character of every
// distribution. Scores are recomputed here in float64 with a plain loop, not
// with the library's reference, so these tests stand on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "common/keys.h"
#include "tools/generators.h"

namespace dsa::tools {
namespace {

constexpr std::uint8_t kFp8Nan = 0x7F;

ProblemSpec spec_of(Distribution dist, Layout layout, std::int64_t T, std::int64_t N,
                    std::uint64_t seed = 1) {
  ProblemSpec spec;
  spec.dist = dist;
  spec.layout = layout;
  spec.T = T;
  spec.N = N;
  spec.seed = seed;
  return spec;
}

bool layout_needs_t_le_n(Layout layout) {
  return layout == Layout::kCausalSuffix || layout == Layout::kVarlenBatch ||
         layout == Layout::kContextParallel;
}

float q_at(const IndexerProblem& p, std::int64_t t, int h, int d) {
  return fp8_e4m3_to_float(p.q[(t * p.H + h) * p.D + d]);
}

float k_at(const IndexerProblem& p, std::int64_t s, int d) {
  return fp8_e4m3_to_float(p.k[s * p.k_row_stride + d]);
}

double dot64(const IndexerProblem& p, std::int64_t t, int h, std::int64_t s) {
  double acc = 0.0;
  for (int d = 0; d < p.D; ++d) acc += static_cast<double>(q_at(p, t, h, d)) * k_at(p, s, d);
  return acc;
}

// The contract's score in float64 (heads in order).
double score64(const IndexerProblem& p, std::int64_t t, std::int64_t s) {
  double acc = 0.0;
  for (int h = 0; h < p.H; ++h) acc += p.w[t * p.H + h] * std::max(0.0, dot64(p, t, h, s));
  return p.k_scale[s] * acc;
}

// The same score in fp32, heads and dims summed forwards or backwards.
float score32(const IndexerProblem& p, std::int64_t t, std::int64_t s, bool reverse) {
  float acc = 0.0f;
  for (int i = 0; i < p.H; ++i) {
    const int h = reverse ? p.H - 1 - i : i;
    float dot = 0.0f;
    for (int j = 0; j < p.D; ++j) {
      const int d = reverse ? p.D - 1 - j : j;
      dot += q_at(p, t, h, d) * k_at(p, s, d);
    }
    acc += p.w[t * p.H + h] * std::max(0.0f, dot);
  }
  return p.k_scale[s] * acc;
}

std::vector<std::uint8_t> bytes_of(const IndexerProblem& p) {
  std::vector<std::uint8_t> out(p.q.begin(), p.q.end());
  out.insert(out.end(), p.k.begin(), p.k.end());
  auto append = [&out](const void* data, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(data);
    out.insert(out.end(), b, b + n);
  };
  append(p.k_scale.data(), p.k_scale.size() * sizeof(float));
  append(p.w.data(), p.w.size() * sizeof(float));
  append(p.ks.data(), p.ks.size() * sizeof(std::int32_t));
  append(p.ke.data(), p.ke.size() * sizeof(std::int32_t));
  return out;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::uint64_t fnv1a(const std::vector<std::uint8_t>& bytes) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::uint8_t b : bytes) h = (h ^ b) * 0x100000001B3ull;
  return h;
}

void expect_valid_ranges(const std::vector<std::int32_t>& ks, const std::vector<std::int32_t>& ke,
                         std::int64_t T, std::int64_t N) {
  ASSERT_EQ(static_cast<std::int64_t>(ks.size()), T);
  ASSERT_EQ(static_cast<std::int64_t>(ke.size()), T);
  for (std::int64_t t = 0; t < T; ++t) {
    ASSERT_LE(0, ks[t]) << "row " << t;
    ASSERT_LE(ks[t], ke[t]) << "row " << t;
    ASSERT_LE(ke[t], N) << "row " << t;
  }
}

// ------------------------------------------------------------------ names --

TEST(Generators, NamesRoundTrip) {
  for (Distribution d : all_distributions()) {
    Distribution parsed{};
    ASSERT_TRUE(parse_distribution(to_string(d), &parsed)) << to_string(d);
    EXPECT_EQ(parsed, d);
  }
  for (Layout l : all_layouts()) {
    Layout parsed{};
    ASSERT_TRUE(parse_layout(to_string(l), &parsed)) << to_string(l);
    EXPECT_EQ(parsed, l);
  }
  Distribution d{};
  Layout l{};
  EXPECT_FALSE(parse_distribution("normal", &d));
  EXPECT_FALSE(parse_layout("", &l));
  EXPECT_EQ(all_distributions().size(), 6u);
  EXPECT_EQ(all_layouts().size(), 5u);
}

TEST(Generators, ProblemNameAndShape) {
  ProblemSpec spec = spec_of(Distribution::kDeadRelu, Layout::kVarlenBatch, 5, 300, 42);
  spec.H = 32;
  const IndexerProblem p = make_indexer_problem(spec);
  EXPECT_EQ(p.name, "dead-relu/varlen-batch");
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(p.H, 32);
  EXPECT_EQ(p.D, kHeadDim);
  EXPECT_EQ(p.k_row_stride, kHeadDim);
  EXPECT_EQ(p.q.size(), 5u * 32 * kHeadDim);
  EXPECT_EQ(p.k.size(), 300u * kHeadDim);
  EXPECT_EQ(p.k_scale.size(), 300u);
  EXPECT_EQ(p.w.size(), 5u * 32);
  const ScoresProblem sp = make_scores_problem(spec);
  EXPECT_EQ(sp.name, "dead-relu/varlen-batch");
  EXPECT_EQ(sp.seed, 42u);
}

// ----------------------------------------------------------- determinism --

TEST(Generators, SameSpecSameBytesDifferentSeedDifferentBytes) {
  for (Distribution dist : all_distributions()) {
    SCOPED_TRACE(std::string(to_string(dist)));
    const ProblemSpec spec = spec_of(dist, Layout::kBoundary, 13, 777, 7);
    const IndexerProblem a = make_indexer_problem(spec);
    const IndexerProblem b = make_indexer_problem(spec);
    EXPECT_EQ(bytes_of(a), bytes_of(b));
    ProblemSpec other = spec;
    other.seed = 8;
    const IndexerProblem c = make_indexer_problem(other);
    EXPECT_NE(a.k, c.k);
    EXPECT_NE(a.w, c.w);
    EXPECT_NE(a.ks, c.ks);  // boundary rows draw their starts
    EXPECT_NE(a.q, c.q);

    const ScoresProblem sa = make_scores_problem(spec);
    const ScoresProblem sb = make_scores_problem(spec);
    EXPECT_TRUE(same_bytes(sa.scores, sb.scores));
    EXPECT_EQ(sa.ks, sb.ks);
    EXPECT_FALSE(same_bytes(sa.scores, make_scores_problem(other).scores));
  }
}

// Tensors come from independent per-row streams: q and k of the same seed
// differ, the layout leaves the value tensors alone, and a key row does not
// depend on N (nor on how many threads generated the rows: 20000 keys are
// split across workers, 100 are not).
TEST(Generators, StreamsAreIndependentOfLayoutAndSize) {
  const IndexerProblem a =
      make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kFull, 4, 100));
  const IndexerProblem b =
      make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kBoundary, 4, 100));
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.w, b.w);
  EXPECT_NE(a.ks, b.ks);
  EXPECT_FALSE(std::equal(a.k.begin(), a.k.begin() + kHeadDim, a.q.begin()));

  const IndexerProblem big =
      make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kFull, 4, 20000));
  EXPECT_TRUE(std::equal(a.k.begin(), a.k.end(), big.k.begin()));
  EXPECT_TRUE(std::equal(a.k_scale.begin(), a.k_scale.end(), big.k_scale.begin()));
  EXPECT_EQ(a.q, big.q);
}

// Pins the generated bytes: a generator change, or a platform that computes
// them differently, shows up here. Update the constants only on purpose.
TEST(Generators, GoldenHashes) {
  std::vector<std::uint8_t> indexer_bytes, score_bytes;
  for (Distribution dist : all_distributions()) {
    const ProblemSpec spec = spec_of(dist, Layout::kContextParallel, 6, 300, 2024);
    const std::vector<std::uint8_t> b = bytes_of(make_indexer_problem(spec));
    indexer_bytes.insert(indexer_bytes.end(), b.begin(), b.end());
    const ScoresProblem s = make_scores_problem(spec);
    const auto* f = reinterpret_cast<const std::uint8_t*>(s.scores.data());
    score_bytes.insert(score_bytes.end(), f, f + s.scores.size() * sizeof(float));
  }
  EXPECT_EQ(fnv1a(indexer_bytes), 12724756905792014820ull);
  EXPECT_EQ(fnv1a(score_bytes), 3289823644221013369ull);
}

// ---------------------------------------------------------------- layouts --

TEST(Layouts, ValidAtAwkwardSizes) {
  for (Layout layout : all_layouts()) {
    for (std::int64_t N : {0, 1, 7, 2049, 100003}) {
      for (std::int64_t T : {0, 1, 5, 64}) {
        if (layout_needs_t_le_n(layout) && T > N) continue;
        for (int K : {512, 2048}) {
          SCOPED_TRACE(std::string(to_string(layout)) + " T=" + std::to_string(T) +
                       " N=" + std::to_string(N) + " K=" + std::to_string(K));
          std::vector<std::int32_t> ks, ke;
          make_ranges(layout, T, N, K, 3, &ks, &ke);
          expect_valid_ranges(ks, ke, T, N);
        }
      }
    }
  }
}

TEST(Layouts, ImpossibleLayoutsThrow) {
  std::vector<std::int32_t> ks, ke;
  for (Layout layout : {Layout::kCausalSuffix, Layout::kVarlenBatch, Layout::kContextParallel}) {
    EXPECT_THROW(make_ranges(layout, 8, 7, 2048, 1, &ks, &ke), std::invalid_argument)
        << to_string(layout);
  }
  EXPECT_THROW(make_ranges(Layout::kFull, -1, 7, 2048, 1, &ks, &ke), std::invalid_argument);
  EXPECT_THROW(make_ranges(Layout::kFull, 1, -7, 2048, 1, &ks, &ke), std::invalid_argument);
  EXPECT_THROW(make_ranges(Layout::kFull, 1, std::int64_t{1} << 31, 2048, 1, &ks, &ke),
               std::invalid_argument);
  // Layouts that do not need T <= N accept it.
  make_ranges(Layout::kBoundary, 64, 7, 2048, 1, &ks, &ke);
  expect_valid_ranges(ks, ke, 64, 7);
  make_ranges(Layout::kFull, 64, 7, 2048, 1, &ks, &ke);
  expect_valid_ranges(ks, ke, 64, 7);
}

TEST(Layouts, CausalSuffixFormula) {
  for (auto [T, N] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {5, 7}, {64, 2049}, {7, 7}}) {
    std::vector<std::int32_t> ks, ke;
    make_ranges(Layout::kCausalSuffix, T, N, 2048, 9, &ks, &ke);
    for (std::int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(ks[t], 0);
      EXPECT_EQ(ke[t], N - T + t + 1);
    }
  }
}

TEST(Layouts, FullRows) {
  std::vector<std::int32_t> ks, ke;
  make_ranges(Layout::kFull, 5, 2049, 2048, 1, &ks, &ke);
  for (int t = 0; t < 5; ++t) {
    EXPECT_EQ(ks[t], 0);
    EXPECT_EQ(ke[t], 2049);
  }
}

TEST(Layouts, VarlenHasSeveralCausalSequences) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::int64_t T = 64, N = 100003;
    std::vector<std::int32_t> ks, ke;
    make_ranges(Layout::kVarlenBatch, T, N, 2048, seed, &ks, &ke);
    expect_valid_ranges(ks, ke, T, N);
    // Rows come grouped by sequence: ks is constant inside a group and grows
    // between groups; inside a group ke grows by one (causal, consecutive).
    std::set<std::int32_t> starts;
    for (std::int64_t t = 0; t < T; ++t) {
      starts.insert(ks[t]);
      if (t == 0) continue;
      if (ks[t] == ks[t - 1]) {
        EXPECT_EQ(ke[t], ke[t - 1] + 1) << "row " << t;
      } else {
        EXPECT_GT(ks[t], ks[t - 1]) << "row " << t;
        EXPECT_LE(ke[t - 1], ks[t]) << "row " << t;  // sequences do not overlap
      }
    }
    EXPECT_GE(starts.size(), 3u);
    EXPECT_LE(starts.size(), 8u);
    EXPECT_GT(ks[T - 1], 0);
  }
}

TEST(Layouts, VarlenQueriesAreLastTokensOfTheirSequence) {
  // With T == N every token is a query: ranges tile [0, N) exactly.
  std::vector<std::int32_t> ks, ke;
  make_ranges(Layout::kVarlenBatch, 2049, 2049, 2048, 5, &ks, &ke);
  for (std::int64_t t = 0; t < 2049; ++t) {
    EXPECT_EQ(ke[t], t + 1);
    if (t > 0 && ks[t] != ks[t - 1]) {
      EXPECT_EQ(ks[t], t);
    }
  }
}

TEST(Layouts, ContextParallelHeadAndMirroredTail) {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::int64_t T = 64, N = 100003, head = T / 2;
    std::vector<std::int32_t> ks, ke;
    make_ranges(Layout::kContextParallel, T, N, 2048, seed, &ks, &ke);
    expect_valid_ranges(ks, ke, T, N);
    const std::int64_t c0 = ke[0] - 1;
    const std::int64_t c1 = ke[head] - 1;
    EXPECT_LT(c0 + head, c1 + 1);  // chunks ordered, not overlapping
    EXPECT_EQ(ke[T - 1], N - c0);  // tail mirrors the head
    bool sliding = false;
    for (std::int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(ke[t], (t < head ? c0 + t : c1 + t - head) + 1) << "row " << t;
      if (t % 2 == 0) {
        EXPECT_EQ(ks[t], 0) << "row " << t;
      }
      sliding |= ks[t] > 0;
    }
    EXPECT_TRUE(sliding);
  }
}

TEST(Layouts, BoundaryHitsEveryLength) {
  for (int K : {512, 1024, 2048}) {
    const std::int64_t N = 2049, T = 64;
    std::vector<std::int32_t> ks, ke;
    make_ranges(Layout::kBoundary, T, N, K, 11, &ks, &ke);
    expect_valid_ranges(ks, ke, T, N);
    std::set<std::int64_t> lengths;
    for (std::int64_t t = 0; t < T; ++t) lengths.insert(ke[t] - ks[t]);
    for (std::int64_t want : {0, 1, K - 1, K, K + 1}) {
      EXPECT_TRUE(lengths.count(want)) << "K=" << K << " length " << want;
    }
    EXPECT_GT(lengths.size(), 5u);  // plus random lengths
  }
  // Lengths clamp to N.
  std::vector<std::int32_t> ks, ke;
  make_ranges(Layout::kBoundary, 12, 7, 2048, 1, &ks, &ke);
  EXPECT_EQ(ke[3] - ks[3], 7);  // K clamped
  EXPECT_EQ(ke[1] - ks[1], 1);
}

// Ranges depend only on (layout, T, N, K, seed), never on the distribution.
TEST(Layouts, EveryDistributionAndLayoutGivesValidProblems) {
  for (Distribution dist : all_distributions()) {
    for (Layout layout : all_layouts()) {
      for (std::int64_t N : {1, 7, 2049}) {
        for (std::int64_t T : {1, 5, 64}) {
          if (layout_needs_t_le_n(layout) && T > N) continue;
          SCOPED_TRACE(std::string(to_string(dist)) + "/" + std::string(to_string(layout)) +
                       " T=" + std::to_string(T) + " N=" + std::to_string(N));
          const ProblemSpec spec = spec_of(dist, layout, T, N, 5);
          const IndexerProblem p = make_indexer_problem(spec);
          expect_valid_ranges(p.ks, p.ke, T, N);
          std::vector<std::int32_t> ks, ke;
          make_ranges(layout, T, N, spec.K, spec.seed, &ks, &ke);
          EXPECT_EQ(p.ks, ks);
          EXPECT_EQ(p.ke, ke);
          for (std::uint8_t b : p.q) ASSERT_NE(b & 0x7F, kFp8Nan);
          for (std::uint8_t b : p.k) ASSERT_NE(b & 0x7F, kFp8Nan);
          for (float s : p.k_scale) ASSERT_TRUE(std::isfinite(s) && s > 0.0f) << s;
          for (float w : p.w) ASSERT_TRUE(std::isfinite(w));
        }
      }
    }
  }
}

// ------------------------------------------------------------ k padding ---

TEST(Generators, KRowPaddingIsFp8Nan) {
  for (std::int64_t stride : {144, 256}) {
    ProblemSpec spec = spec_of(Distribution::kModelLike, Layout::kFull, 2, 33);
    spec.k_row_stride = stride;
    const IndexerProblem p = make_indexer_problem(spec);
    EXPECT_EQ(p.k_row_stride, stride);
    ASSERT_EQ(p.k.size(), static_cast<std::size_t>(33 * stride));
    for (std::int64_t s = 0; s < 33; ++s) {
      for (std::int64_t b = 0; b < stride; ++b) {
        const std::uint8_t byte = p.k[s * stride + b];
        if (b < kHeadDim) {
          ASSERT_NE(byte & 0x7F, kFp8Nan) << "row " << s << " byte " << b;
        } else {
          ASSERT_EQ(byte, kFp8Nan) << "row " << s << " byte " << b;
        }
      }
    }
    // The data bytes do not depend on the stride.
    const IndexerProblem dense =
        make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kFull, 2, 33));
    for (std::int64_t s = 0; s < 33; ++s) {
      EXPECT_TRUE(std::equal(dense.k.begin() + s * kHeadDim, dense.k.begin() + (s + 1) * kHeadDim,
                             p.k.begin() + s * stride));
    }
  }
  for (std::int64_t bad : {-16, 112, 136, 200}) {
    ProblemSpec spec = spec_of(Distribution::kModelLike, Layout::kFull, 2, 33);
    spec.k_row_stride = bad;
    EXPECT_THROW(make_indexer_problem(spec), std::invalid_argument) << bad;
  }
}

// ----------------------------------------------------------- distributions --

TEST(Distributions, ModelLikeQuantisation) {
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kFull, 16, 1000));
  // Every k row is scaled by amax / 448: its largest element encodes to +-448,
  // which pins k_scale to amax / 448 up to the encoder's rounding.
  double sum = 0.0, sum_sq = 0.0;
  for (std::int64_t s = 0; s < p.N; ++s) {
    float amax = 0.0f;
    for (int d = 0; d < p.D; ++d) {
      const float v = k_at(p, s, d);
      amax = std::max(amax, std::fabs(v));
      const double x = static_cast<double>(v) * p.k_scale[s];
      sum += x;
      sum_sq += x * x;
    }
    ASSERT_EQ(amax, kFp8E4m3Max) << "row " << s;
  }
  // Dequantised k ~ N(0, 1): 128000 samples, bounds at about 5 standard errors
  // (FP8 rounding adds < 0.2 % of variance).
  const double n = static_cast<double>(p.N) * p.D;
  EXPECT_NEAR(sum / n, 0.0, 0.015);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.02);
  // Typical amax of 128 normals is 2.2-3.5, so scales sit near 3/448.
  const auto [lo, hi] = std::minmax_element(p.k_scale.begin(), p.k_scale.end());
  EXPECT_GT(*lo, 1.5f / kFp8E4m3Max);
  EXPECT_LT(*hi, 5.5f / kFp8E4m3Max);

  // q ~ N(0, 1) encoded directly, w ~ N(0, 1) / sqrt(H).
  double q_sq = 0.0;
  for (std::uint8_t b : p.q)
    q_sq += static_cast<double>(fp8_e4m3_to_float(b)) * fp8_e4m3_to_float(b);
  EXPECT_NEAR(q_sq / static_cast<double>(p.q.size()), 1.0, 0.02);  // 131072 samples, se 0.004
  double w_sq = 0.0;
  for (float w : p.w) w_sq += static_cast<double>(w) * w * p.H;
  EXPECT_NEAR(w_sq / static_cast<double>(p.w.size()), 1.0, 0.25);  // 1024 samples, se 0.044
}

TEST(Distributions, NormalSamplerHasGaussianShape) {
  // q under model-like is N(0,1) rounded to FP8; the fraction within one
  // sigma uses 1.0 (exact in FP8, and everything in [-1, 1] stays there).
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kFull, 32, 1));
  std::int64_t inside = 0, beyond3 = 0;
  for (std::uint8_t b : p.q) {
    const float v = std::fabs(fp8_e4m3_to_float(b));
    inside += v < 1.0f;
    beyond3 += v > 3.25f;  // 3.25 is the FP8 neighbour above 3.0; |x| > 3.375 rounds past it
  }
  const double n = static_cast<double>(p.q.size());  // 262144
  // P(|x| < 0.96875) (the FP8 rounding boundary below 1): 0.6673, se 0.0009.
  EXPECT_NEAR(inside / n, 0.6673, 0.005);
  // P(|x| > 3.375) = 0.000738, se 0.000053.
  EXPECT_NEAR(beyond3 / n, 0.000738, 0.0003);
}

TEST(Distributions, TiesRepeatScoresAndZeroQueryRowsAreAllEqual) {
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kTies, Layout::kFull, 8, 300));
  // Keys come from a pool of 8 rows; a duplicated row keeps its scale.
  std::map<std::string, float> pool;  // row bytes -> scale
  for (std::int64_t s = 0; s < p.N; ++s) {
    const std::string row(p.k.begin() + s * kHeadDim, p.k.begin() + (s + 1) * kHeadDim);
    const auto [it, inserted] = pool.emplace(row, p.k_scale[s]);
    EXPECT_EQ(it->second, p.k_scale[s]) << "row " << s;
  }
  EXPECT_EQ(pool.size(), 8u);
  for (std::int64_t t = 0; t < p.T; ++t) {
    std::set<double> distinct;
    for (std::int64_t s = 0; s < p.N; ++s) distinct.insert(score64(p, t, s));
    const bool zero_row = t % 4 == 3;
    const bool all_zero_q =
        std::all_of(p.q.begin() + t * p.H * p.D, p.q.begin() + (t + 1) * p.H * p.D,
                    [](std::uint8_t b) { return b == 0; });
    EXPECT_EQ(all_zero_q, zero_row) << "row " << t;
    if (zero_row) {
      EXPECT_EQ(distinct, std::set<double>{0.0}) << "row " << t;
    } else {
      EXPECT_LE(distinct.size(), 8u) << "row " << t;
      EXPECT_GE(distinct.size(), 2u) << "row " << t;
    }
  }
}

TEST(Distributions, DeadReluKillsMostDots) {
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kDeadRelu, Layout::kFull, 6, 400));
  std::int64_t negative = 0, dots = 0, zero_scores = 0, positive_scores = 0;
  for (std::int64_t t = 0; t < p.T; ++t) {
    for (std::int64_t s = 0; s < p.N; ++s) {
      for (int h = 0; h < p.H; ++h) {
        negative += dot64(p, t, h, s) < 0.0;
        ++dots;
      }
      const double score = score64(p, t, s);
      EXPECT_GE(score, 0.0);  // positive weights
      zero_scores += score == 0.0;
      positive_scores += score > 0.0;
    }
  }
  const double dead = static_cast<double>(negative) / dots;
  EXPECT_GE(dead, 0.9);
  EXPECT_LE(dead, 0.99);  // some heads stay alive
  const double pairs = static_cast<double>(p.T * p.N);
  EXPECT_GE(zero_scores / pairs, 0.8);  // most scores exactly 0
  EXPECT_GE(positive_scores / pairs, 0.03);
}

TEST(Distributions, MixedSignWeightsSpanSixteenOctaves) {
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kMixedSign, Layout::kFull, 16, 8));
  int negative = 0;
  float lo = INFINITY, hi = 0.0f;
  for (float w : p.w) {
    negative += w < 0.0f;
    lo = std::min(lo, std::fabs(w));
    hi = std::max(hi, std::fabs(w));
  }
  const int n = static_cast<int>(p.w.size());  // 1024
  EXPECT_GT(negative, n / 2 - 80);
  EXPECT_LT(negative, n / 2 + 80);
  EXPECT_GE(lo, std::ldexp(1.0f, -8));
  EXPECT_LT(hi, std::ldexp(1.0f, 8));
  EXPECT_LT(lo, std::ldexp(1.0f, -7));
  EXPECT_GE(hi, std::ldexp(1.0f, 7));
}

TEST(Distributions, ShiftedScoresAreLargeAndTightlyPacked) {
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kShifted, Layout::kFull, 4, 3000));
  for (float s : p.k_scale) {
    ASSERT_GE(s, 1000.0f);
    ASSERT_LE(s, 1001.0f);
  }
  for (std::int64_t t = 0; t < p.T; ++t) {
    double lo = INFINITY, hi = -INFINITY, sum = 0.0;
    for (std::int64_t s = 0; s < p.N; ++s) {
      const double v = score64(p, t, s);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
    const double mean = sum / static_cast<double>(p.N);
    EXPECT_GT(std::fabs(mean), 1000.0) << "row " << t;
    EXPECT_LT(hi - lo, 0.01 * std::fabs(mean)) << "row " << t;
    EXPECT_GT(hi - lo, 0.0) << "row " << t;
  }
}

TEST(Distributions, SmallIntegerScoresAreExactInFp32) {
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kSmallInteger, Layout::kFull, 5, 200));
  auto small_integer = [](float v) { return v == std::nearbyint(v) && std::fabs(v) <= 3.0f; };
  for (std::uint8_t b : p.q) ASSERT_TRUE(small_integer(fp8_e4m3_to_float(b)));
  for (std::int64_t s = 0; s < p.N; ++s) {
    for (int d = 0; d < p.D; ++d) ASSERT_TRUE(small_integer(k_at(p, s, d)));
  }
  const std::set<float> scales = {0.25f, 0.5f, 1.0f, 2.0f, 4.0f};
  const std::set<float> weights = {-2.0f, -1.0f, -0.5f, 0.5f, 1.0f, 2.0f};
  std::set<float> seen_scales, seen_weights;
  for (float s : p.k_scale) seen_scales.insert(s);
  for (float w : p.w) seen_weights.insert(w);
  EXPECT_EQ(seen_scales, scales);
  EXPECT_EQ(seen_weights, weights);
  // Every fp32 partial sum is exact, so any summation order gives the float64 value.
  for (std::int64_t t = 0; t < p.T; ++t) {
    for (std::int64_t s = 0; s < p.N; ++s) {
      const double exact = score64(p, t, s);
      ASSERT_EQ(static_cast<double>(score32(p, t, s, false)), exact);
      ASSERT_EQ(static_cast<double>(score32(p, t, s, true)), exact);
    }
  }
}

// --------------------------------------------------------- score matrices --

TEST(Scores, NanOutsideRangesFiniteInside) {
  for (Distribution dist : all_distributions()) {
    for (Layout layout : all_layouts()) {
      for (std::int64_t N : {1, 7, 2049, 100003}) {
        for (std::int64_t T : {1, 5, 64}) {
          if (layout_needs_t_le_n(layout) && T > N) continue;
          SCOPED_TRACE(std::string(to_string(dist)) + "/" + std::string(to_string(layout)) +
                       " T=" + std::to_string(T) + " N=" + std::to_string(N));
          const ScoresProblem p = make_scores_problem(spec_of(dist, layout, T, N));
          EXPECT_EQ(p.stride, (N + 3) / 4 * 4 + 4);
          ASSERT_EQ(static_cast<std::int64_t>(p.scores.size()), T * p.stride);
          expect_valid_ranges(p.ks, p.ke, T, N);
          for (std::int64_t t = 0; t < T; ++t) {
            for (std::int64_t j = 0; j < p.stride; ++j) {
              const float v = p.scores[t * p.stride + j];
              if (j >= p.ks[t] && j < p.ke[t]) {
                ASSERT_TRUE(std::isfinite(v)) << "row " << t << " col " << j;
              } else {
                ASSERT_TRUE(std::isnan(v)) << "row " << t << " col " << j;
              }
            }
          }
        }
      }
    }
  }
}

// Valid elements of a full-range score problem, row by row.
std::vector<std::vector<float>> score_rows(Distribution dist, std::int64_t T, std::int64_t N) {
  const ScoresProblem p = make_scores_problem(spec_of(dist, Layout::kFull, T, N));
  std::vector<std::vector<float>> rows;
  for (std::int64_t t = 0; t < T; ++t) {
    rows.emplace_back(p.scores.begin() + t * p.stride, p.scores.begin() + t * p.stride + N);
  }
  return rows;
}

TEST(Scores, DistributionCharacter) {
  const std::int64_t T = 8, N = 20000;
  {  // model-like: mostly distinct values
    for (const auto& row : score_rows(Distribution::kModelLike, T, N)) {
      EXPECT_GT(std::set<float>(row.begin(), row.end()).size(), 19500u);
    }
  }
  {  // ties: 16 values per row, every 4th row all equal
    const auto rows = score_rows(Distribution::kTies, T, N);
    for (std::int64_t t = 0; t < T; ++t) {
      const std::size_t distinct = std::set<float>(rows[t].begin(), rows[t].end()).size();
      EXPECT_EQ(distinct, t % 4 == 3 ? 1u : 16u) << "row " << t;
    }
  }
  {  // dead-relu: ~95 % exact zeros (se 0.0015), the rest positive
    for (const auto& row : score_rows(Distribution::kDeadRelu, T, N)) {
      const auto zeros = std::count(row.begin(), row.end(), 0.0f);
      EXPECT_NEAR(static_cast<double>(zeros) / N, 0.95, 0.01);
      for (float v : row) ASSERT_TRUE((v == 0.0f && !std::signbit(v)) || v > 0.0f) << v;
    }
  }
  {  // mixed-sign: both signs, magnitudes in [2^-8, 2^8)
    for (const auto& row : score_rows(Distribution::kMixedSign, T, N)) {
      const auto negative = std::count_if(row.begin(), row.end(), [](float v) { return v < 0.0f; });
      EXPECT_NEAR(static_cast<double>(negative) / N, 0.5, 0.02);
      float lo = INFINITY, hi = 0.0f;
      for (float v : row) {
        lo = std::min(lo, std::fabs(v));
        hi = std::max(hi, std::fabs(v));
      }
      EXPECT_GE(lo, std::ldexp(1.0f, -8));
      EXPECT_LT(lo, std::ldexp(1.0f, -7));
      EXPECT_GE(hi, std::ldexp(1.0f, 7));
      EXPECT_LT(hi, std::ldexp(1.0f, 8));
    }
  }
  {  // shifted: 1000 +- 0.003, many repeats after rounding
    for (const auto& row : score_rows(Distribution::kShifted, T, N)) {
      const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
      EXPECT_GE(*lo, 999.99f);
      EXPECT_LE(*hi, 1000.01f);
      EXPECT_GT(*hi - *lo, 0.0f);
      EXPECT_LT(std::set<float>(row.begin(), row.end()).size(), 200u);
    }
  }
  {  // small-integer: integers in [-64, 64], both ends reached
    for (const auto& row : score_rows(Distribution::kSmallInteger, T, N)) {
      for (float v : row) ASSERT_TRUE(v == std::nearbyint(v) && std::fabs(v) <= 64.0f) << v;
      EXPECT_EQ(*std::min_element(row.begin(), row.end()), -64.0f);
      EXPECT_EQ(*std::max_element(row.begin(), row.end()), 64.0f);
    }
  }
}

// -------------------------------------------------------- params, scale ---

TEST(Problem, ParamsPointIntoBuffers) {
  ProblemSpec spec = spec_of(Distribution::kModelLike, Layout::kCausalSuffix, 5, 40);
  spec.k_row_stride = 256;
  const IndexerProblem p = make_indexer_problem(spec);
  std::int32_t indices[1];
  float values[1];
  SelectOptions options;
  options.k = 512;
  const IndexerTopkParams ip = p.params(indices, values, options);
  EXPECT_EQ(ip.q, p.q.data());
  EXPECT_EQ(ip.k, p.k.data());
  EXPECT_EQ(ip.k_scale, p.k_scale.data());
  EXPECT_EQ(ip.w, p.w.data());
  EXPECT_EQ(ip.ks, p.ks.data());
  EXPECT_EQ(ip.ke, p.ke.data());
  EXPECT_EQ(ip.num_queries, 5);
  EXPECT_EQ(ip.num_keys, 40);
  EXPECT_EQ(ip.num_heads, 64);
  EXPECT_EQ(ip.head_dim, kHeadDim);
  EXPECT_EQ(ip.k_row_stride, 256);
  EXPECT_EQ(ip.indices, indices);
  EXPECT_EQ(ip.values, values);
  EXPECT_EQ(ip.options.k, 512);
  EXPECT_EQ(p.valid_pairs(), 36 + 37 + 38 + 39 + 40);

  const ScoresProblem sp = make_scores_problem(spec);
  const TopkParams tp = sp.params(indices, nullptr, options);
  EXPECT_EQ(tp.scores, sp.scores.data());
  EXPECT_EQ(tp.ks, sp.ks.data());
  EXPECT_EQ(tp.ke, sp.ke.data());
  EXPECT_EQ(tp.num_rows, 5);
  EXPECT_EQ(tp.num_cols, 40);
  EXPECT_EQ(tp.score_stride, 44);
  EXPECT_EQ(tp.indices, indices);
  EXPECT_EQ(tp.values, nullptr);
  EXPECT_EQ(tp.options.k, 512);
  EXPECT_EQ(sp.valid_pairs(), p.valid_pairs());
}

TEST(Problem, ValidPairsUses64Bits) {
  ScoresProblem p;
  p.ks.assign(3, 0);
  p.ke.assign(3, std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(p.valid_pairs(),
            3 * static_cast<std::int64_t>(std::numeric_limits<std::int32_t>::max()));
}

// Merge inputs: each part's list lies in its own slice, ranked by descending
// score (equal scores by ascending index, so indices are distinct), full but
// in the short rows, whose lists end in empty slots; a seed gives the same
// bytes.
TEST(Generators, MergePartsAreRankedListsOfTheirSlices) {
  for (Distribution dist : all_distributions()) {
    SCOPED_TRACE(std::string(to_string(dist)));
    MergeSpec spec;
    spec.dist = dist;
    spec.P = 3;
    spec.R = 2 * kMergeShortRowPeriod + 1;
    spec.part_k = 40;
    spec.seed = 7;
    const MergeProblem m = make_merge_problem(spec);
    ASSERT_EQ(m.indices.size(), static_cast<std::size_t>(spec.P * spec.R * spec.part_k));
    ASSERT_EQ(m.values.size(), m.indices.size());
    const std::int64_t slice = kMergeSliceKeysPerPartK * spec.part_k;
    for (std::int64_t p = 0; p < spec.P; ++p) {
      for (std::int64_t r = 0; r < spec.R; ++r) {
        const bool short_row = r % kMergeShortRowPeriod == kMergeShortRowPeriod - 1;
        const std::int64_t full = short_row ? spec.part_k * p / (2 * spec.P) : spec.part_k;
        const std::int64_t base = (p * spec.R + r) * spec.part_k;
        for (std::int64_t i = 0; i < spec.part_k; ++i) {
          const std::int32_t index = m.indices[base + i];
          if (i >= full) {
            EXPECT_EQ(index, -1) << "part " << p << " row " << r << " slot " << i;
            EXPECT_TRUE(std::isnan(m.values[base + i]));
            continue;
          }
          EXPECT_GE(index, p * slice);
          EXPECT_LT(index, (p + 1) * slice);
          if (i == 0) continue;
          const std::uint32_t key = score_key(m.values[base + i]), prev = score_key(m.values[base + i - 1]);
          EXPECT_TRUE(key < prev || (key == prev && index > m.indices[base + i - 1]))
              << "part " << p << " row " << r << " slot " << i;
        }
      }
    }
    // Bytes, not floats: the empty slots hold NaN.
    const auto same_bytes = [&m](const MergeProblem& other) {
      return other.indices == m.indices &&
             std::memcmp(other.values.data(), m.values.data(), m.values.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same_bytes(make_merge_problem(spec)));
    spec.seed = 8;
    EXPECT_FALSE(same_bytes(make_merge_problem(spec)));
  }
}

TEST(Generators, MergeSpecOutOfRangeThrows) {
  MergeSpec spec;
  spec.P = 0;
  EXPECT_THROW(make_merge_problem(spec), std::invalid_argument);
  spec.P = 2;
  spec.part_k = std::numeric_limits<std::int32_t>::max() / kMergeSliceKeysPerPartK;
  EXPECT_THROW(make_merge_problem(spec), std::invalid_argument);
}

TEST(Generators, MillionKeysInSeconds) {
  const std::int64_t N = 1048576;
  const auto start = std::chrono::steady_clock::now();
  const IndexerProblem p =
      make_indexer_problem(spec_of(Distribution::kModelLike, Layout::kCausalSuffix, 2, N));
  const ScoresProblem sp =
      make_scores_problem(spec_of(Distribution::kModelLike, Layout::kCausalSuffix, 2, N));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(p.k.size(), static_cast<std::size_t>(N * kHeadDim));
  EXPECT_EQ(sp.ke[1], N);
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace dsa::tools
