// The CPU model of the GPU selection algorithm (src/selection/model.h):
// its radix select against a sort oracle, every selected row judged exactly
// by the project's checker, and each failure class forced and repaired.
#include "selection/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/keys.h"
#include "tools/checker.h"

namespace dsa::selection {
namespace {

constexpr std::array<int, 3> kKs = {512, 1024, 2048};
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ------------------------------------------------------------- oracles -----

// radix_select's contract, computed by sorting.
RadixResult sorted_oracle(std::vector<std::uint32_t> keys, std::int64_t k) {
  std::sort(keys.begin(), keys.end(), std::greater<>());
  const std::uint32_t kth = keys[k - 1];
  return {kth, std::count(keys.begin(), keys.begin() + k, kth)};
}

std::vector<std::uint32_t> keys_of(std::span<const float> row) {
  std::vector<std::uint32_t> keys(row.size());
  std::transform(row.begin(), row.end(), keys.begin(), score_key);
  return keys;
}

// Key of the row's k-th largest score.
std::uint32_t kth_largest_key(std::span<const float> row, std::int64_t k) {
  std::vector<std::uint32_t> keys = keys_of(row);
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
  return keys[k - 1];
}

// Number of scores of `row` whose key is >= `key`.
std::int64_t count_at_least(std::span<const float> row, std::uint32_t key) {
  return std::count_if(row.begin(), row.end(), [key](float s) { return score_key(s) >= key; });
}

// A row's trace and the verdict on its selected indices.
struct Selected {
  ModelRowTrace trace;
  ::testing::AssertionResult exact = ::testing::AssertionSuccess();
};

// Runs the model on one row and judges the result with the project's
// checker (indices padded to K with -1, as the operator returns them); also
// checks the trace's K-th key against a direct computation.
Selected select_and_judge(std::span<const float> row, std::int32_t base,
                          const ModelConfig& config) {
  std::vector<std::int32_t> selected;
  Selected result{model_select_row(row, base, config, &selected)};
  const auto len = static_cast<std::int64_t>(row.size());
  if (static_cast<std::int64_t>(selected.size()) != std::min<std::int64_t>(config.k, len)) {
    result.exact = ::testing::AssertionFailure() << "selected " << selected.size() << " indices";
    return result;
  }
  std::vector<std::int32_t> indices(config.k, -1);
  std::copy(selected.begin(), selected.end(), indices.begin());
  const std::int32_t ks = base;
  const auto ke = static_cast<std::int32_t>(base + len);
  tools::CheckInput input;
  input.T = 1;
  input.ks = &ks;
  input.ke = &ke;
  input.row_scores = [row](std::int64_t) { return row; };
  input.indices = indices.data();
  input.options.k = config.k;
  input.options.ties = config.ties;
  const tools::CheckReport report = tools::check_topk(input);
  if (!report.ok()) {
    result.exact = ::testing::AssertionFailure() << report.summary();
  } else if (len > config.k && result.trace.kth_key != kth_largest_key(row, config.k)) {
    result.exact = ::testing::AssertionFailure() << "trace.kth_key " << result.trace.kth_key;
  }
  return result;
}

// Path and trace in one line, for failure messages.
std::string describe(const ModelRowTrace& t) {
  return std::string(to_string(t.path)) + " tau=" + std::to_string(t.threshold_key) +
         " count=" + std::to_string(t.count) + " dropped=" + std::to_string(t.dropped) +
         " overflowed_segments=" + std::to_string(t.overflowed_segments) +
         " underflow_after_repair=" + std::to_string(t.underflow_after_repair);
}

// -------------------------------------------------------- row generators ---

enum class Dist {
  kNormal,
  kFewDistinct,    // 1..8 distinct values: ties at the K-th score
  kAllEqual,
  kMostlyZero,     // +0 and -0 with a few positives
  kPacked,         // large values a few ulps apart: only low key bytes differ
  kNonFinite,      // normal with NaN, +-inf, -0 sprinkled
  kIncreasing,     // monotone: the top K sits at one end
  kDecreasing,
  kConcentrated,   // the top values all in one default-size segment
  kStrideAliased,  // the default sample positions hold the largest values
  kCount,
};

const char* dist_name(Dist d) {
  constexpr const char* kNames[] = {"normal",     "few_distinct", "all_equal",
                                    "mostly_zero", "packed",      "non_finite",
                                    "increasing", "decreasing",   "concentrated",
                                    "stride_aliased"};
  return kNames[static_cast<int>(d)];
}

std::vector<float> normal_row(std::int64_t len, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> row(len);
  for (float& s : row) s = normal(rng);
  return row;
}

std::vector<float> make_row(Dist dist, std::int64_t len, std::mt19937_64& rng) {
  const ModelConfig defaults;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> row = normal_row(len, rng);
  switch (dist) {
    case Dist::kNormal:
      break;
    case Dist::kFewDistinct: {
      const std::vector<float> values = normal_row(1 + rng() % 8, rng);
      for (float& s : row) s = values[rng() % values.size()];
      break;
    }
    case Dist::kAllEqual:
      std::fill(row.begin(), row.end(), row.empty() ? 0.0f : row[0]);
      break;
    case Dist::kMostlyZero: {
      for (float& s : row) s = (rng() % 2) ? 0.0f : -0.0f;
      const std::int64_t positives = len == 0 ? 0 : rng() % (2 * kKs.back());
      for (std::int64_t i = 0; i < positives; ++i) row[rng() % len] = unit(rng) + 1e-3f;
      break;
    }
    case Dist::kPacked:
      // ulp(2^20) = 1/8: 4096 distinct values differing in the low 12 bits.
      for (float& s : row) s = 1048576.0f + static_cast<float>(rng() % 4096) * 0.125f;
      break;
    case Dist::kNonFinite: {
      constexpr std::array<float, 3> kRates = {0.001f, 0.02f, 0.3f};
      const float rate = kRates[rng() % kRates.size()];
      constexpr std::array<float, 5> kSpecials = {kNaN, -kNaN, kInf, -kInf, -0.0f};
      for (float& s : row) {
        if (unit(rng) < rate) s = kSpecials[rng() % kSpecials.size()];
      }
      break;
    }
    case Dist::kIncreasing:
      for (std::int64_t i = 0; i < len; ++i) row[i] = static_cast<float>(i) * 0.5f - 100.0f;
      break;
    case Dist::kDecreasing:
      for (std::int64_t i = 0; i < len; ++i) row[i] = static_cast<float>(len - i) * 0.25f;
      break;
    case Dist::kConcentrated: {
      const std::int64_t segments = (len + defaults.segment_len - 1) / defaults.segment_len;
      const std::int64_t first = std::int64_t(rng() % std::max<std::int64_t>(segments, 1)) *
                                 defaults.segment_len;
      const std::int64_t end = std::min(len, first + defaults.segment_len);
      for (std::int64_t i = first; i < end; ++i) row[i] += 8.0f;
      break;
    }
    case Dist::kStrideAliased: {
      // Same positions as the model's sampler (model.h, step 1).
      const std::int64_t s = std::min<std::int64_t>(defaults.sample_size, len);
      for (std::int64_t i = 0; i < s; ++i) row[(2 * i + 1) * len / (2 * s)] += 100.0f;
      break;
    }
    case Dist::kCount:
      break;
  }
  return row;
}

// Row lengths: most around K, some medium, a few up to 300k.
std::int64_t pick_length(int k, std::mt19937_64& rng) {
  const std::array<std::int64_t, 7> boundary = {k - 1,     k,     k + 1,    2 * k,
                                                2 * k + 1, 4 * k, 4 * k + 1};
  const auto uniform = [&rng](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const std::uint64_t bucket = rng() % 100;
  if (bucket < 30) return boundary[rng() % boundary.size()];
  if (bucket < 85) return uniform(k + 2, 12 * k);
  if (bucket < 98) return uniform(16384, 65536);
  return uniform(65537, 300000);
}

// Rows whose scores are a shuffled permutation of 0 .. len-1: the key of the
// score len - c lets exactly c scores through the filter.
std::vector<float> permutation_row(std::int64_t len, std::mt19937_64& rng) {
  std::vector<float> row(len);
  std::iota(row.begin(), row.end(), 0.0f);
  std::shuffle(row.begin(), row.end(), rng);
  return row;
}

std::uint32_t threshold_passing(std::int64_t len, std::int64_t c) {
  return score_key(static_cast<float>(len - c));
}

struct PathCounts {
  std::array<std::int64_t, 5> by_path{};
  void add(ModelPath p) { ++by_path[static_cast<int>(p)]; }
  std::int64_t operator[](ModelPath p) const { return by_path[static_cast<int>(p)]; }
  void record(const std::string& prefix) const {
    for (int p = 0; p < 5; ++p) {
      ::testing::Test::RecordProperty(prefix + to_string(static_cast<ModelPath>(p)),
                                      std::to_string(by_path[p]));
    }
  }
};

constexpr std::array<TieBreak, 2> kTieModes = {TieBreak::kAny, TieBreak::kSmallestIndex};

// ------------------------------------------------------------ radix select --

TEST(RadixSelect, RandomKeysMatchSortOracle) {
  std::mt19937_64 rng(1);
  for (const std::int64_t n : {1, 2, 3, 255, 256, 257, 1000, 4097}) {
    std::vector<std::uint32_t> keys(n);
    for (auto& key : keys) key = static_cast<std::uint32_t>(rng());
    for (const std::int64_t k : {std::int64_t{1}, n, 1 + std::int64_t(rng() % n), (n + 1) / 2}) {
      const RadixResult got = radix_select(keys, k);
      const RadixResult want = sorted_oracle(keys, k);
      EXPECT_EQ(got.kth_key, want.kth_key) << "n=" << n << " k=" << k;
      EXPECT_EQ(got.take_equal, want.take_equal) << "n=" << n << " k=" << k;
    }
  }
}

TEST(RadixSelect, ManyDuplicatesMatchSortOracle) {
  // Values that agree on some bytes and differ on others, so every pass
  // narrows among ties of the previous digits.
  constexpr std::array<std::uint32_t, 8> kValues = {0x00000000u, 0xFFFFFFFFu, 0x12345678u,
                                                    0x12345679u, 0x12340000u, 0x12FF5678u,
                                                    0x80000000u, 0x7FFFFFFFu};
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t n = 1 + rng() % 3000;
    const std::size_t distinct = 1 + rng() % kValues.size();
    std::vector<std::uint32_t> keys(n);
    for (auto& key : keys) key = kValues[rng() % distinct];
    for (const std::int64_t k : {std::int64_t{1}, n, 1 + std::int64_t(rng() % n)}) {
      const RadixResult got = radix_select(keys, k);
      const RadixResult want = sorted_oracle(keys, k);
      ASSERT_EQ(got.kth_key, want.kth_key) << "trial " << trial << " k=" << k;
      ASSERT_EQ(got.take_equal, want.take_equal) << "trial " << trial << " k=" << k;
    }
  }
}

TEST(RadixSelect, AllEqualKeysTakeKEqual) {
  for (const std::uint32_t value : {0u, 1u, 0x80000000u, 0xFFFFFFFFu}) {
    const std::vector<std::uint32_t> keys(1000, value);
    for (const std::int64_t k : {1, 500, 1000}) {
      const RadixResult got = radix_select(keys, k);
      EXPECT_EQ(got.kth_key, value);
      EXPECT_EQ(got.take_equal, k);
    }
  }
}

TEST(RadixSelect, RejectsRankOutsideTheKeys) {
  const std::vector<std::uint32_t> keys(10, 7u);
  EXPECT_THROW(radix_select(keys, 0), std::invalid_argument);
  EXPECT_THROW(radix_select(keys, 11), std::invalid_argument);
  EXPECT_THROW(radix_select(std::span<const std::uint32_t>{}, 1), std::invalid_argument);
}

// ------------------------------------------------------- model_select_row --

TEST(ModelSelectRow, RowsUpToKAreEmittedDirectly) {
  std::mt19937_64 rng(3);
  for (const int k : kKs) {
    for (const std::int64_t len : {std::int64_t{0}, std::int64_t{1}, std::int64_t{k - 1},
                                   std::int64_t{k}}) {
      const std::vector<float> row = normal_row(len, rng);
      ModelConfig config;
      config.k = k;
      const Selected s = select_and_judge(row, 77, config);
      EXPECT_TRUE(s.exact) << "k=" << k << " len=" << len;
      EXPECT_EQ(s.trace.path, ModelPath::kDirect);
    }
  }
}

// Over 10,000 rows of every distribution, K, tie mode and length class with
// the default configuration: every row exact, and the certified path the
// common one on normal data long enough for sampling to matter.
TEST(ModelSelectRow, PropertyRandomAndAdversarialRows) {
  constexpr int kRowsPerDist = 1100;
  std::mt19937_64 rng(4);
  PathCounts all;
  PathCounts normal_long;  // normal rows with len >= 4K
  std::array<PathCounts, static_cast<int>(Dist::kCount)> by_dist;
  for (int d = 0; d < static_cast<int>(Dist::kCount); ++d) {
    const auto dist = static_cast<Dist>(d);
    for (int r = 0; r < kRowsPerDist; ++r) {
      ModelConfig config;
      config.k = kKs[rng() % kKs.size()];
      config.ties = kTieModes[rng() % kTieModes.size()];
      const std::int64_t len = pick_length(config.k, rng);
      const std::vector<float> row = make_row(dist, len, rng);
      const auto base = static_cast<std::int32_t>(rng() % 100000);
      const Selected s = select_and_judge(row, base, config);
      ASSERT_TRUE(s.exact) << dist_name(dist) << " row " << r << " k=" << config.k
                           << " len=" << len << ": " << describe(s.trace);
      all.add(s.trace.path);
      by_dist[d].add(s.trace.path);
      if (dist == Dist::kNormal && len >= 4 * config.k) normal_long.add(s.trace.path);
    }
    by_dist[d].record(std::string(dist_name(dist)) + ".");
  }
  all.record("all.");
  normal_long.record("normal_long.");

  std::int64_t normal_long_rows = 0;
  for (const std::int64_t n : normal_long.by_path) normal_long_rows += n;
  ASSERT_GT(normal_long_rows, 300);
  EXPECT_GT(normal_long[ModelPath::kCertified], 0.99 * static_cast<double>(normal_long_rows));
  // The adversarial rows do reach the repairs without forcing.
  EXPECT_GT(by_dist[static_cast<int>(Dist::kStrideAliased)][ModelPath::kUnderflow], 0);
  EXPECT_GT(by_dist[static_cast<int>(Dist::kAllEqual)][ModelPath::kTotalOverflow], 0);
}

// Small samples, no guard and tiny buffers make every failure class common;
// the repairs must still make every row exact.
TEST(ModelSelectRow, StressConfigsReachEveryRepair) {
  constexpr int kRows = 1500;
  std::mt19937_64 rng(5);
  PathCounts paths;
  std::int64_t underflow_after_segment_repair = 0;
  for (int r = 0; r < kRows; ++r) {
    ModelConfig config;
    config.k = kKs[rng() % kKs.size()];
    config.ties = kTieModes[rng() % kTieModes.size()];
    config.sample_size = std::array{16, 64, 256, 4096}[rng() % 4];
    config.guard = std::array{0.0f, 1.0f, 4.0f}[rng() % 3];
    config.segment_len = std::array{256, 1000, 4096}[rng() % 3];
    config.segment_capacity = std::array{16, 64, 256}[rng() % 3];
    config.spill_capacity = std::array{0, 64, 512, 2048}[rng() % 4];
    const auto dist = static_cast<Dist>(rng() % static_cast<int>(Dist::kCount));
    const std::int64_t len = config.k + 1 + static_cast<std::int64_t>(rng() % (8 * config.k));
    const std::vector<float> row = make_row(dist, len, rng);
    const Selected s = select_and_judge(row, 0, config);
    ASSERT_TRUE(s.exact) << dist_name(dist) << " row " << r << " k=" << config.k << " len="
                         << len << ": " << describe(s.trace);
    paths.add(s.trace.path);
    underflow_after_segment_repair += s.trace.underflow_after_repair;
  }
  paths.record("stress.");
  for (const ModelPath p : {ModelPath::kCertified, ModelPath::kUnderflow, ModelPath::kSegmentOverflow,
                          ModelPath::kTotalOverflow}) {
    EXPECT_GT(paths[p], 10) << to_string(p);
  }
  // Rare here (it needs segment_capacity + spill_capacity < K); the forced
  // FailureClasses.SegmentOverflowThenUnderflow always reaches it.
  ::testing::Test::RecordProperty("stress.underflow_after_repair",
                                  std::to_string(underflow_after_segment_repair));
}

TEST(ModelSelectRow, RejectsBadArguments) {
  const std::vector<float> row(10, 1.0f);
  std::vector<std::int32_t> out;
  ModelConfig config;
  EXPECT_THROW(model_select_row(row, 0, config, nullptr), std::invalid_argument);
  EXPECT_THROW(model_select_row(row, -1, config, &out), std::invalid_argument);
  EXPECT_THROW(model_select_row(row, std::numeric_limits<std::int32_t>::max() - 5, config, &out),
               std::invalid_argument);
  config.segment_len = 0;
  EXPECT_THROW(model_select_row(row, 0, config, &out), std::invalid_argument);
}

// ------------------------------------------------------- failure classes ---

// Threshold at +inf: only the 50 planted +inf scores can pass.
TEST(FailureClasses, UnderflowFromInfiniteThreshold) {
  std::mt19937_64 rng(6);
  for (const TieBreak ties : kTieModes) {
    for (const Dist dist : {Dist::kNormal, Dist::kFewDistinct, Dist::kMostlyZero}) {
      std::vector<float> row = make_row(dist, 20000, rng);
      for (int i = 0; i < 50; ++i) row[rng() % row.size()] = kInf;
      ModelConfig config;
      config.k = 1024;
      config.ties = ties;
      config.force_threshold = true;
      config.forced_threshold_key = score_key(kInf);
      const Selected s = select_and_judge(row, 5, config);
      EXPECT_TRUE(s.exact) << dist_name(dist);
      EXPECT_EQ(s.trace.path, ModelPath::kUnderflow) << describe(s.trace);
      EXPECT_EQ(s.trace.count, count_at_least(row, config.forced_threshold_key));
    }
  }
}

// Threshold at the row's maximum, held by at most 100 planted scores: only
// they pass, and the rest of the answer (with ties at its K-th score in the
// few-distinct and packed rows) comes from below tau.
TEST(FailureClasses, UnderflowFromMaximumThreshold) {
  constexpr float kPlanted = 2.0e6f;  // above every generated finite score
  std::mt19937_64 rng(7);
  for (const TieBreak ties : kTieModes) {
    for (const Dist dist : {Dist::kNormal, Dist::kFewDistinct, Dist::kPacked}) {
      std::vector<float> row = make_row(dist, 30000, rng);
      for (int i = 0; i < 100; ++i) row[rng() % row.size()] = kPlanted;
      ModelConfig config;
      config.k = 2048;
      config.ties = ties;
      config.force_threshold = true;
      config.forced_threshold_key = score_key(kPlanted);
      const Selected s = select_and_judge(row, 0, config);
      EXPECT_TRUE(s.exact) << dist_name(dist);
      EXPECT_EQ(s.trace.path, ModelPath::kUnderflow) << describe(s.trace);
      EXPECT_EQ(s.trace.count, count_at_least(row, config.forced_threshold_key));
    }
  }
}

// Threshold 0 lets the whole row through; it cannot fit.
TEST(FailureClasses, TotalOverflowWhenEverythingPasses) {
  std::mt19937_64 rng(8);
  for (const TieBreak ties : kTieModes) {
    for (const Dist dist : {Dist::kNormal, Dist::kFewDistinct, Dist::kNonFinite}) {
      ModelConfig config;
      config.k = 2048;
      config.ties = ties;
      config.force_threshold = true;
      config.forced_threshold_key = 0;
      const std::vector<float> row = make_row(dist, 100000, rng);
      const Selected s = select_and_judge(row, 1, config);
      EXPECT_TRUE(s.exact) << dist_name(dist);
      EXPECT_EQ(s.trace.path, ModelPath::kTotalOverflow) << describe(s.trace);
      EXPECT_EQ(s.trace.count, 100000);
    }
  }
}

// All-equal rows: whatever the sampled threshold, every score passes.
TEST(FailureClasses, TotalOverflowOnAllEqualRows) {
  for (const TieBreak ties : kTieModes) {
    for (const float value : {0.0f, -0.0f, 3.5f, -kInf, kNaN}) {
      ModelConfig config;
      config.k = 512;
      config.ties = ties;
      const std::vector<float> row(50000, value);
      const Selected s = select_and_judge(row, 9, config);
      EXPECT_TRUE(s.exact) << value;
      EXPECT_EQ(s.trace.path, ModelPath::kTotalOverflow) << describe(s.trace);
    }
  }
}

// Total capacity below K: the candidates overflow although fewer than K
// scores pass, so the answer reaches below tau.
TEST(FailureClasses, TotalOverflowWithFewerThanKPassing) {
  std::mt19937_64 rng(9);
  for (const TieBreak ties : kTieModes) {
    ModelConfig config;
    config.k = 512;
    config.ties = ties;
    config.segment_capacity = 64;
    config.spill_capacity = 128;
    config.force_threshold = true;
    const std::vector<float> row = permutation_row(5000, rng);
    config.forced_threshold_key = threshold_passing(5000, 300);
    const Selected s = select_and_judge(row, 0, config);
    EXPECT_TRUE(s.exact);
    EXPECT_EQ(s.trace.path, ModelPath::kTotalOverflow) << describe(s.trace);
    EXPECT_EQ(s.trace.count, 300);
  }
}

// Segment buffers of 64 and a spill of `spill`: the rows' top values are
// `top_values` (7 distinct values, ties at the K-th) placed in `segments`.
struct ConcentratedCase {
  std::vector<float> row;
  ModelConfig config;
};

ConcentratedCase concentrated_case(std::vector<std::int64_t> segments, int spill, TieBreak ties,
                                   std::mt19937_64& rng) {
  ConcentratedCase c;
  c.config.k = 512;
  c.config.ties = ties;
  c.config.segment_len = 1024;
  c.config.segment_capacity = 64;
  c.config.spill_capacity = spill;
  c.row = make_row(Dist::kFewDistinct, 65536, rng);
  for (float& s : c.row) s = std::abs(s);  // background below the top values
  for (const std::int64_t seg : segments) {
    for (std::int64_t i = seg * 1024; i < (seg + 1) * 1024; ++i) c.row[i] = 1000.0f + i % 7;
  }
  return c;
}

// The top values sit in one segment (or two sharing the spill): that
// segment's buffer and then the spill fill up, candidates are dropped, but
// the total count fits, so the flagged segments are re-filtered.
TEST(FailureClasses, SegmentOverflowFromConcentratedTopValues) {
  std::mt19937_64 rng(10);
  for (const TieBreak ties : kTieModes) {
    for (const auto& segments : {std::vector<std::int64_t>{5}, std::vector<std::int64_t>{3, 40}}) {
      // Sampled threshold.
      ConcentratedCase c = concentrated_case(segments, 256, ties, rng);
      Selected s = select_and_judge(c.row, 0, c.config);
      EXPECT_TRUE(s.exact);
      EXPECT_EQ(s.trace.path, ModelPath::kSegmentOverflow) << describe(s.trace);
      EXPECT_EQ(s.trace.overflowed_segments, static_cast<int>(segments.size()));
      EXPECT_FALSE(s.trace.underflow_after_repair);
      EXPECT_GE(s.trace.count, c.config.k);

      // Forced threshold at 1003: 4 of the 7 values pass, > 512 of them.
      c.config.force_threshold = true;
      c.config.forced_threshold_key = score_key(1003.0f);
      s = select_and_judge(c.row, 0, c.config);
      EXPECT_TRUE(s.exact);
      EXPECT_EQ(s.trace.path, ModelPath::kSegmentOverflow) << describe(s.trace);
      EXPECT_FALSE(s.trace.underflow_after_repair);
    }
  }
}

// Buffers of 64 + 128 < K: a segment overflows with fewer than K passing, so
// the segment repair completes the candidates and then the underflow repair
// finds the rest below tau.
TEST(FailureClasses, SegmentOverflowThenUnderflow) {
  std::mt19937_64 rng(11);
  for (const TieBreak ties : kTieModes) {
    ConcentratedCase c = concentrated_case({7}, 128, ties, rng);
    c.config.force_threshold = true;
    c.config.forced_threshold_key = score_key(1005.0f);  // 2 of 7 values: < 512 pass
    const Selected s = select_and_judge(c.row, 0, c.config);
    EXPECT_TRUE(s.exact);
    EXPECT_EQ(s.trace.path, ModelPath::kSegmentOverflow) << describe(s.trace);
    EXPECT_TRUE(s.trace.underflow_after_repair) << describe(s.trace);
    EXPECT_LT(s.trace.count, c.config.k);
    EXPECT_GT(s.trace.dropped, 0);
  }
}

}  // namespace
}  // namespace dsa::selection
