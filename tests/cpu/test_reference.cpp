// The exact CPU reference: score arithmetic (bit-exact on small integers,
// bounded error otherwise) and the CPU backend's top-k judged by the checker.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "common/parallel.h"
#include "reference/cpu_reference.h"
#include "tools/checker.h"
#include "tools/generators.h"

#include "../gpu/gpu_test_util.h"

namespace dsa {
namespace {

using testing::indexer_problem;
using tools::Distribution;
using tools::Layout;

// All fp32 reference scores of a problem, row by row.
std::vector<std::vector<float>> reference_scores(const IndexerTopkParams& p) {
  const reference::DecodedKeys keys(p, 0);
  std::vector<std::vector<float>> rows(static_cast<std::size_t>(p.num_queries));
  parallel_items(p.num_queries, 0, [&](std::int64_t t) { reference::score_row(p, keys, t, &rows[t]); });
  return rows;
}

TEST(ReferenceScores, SmallIntegerInputsAreBitExact) {
  for (Layout layout : {Layout::kCausalSuffix, Layout::kVarlenBatch, Layout::kBoundary}) {
    const auto prob = indexer_problem(Distribution::kSmallInteger, layout, 9, 777, 512, 64, 144, 11);
    const IndexerTopkParams p = prob.params(nullptr, nullptr, SelectOptions{});
    const auto rows = reference_scores(p);
    std::int64_t compared = 0;
    for (std::int64_t t = 0; t < p.num_queries; ++t) {
      std::vector<double> exact;
      reference::score_row_f64(p, t, &exact);
      ASSERT_EQ(exact.size(), rows[t].size());
      for (std::size_t i = 0; i < exact.size(); ++i, ++compared) {
        ASSERT_EQ(static_cast<double>(rows[t][i]), exact[i]) << "row " << t << " key " << p.ks[t] + i;
      }
    }
    EXPECT_GT(compared, 0);
  }
}

// The fp32 path performs at most 12 roundings per dot, 2 per head and 1 for
// the scale: |fp32 - fp64| <= 80 * 2^-24 * magnitude.
TEST(ReferenceScores, ModelLikeErrorWithinRoundingBound) {
  for (Distribution dist : {Distribution::kModelLike, Distribution::kMixedSign, Distribution::kShifted}) {
    const auto prob = indexer_problem(dist, Layout::kCausalSuffix, 4, 300, 512, 64, 0, 5);
    const IndexerTopkParams p = prob.params(nullptr, nullptr, SelectOptions{});
    const auto rows = reference_scores(p);
    double worst = 0;
    for (std::int64_t t = 0; t < p.num_queries; ++t) {
      std::vector<double> exact;
      reference::score_row_f64(p, t, &exact);
      for (std::size_t i = 0; i < exact.size(); ++i) {
        const double bound = 80.0 * std::ldexp(1.0, -24) * reference::score_magnitude(p, t, p.ks[t] + i);
        const double err = std::fabs(rows[t][i] - exact[i]);
        ASSERT_LE(err, bound) << tools::to_string(dist) << " row " << t << " key " << p.ks[t] + i;
        worst = std::max(worst, err / (bound + DBL_MIN));
      }
    }
    EXPECT_LT(worst, 1.0);
  }
}

TEST(ReferenceScores, StridedKeysIgnorePadding) {
  // The generator fills the padding of each k row with FP8 NaN: no score may see it.
  const auto prob = indexer_problem(Distribution::kModelLike, Layout::kFull, 3, 64, 512, 64, 160, 3);
  const auto rows = reference_scores(prob.params(nullptr, nullptr, SelectOptions{}));
  for (const auto& row : rows) {
    for (float v : row) ASSERT_FALSE(std::isnan(v));
  }
}

// The CPU backend's indexer_scores writes the ranges' scores, and with
// fill_outside -inf in every other column below N; columns past N (the
// stride's padding) are never written.
TEST(ReferenceScores, IndexerScoresFillOutsideTheRanges) {
  for (bool fill : {false, true}) {
    for (Layout layout : tools::all_layouts()) {
      const auto prob = indexer_problem(Distribution::kModelLike, layout, 11, 777, 512, 64, 0, 21);
      const std::int64_t stride = prob.N + 5;
      constexpr float kPoison = 12345.0f;
      std::vector<float> out(static_cast<std::size_t>(prob.T * stride), kPoison);
      IndexerScoresParams p;
      static_cast<IndexerInputs&>(p) = prob.params(nullptr, nullptr, SelectOptions{});
      p.scores = out.data();
      p.score_stride = stride;
      p.fill_outside = fill;
      ASSERT_TRUE(indexer_scores(p, ExecutionContext{}).ok());
      const auto rows = reference_scores(prob.params(nullptr, nullptr, SelectOptions{}));
      for (std::int64_t t = 0; t < prob.T; ++t) {
        for (std::int64_t s = 0; s < stride; ++s) {
          const float v = out[t * stride + s];
          if (s >= prob.ks[t] && s < prob.ke[t]) {
            ASSERT_EQ(v, rows[t][s - prob.ks[t]]) << tools::to_string(layout) << " row " << t << " key " << s;
          } else if (fill && s < prob.N) {
            ASSERT_EQ(v, -INFINITY) << tools::to_string(layout) << " row " << t << " key " << s;
          } else {
            ASSERT_EQ(v, kPoison) << tools::to_string(layout) << " fill " << fill << " row " << t << " key " << s;
          }
        }
      }
    }
  }
}

struct Case {
  Distribution dist;
  Layout layout;
  int k;
  TieBreak ties;
  IndexBase base;
  bool sorted;
  bool values;
};

void run_case(const Case& c, std::uint64_t seed) {
  const std::int64_t T = 12, N = c.layout == Layout::kBoundary ? 3000 : 2 * c.k + 333;
  const auto prob = indexer_problem(c.dist, c.layout, T, N, c.k, 64, 0, seed);
  SelectOptions options;
  options.k = c.k;
  options.ties = c.ties;
  options.index_base = c.base;
  options.sorted = c.sorted;
  std::vector<std::int32_t> indices(T * c.k, -77);
  std::vector<float> values(c.values ? T * c.k : 0, 1234.0f);
  const IndexerTopkParams p = prob.params(indices.data(), c.values ? values.data() : nullptr, options);
  ASSERT_TRUE(indexer_topk(p, ExecutionContext{}).ok());
  const auto rows = reference_scores(p);
  tools::CheckInput in;
  in.T = T;
  in.ks = p.ks;
  in.ke = p.ke;
  in.row_scores = [&](std::int64_t t) { return std::span<const float>(rows[t]); };
  in.indices = indices.data();
  in.values = c.values ? values.data() : nullptr;
  in.options = options;
  const tools::CheckReport report = tools::check_topk(in);
  EXPECT_TRUE(report.ok()) << tools::to_string(c.dist) << "/" << tools::to_string(c.layout) << " K=" << c.k
                           << "\n" << report.summary();
}

TEST(ReferenceTopk, ExactOnEveryGeneratorAndLayout) {
  std::uint64_t seed = 100;
  for (Distribution dist : tools::all_distributions()) {
    for (Layout layout : tools::all_layouts()) {
      run_case({dist, layout, 512, TieBreak::kAny, IndexBase::kAbsolute, false, false}, ++seed);
      run_case({dist, layout, 512, TieBreak::kSmallestIndex, IndexBase::kRelative, true, true}, ++seed);
    }
  }
}

TEST(ReferenceTopk, EveryK) {
  for (int k : kSupportedK) {
    run_case({Distribution::kTies, Layout::kBoundary, k, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true, true}, 7);
    run_case({Distribution::kModelLike, Layout::kCausalSuffix, k, TieBreak::kAny, IndexBase::kRelative, false, true}, 8);
  }
}

TEST(ReferenceTopk, IndependentOfThreadCount) {
  const auto prob = indexer_problem(Distribution::kTies, Layout::kVarlenBatch, 40, 3000, 512, 64, 0, 9);
  SelectOptions options;
  options.k = 512;
  std::vector<std::vector<std::int32_t>> results;
  for (int threads : {1, 2, 7}) {
    std::vector<std::int32_t> indices(40 * 512);
    ExecutionContext ctx;
    ctx.num_threads = threads;
    ASSERT_TRUE(indexer_topk(prob.params(indices.data(), nullptr, options), ctx).ok());
    results.push_back(indices);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

// Non-finite data never breaks a row: NaN scores rank as -inf.
TEST(ReferenceTopk, NonFiniteInputsStillGiveCompleteRows) {
  auto prob = indexer_problem(Distribution::kModelLike, Layout::kFull, 6, 1500, 512, 64, 0, 12);
  for (std::int64_t s = 0; s < prob.N; s += 3) prob.k[s * prob.k_row_stride] = 0x7F;  // FP8 NaN
  prob.k_scale[10] = INFINITY;
  prob.w[5] = NAN;  // row 0: every score NaN
  SelectOptions options;
  options.k = 512;
  std::vector<std::int32_t> indices(6 * 512);
  std::vector<float> values(6 * 512);
  const IndexerTopkParams p = prob.params(indices.data(), values.data(), options);
  ASSERT_TRUE(indexer_topk(p, ExecutionContext{}).ok());
  const auto rows = reference_scores(p);
  tools::CheckInput in;
  in.T = 6;
  in.ks = p.ks;
  in.ke = p.ke;
  in.row_scores = [&](std::int64_t t) { return std::span<const float>(rows[t]); };
  in.indices = indices.data();
  in.values = values.data();
  in.options = options;
  const auto report = tools::check_topk(in);
  EXPECT_TRUE(report.ok()) << report.summary();
}

TEST(ReferenceTopk, StandaloneTopkOnEveryScoreDistribution) {
  for (Distribution dist : tools::all_distributions()) {
    for (Layout layout : {Layout::kCausalSuffix, Layout::kBoundary, Layout::kVarlenBatch}) {
      tools::ProblemSpec spec;
      spec.dist = dist;
      spec.layout = layout;
      spec.T = 16;
      spec.N = 5000;
      spec.K = 1024;
      spec.seed = 21;
      const auto prob = tools::make_scores_problem(spec);
      for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
        SelectOptions options;
        options.k = 1024;
        options.ties = ties;
        options.sorted = ties == TieBreak::kSmallestIndex;
        std::vector<std::int32_t> indices(16 * 1024);
        std::vector<float> values(16 * 1024);
        const TopkParams p = prob.params(indices.data(), values.data(), options);
        ASSERT_TRUE(topk(p, ExecutionContext{}).ok());
        tools::CheckInput in;
        in.T = 16;
        in.ks = p.ks;
        in.ke = p.ke;
        in.row_scores = tools::dense_row_scores(p.scores, p.score_stride, p.ks, p.ke);
        in.indices = indices.data();
        in.values = values.data();
        in.options = options;
        const auto report = tools::check_topk(in);
        EXPECT_TRUE(report.ok()) << tools::to_string(dist) << "\n" << report.summary();
      }
    }
  }
}

// N up to 1M (contract section 1), both tie modes, on a few rows.
TEST(ReferenceTopk, MillionKeyRows) {
  for (Distribution dist : {Distribution::kModelLike, Distribution::kTies, Distribution::kDeadRelu}) {
    tools::ProblemSpec spec;
    spec.dist = dist;
    spec.layout = Layout::kFull;
    spec.T = 2;
    spec.N = 1 << 20;
    spec.K = 2048;
    spec.seed = 77;
    const auto prob = tools::make_scores_problem(spec);
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      SelectOptions options;
      options.ties = ties;
      tools::TopkOutput out;
      out.T = prob.T;
      out.K = options.k;
      out.indices.assign(prob.T * options.k, -5);
      ASSERT_TRUE(topk(prob.params(out.indices.data(), nullptr, options), ExecutionContext{}).ok());
      const auto report = tools::check_problem(prob, options, out);
      EXPECT_TRUE(report.ok()) << tools::to_string(dist) << "\n" << report.summary();
    }
  }
}

}  // namespace
}  // namespace dsa
