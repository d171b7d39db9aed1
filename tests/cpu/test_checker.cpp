// The checker judges every other test, so each rule it enforces is shown both
// ways: a correct result passes, and a result broken in exactly that rule fails
// with a message that names the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/keys.h"
#include "tools/checker.h"

#include "../gpu/gpu_test_util.h"

namespace dsa::tools {
namespace {

using dsa::testing::make_options;

// Substring assertion that needs no gmock.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
// Fills the score matrix outside every row's range: it outranks every real
// score, so a checker that read past [ks, ke) would pick it as the K-th score.
constexpr float kOutsidePoison = 1e30f;

struct RowSpec {
  std::int32_t ks = 0;
  std::vector<float> scores;  // [len]: score(t, ks + i)
};

// A batch of rows, its dense [T, stride] score matrix and a result under test.
struct Batch {
  std::int64_t T = 0;
  std::int64_t stride = 0;
  std::vector<float> scores;  // [T, stride]
  std::vector<std::int32_t> ks, ke;
  std::vector<std::int32_t> indices;  // [T, K]
  std::vector<float> values;          // [T, K]
  SelectOptions options;

  std::int64_t K() const { return options.k; }
  std::int32_t& index(std::int64_t t, std::int64_t slot) { return indices[t * K() + slot]; }
  float& value(std::int64_t t, std::int64_t slot) { return values[t * K() + slot]; }
  float score(std::int64_t t, std::int32_t local) const {
    return scores[t * stride + ks[t] + local];
  }
  std::int32_t base(std::int64_t t) const {
    return options.index_base == IndexBase::kAbsolute ? ks[t] : 0;
  }
};

Batch make_batch(const std::vector<RowSpec>& rows, const SelectOptions& options) {
  Batch b;
  b.T = static_cast<std::int64_t>(rows.size());
  b.options = options;
  for (const RowSpec& row : rows) {
    b.stride =
        std::max<std::int64_t>(b.stride, row.ks + static_cast<std::int64_t>(row.scores.size()));
  }
  b.stride += 3;  // columns past every range, also poisoned
  b.scores.assign(static_cast<std::size_t>(b.T * b.stride), kOutsidePoison);
  for (std::int64_t t = 0; t < b.T; ++t) {
    const RowSpec& row = rows[t];
    std::copy(row.scores.begin(), row.scores.end(), b.scores.begin() + t * b.stride + row.ks);
    b.ks.push_back(row.ks);
    b.ke.push_back(row.ks + static_cast<std::int32_t>(row.scores.size()));
  }
  b.indices.assign(static_cast<std::size_t>(b.T * b.K()), -1);
  b.values.assign(static_cast<std::size_t>(b.T * b.K()), -kInf);
  return b;
}

// A correct answer, written independently of the checker: locals ordered by
// (score key descending, index ascending) - valid for every tie mode and for
// sorted output. Unsorted requests get their valid slots shuffled, since an
// unsorted result may come in any order.
void fill_correct(Batch& b, std::uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  for (std::int64_t t = 0; t < b.T; ++t) {
    const std::int32_t len = b.ke[t] - b.ks[t];
    std::vector<std::int32_t> order(static_cast<std::size_t>(len));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
      return score_key(b.score(t, x)) > score_key(b.score(t, y));
    });
    const std::int64_t count = std::min<std::int64_t>(b.K(), len);
    order.resize(static_cast<std::size_t>(count));
    if (!b.options.sorted) std::shuffle(order.begin(), order.end(), rng);
    for (std::int64_t slot = 0; slot < count; ++slot) {
      b.index(t, slot) = order[slot] + b.base(t);
      b.value(t, slot) = b.score(t, order[slot]);
    }
  }
}

CheckReport check(const Batch& b, bool with_values = true) {
  CheckInput input;
  input.T = b.T;
  input.ks = b.ks.data();
  input.ke = b.ke.data();
  input.row_scores = dense_row_scores(b.scores.data(), b.stride, b.ks.data(), b.ke.data());
  input.indices = b.indices.data();
  input.values = with_values ? b.values.data() : nullptr;
  input.options = b.options;
  return check_topk(input);
}

// The single failure of a one-failing-row check, for message assertions.
std::string only_failure(const CheckReport& report) {
  EXPECT_EQ(report.rows_failed, 1) << report.summary();
  return report.failures.empty() ? std::string() : report.failures.front().what;
}

// Distinct scores, local i scoring (i * 7919) % len, so the top-k is unique
// and scattered over the row.
RowSpec distinct_row(std::int32_t ks, std::int32_t len) {
  RowSpec row{ks, {}};
  for (std::int32_t i = 0; i < len; ++i) {
    row.scores.push_back(static_cast<float>((static_cast<std::int64_t>(i) * 7919) % len));
  }
  return row;
}

// Random rows with lengths around K and either few distinct values (many
// ties, signed zeros, NaN and -inf) or spread values.
std::vector<RowSpec> random_rows(int K, std::int64_t T, std::mt19937_64& rng) {
  const std::vector<float> tie_values = {3.0f, 1.0f, 0.0f, -0.0f, -2.0f, kNaN, -kInf};
  std::normal_distribution<float> spread(0.0f, 1.0f);
  std::vector<RowSpec> rows;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int32_t lengths[] = {
        0, 1, K - 1, K, K + 1, 3 * K, static_cast<std::int32_t>(rng() % (2 * K + 1))};
    const std::int32_t len = lengths[t % std::size(lengths)];
    RowSpec row{static_cast<std::int32_t>(rng() % 5), {}};
    const bool ties = t % 2 == 0;
    for (std::int32_t i = 0; i < len; ++i) {
      row.scores.push_back(ties ? tie_values[rng() % tie_values.size()] : spread(rng));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

TEST(Checker, CorrectResultsPassInEveryMode) {
  std::mt19937_64 rng(7);
  for (int K : {8, 64, 512}) {
    const std::vector<RowSpec> rows = random_rows(K, 21, rng);
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      for (IndexBase base : {IndexBase::kAbsolute, IndexBase::kRelative}) {
        for (bool sorted : {false, true}) {
          Batch b = make_batch(rows, make_options(K, ties, base, sorted));
          fill_correct(b, rng());
          for (bool with_values : {false, true}) {
            const CheckReport report = check(b, with_values);
            EXPECT_TRUE(report.ok()) << "K " << K << " sorted " << sorted << "\n"
                                     << report.summary();
            EXPECT_EQ(report.rows_checked, b.T);
          }
        }
      }
    }
  }
}

TEST(Checker, MissingValidSlotFails) {
  Batch b = make_batch({distinct_row(5, 20)}, make_options(8));
  fill_correct(b);
  b.index(0, 7) = -1;
  EXPECT_TRUE(Contains(only_failure(check(b)), "slot 7: index -1 outside [5, 25)"));
}

TEST(Checker, PaddingSlotNotMinusOneFails) {
  Batch b = make_batch({distinct_row(0, 5)}, make_options(8));
  fill_correct(b);
  b.index(0, 6) = 0;
  EXPECT_TRUE(Contains(only_failure(check(b)), "slot 6: index 0 where padding -1 is expected"));
}

TEST(Checker, OutOfRangeIndexFailsInBothBases) {
  struct Bad {
    IndexBase base;
    std::int32_t index;
  };
  // Row range [10, 30): absolute indices in [10, 30), relative in [0, 20).
  const Bad bad[] = {{IndexBase::kAbsolute, 9},
                     {IndexBase::kAbsolute, 30},
                     {IndexBase::kAbsolute, 0},
                     {IndexBase::kRelative, 20},
                     {IndexBase::kRelative, -2},
                     {IndexBase::kRelative, 25},
                     {IndexBase::kAbsolute, std::numeric_limits<std::int32_t>::max()},
                     {IndexBase::kRelative, std::numeric_limits<std::int32_t>::min()}};
  for (const Bad& c : bad) {
    Batch b = make_batch({distinct_row(10, 20)}, make_options(8, TieBreak::kAny, c.base));
    fill_correct(b);
    b.index(0, 3) = c.index;
    EXPECT_TRUE(
        Contains(only_failure(check(b)), "slot 3: index " + std::to_string(c.index) + " outside"));
  }
}

TEST(Checker, DuplicateIndexFails) {
  Batch b = make_batch({distinct_row(2, 20)}, make_options(8));
  fill_correct(b);
  b.index(0, 5) = b.index(0, 1);
  EXPECT_TRUE(Contains(only_failure(check(b)),
                       "slot 5: index " + std::to_string(b.index(0, 1)) + " duplicates slot 1"));
}

TEST(Checker, LowerScoringIndexInsteadOfSelectedFails) {
  for (IndexBase base : {IndexBase::kAbsolute, IndexBase::kRelative}) {
    Batch b = make_batch({distinct_row(4, 40)}, make_options(8, TieBreak::kAny, base, true));
    fill_correct(b);
    // Local 0 scores 0, the row's lowest, and is never selected.
    b.index(0, 2) = b.base(0);
    b.value(0, 2) = 0.0f;
    EXPECT_TRUE(Contains(only_failure(check(b)), "slot 2: selected score 0 (index " +
                                                     std::to_string(b.base(0)) +
                                                     ") is below the K-th score 32"));
  }
}

TEST(Checker, HigherScoreLeftOutFails) {
  // Top-2 of {5, 3, 3, 3} is {5, 3}; {3, 3} holds nothing below the K-th
  // score 3 yet misses the 5: only the multiset comparison catches it.
  Batch b = make_batch({{0, {5, 3, 3, 3}}}, make_options(2));
  b.index(0, 0) = 1;
  b.index(0, 1) = 2;
  b.value(0, 0) = 3;
  b.value(0, 1) = 3;
  EXPECT_TRUE(Contains(only_failure(check(b)),
                       "multiset differs at rank 0: selected score 3, "
                       "reference score 5"));
}

TEST(Checker, TiesAtKthAreFreeOnlyWithoutDeterministicMode) {
  // K = 4: 9 and three of the five 5s; the smallest-index choice is {0, 1, 2, 3}.
  const RowSpec row{3, {9, 5, 5, 5, 5, 1, 5}};
  for (IndexBase base : {IndexBase::kAbsolute, IndexBase::kRelative}) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      Batch b = make_batch({row}, make_options(4, ties, base));
      fill_correct(b);
      ASSERT_TRUE(check(b).ok());
      // Swap tied local 3 for tied local 6.
      for (std::int64_t slot = 0; slot < 4; ++slot) {
        if (b.index(0, slot) == 3 + b.base(0)) b.index(0, slot) = 6 + b.base(0);
      }
      const CheckReport report = check(b);
      if (ties == TieBreak::kAny) {
        EXPECT_TRUE(report.ok()) << report.summary();
      } else {
        EXPECT_TRUE(Contains(only_failure(report), "index " + std::to_string(3 + b.base(0)) +
                                                       " (score 5) is not selected"));
      }
    }
  }
}

TEST(Checker, ValueOneUlpOffFails) {
  Batch b = make_batch({distinct_row(1, 20)}, make_options(8));
  fill_correct(b);
  ASSERT_TRUE(check(b).ok());
  b.value(0, 4) = std::nextafter(b.value(0, 4), kInf);
  EXPECT_TRUE(Contains(only_failure(check(b)), "slot 4: value"));
  EXPECT_TRUE(check(b, /*with_values=*/false).ok());
}

TEST(Checker, PaddedValueNotNegInfFails) {
  for (float bad : {0.0f, kInf, kNaN, -std::numeric_limits<float>::max()}) {
    Batch b = make_batch({distinct_row(0, 3)}, make_options(8));
    fill_correct(b);
    b.value(0, 5) = bad;
    EXPECT_TRUE(Contains(only_failure(check(b)), "slot 5: value"));
    EXPECT_TRUE(Contains(only_failure(check(b)), "the padding is -inf (0xFF800000)"));
  }
}

TEST(Checker, UnsortedFailsOnlyWhenSortedRequested) {
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    Batch b = make_batch({distinct_row(0, 30)}, make_options(8, ties, IndexBase::kAbsolute, true));
    fill_correct(b);
    std::swap(b.index(0, 3), b.index(0, 4));
    std::swap(b.value(0, 3), b.value(0, 4));
    EXPECT_TRUE(Contains(only_failure(check(b)), "slot 4:"));
    EXPECT_TRUE(Contains(only_failure(check(b)), "breaks the sorted order"));
    b.options.sorted = false;
    EXPECT_TRUE(check(b).ok());
  }
}

TEST(Checker, EqualScoresInDescendingIndexOrderFailOnlyWhenDeterministic) {
  // All four selected scores tie; sorted output lists them by descending index.
  const RowSpec row{0, {2, 2, 2, 2, 1}};
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    Batch b = make_batch({row}, make_options(4, ties, IndexBase::kRelative, true));
    fill_correct(b);
    std::reverse(b.indices.begin(), b.indices.begin() + 4);
    const CheckReport report = check(b);
    if (ties == TieBreak::kAny) {
      EXPECT_TRUE(report.ok()) << report.summary();
    } else {
      EXPECT_TRUE(
          Contains(only_failure(report), "slot 1: score 2 (index 2) after score 2 (index 3)"));
    }
  }
}

TEST(Checker, NaNRanksAsNegInf) {
  // len > K: the finite scores win; a NaN in place of the lowest of them fails.
  {
    Batch b = make_batch({{0, {kNaN, 1, kNaN, 2, 3}}},
                         make_options(3, TieBreak::kAny, IndexBase::kAbsolute, true));
    fill_correct(b);
    ASSERT_TRUE(check(b).ok());
    b.index(0, 2) = 0;
    b.value(0, 2) = kNaN;
    EXPECT_TRUE(
        Contains(only_failure(check(b)), "selected score nan (index 0) is below the K-th score 1"));
  }
  // len <= K: every index is returned, NaN-scored ones included; a NaN value
  // must carry that score's own bits.
  {
    const float payload_nan = std::bit_cast<float>(0x7FC00123u);
    Batch b = make_batch({{2, {payload_nan, 1, kNaN}}}, make_options(4));
    fill_correct(b);
    EXPECT_TRUE(check(b).ok());
    for (std::int64_t slot = 0; slot < 3; ++slot) {
      if (b.index(0, slot) == 2) b.value(0, slot) = kNaN;
    }
    EXPECT_TRUE(Contains(only_failure(check(b)), "(0x7FC00123)"));
  }
  // NaN ties with -inf at the K-th score: either passes in kAny; the smallest
  // index (the NaN at local 1) is required in kSmallestIndex mode.
  {
    const RowSpec row{0, {1, kNaN, -kInf, 2}};
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      Batch b = make_batch({row}, make_options(3, ties, IndexBase::kAbsolute, true));
      fill_correct(b);
      ASSERT_EQ(b.index(0, 2), 1);
      ASSERT_TRUE(check(b).ok());
      b.index(0, 2) = 2;
      b.value(0, 2) = -kInf;
      EXPECT_EQ(check(b).ok(), ties == TieBreak::kAny) << check(b).summary();
    }
  }
}

TEST(Checker, SignedZerosAreEqualScores) {
  // Top-2 of {-0, +0, 1}: the 1 and either zero; sorted order may interleave them.
  const RowSpec row{0, {-0.0f, 0.0f, 1.0f}};
  for (std::int32_t zero_index : {0, 1}) {
    Batch b = make_batch({row}, make_options(2, TieBreak::kAny, IndexBase::kAbsolute, true));
    b.index(0, 0) = 2;
    b.value(0, 0) = 1.0f;
    b.index(0, 1) = zero_index;
    b.value(0, 1) = row.scores[zero_index];
    EXPECT_TRUE(check(b).ok()) << check(b).summary();
  }
  // Over zeros alone the K-th score ties -0 with +0: free in kAny, the
  // smallest index in kSmallestIndex mode.
  Batch b = make_batch({{0, {0.0f, -0.0f}}}, make_options(1, TieBreak::kSmallestIndex));
  b.index(0, 0) = 1;
  b.value(0, 0) = -0.0f;
  EXPECT_TRUE(Contains(only_failure(check(b)), "index 0 (score 0) is not selected"));
  b.options.ties = TieBreak::kAny;
  EXPECT_TRUE(check(b).ok());
}

TEST(Checker, LengthsAroundK) {
  const int K = 16;
  for (std::int32_t len : {0, 1, K - 1, K, K + 1}) {
    Batch b = make_batch({distinct_row(7, len)}, make_options(K));
    fill_correct(b);
    EXPECT_TRUE(check(b).ok()) << "len " << len << "\n" << check(b).summary();
    // One valid slot too few, then one too many.
    const std::int64_t count = std::min(K, len);
    if (count > 0) {
      Batch fewer = b;
      fewer.index(0, count - 1) = -1;
      fewer.value(0, count - 1) = -kInf;
      EXPECT_FALSE(check(fewer).ok()) << "len " << len;
    }
    if (count < K) {
      Batch more = b;
      more.index(0, count) = 7;
      EXPECT_FALSE(check(more).ok()) << "len " << len;
    }
  }
}

TEST(Checker, FailuresCappedWhileAllFailingRowsCounted) {
  std::vector<RowSpec> rows(20, distinct_row(0, 12));
  Batch b = make_batch(rows, make_options(4));
  fill_correct(b);
  for (std::int64_t t = 0; t < b.T; ++t) b.index(t, 0) = -1;
  CheckInput input;
  input.T = b.T;
  input.ks = b.ks.data();
  input.ke = b.ke.data();
  input.row_scores = dense_row_scores(b.scores.data(), b.stride, b.ks.data(), b.ke.data());
  input.indices = b.indices.data();
  input.options = b.options;
  const CheckReport report = check_topk(input, 3);
  EXPECT_EQ(report.rows_checked, 20);
  EXPECT_EQ(report.rows_failed, 20);
  ASSERT_EQ(report.failures.size(), 3u);
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(report.failures[i].row, i);
  EXPECT_TRUE(Contains(report.summary(), "checked 20 rows: 20 failed\nrow 0: slot 0:"));
}

TEST(Checker, SummaryNamesTheFailingRow) {
  std::vector<RowSpec> rows(10, distinct_row(3, 12));
  Batch b = make_batch(rows, make_options(4));
  fill_correct(b);
  EXPECT_EQ(check(b).summary(), "checked 10 rows: 0 failed");
  b.index(7, 1) = b.index(7, 0);
  const CheckReport report = check(b);
  EXPECT_EQ(report.summary(), "checked 10 rows: 1 failed\nrow 7: slot 1: index " +
                                  std::to_string(b.index(7, 0)) + " duplicates slot 0");
}

TEST(Checker, InconsistentScoresSpanIsReportedNotRead) {
  Batch b = make_batch({distinct_row(0, 10)}, make_options(4));
  fill_correct(b);
  CheckInput input;
  input.T = 1;
  input.ks = b.ks.data();
  input.ke = b.ke.data();
  input.row_scores = [&](std::int64_t) { return std::span<const float>(b.scores.data(), 5); };
  input.indices = b.indices.data();
  input.options = b.options;
  EXPECT_TRUE(
      Contains(only_failure(check_topk(input)), "row_scores gave 5 scores for a range of 10"));
}

}  // namespace
}  // namespace dsa::tools
