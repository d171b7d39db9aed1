// The FP8 scoring kernel against the CPU reference: bit-exact on
// small-integer inputs, within the documented bound on the others, on every
// range layout, H = 64 and 32, strided keys, and T, N that are not multiples
// of the tile sizes. Entries outside each row's range must stay untouched.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device_array.h"
#include "dsa_topk/dsa_topk.h"
#include "gpu_test_util.h"
#include "reference/cpu_reference.h"
#include "tools/generators.h"

namespace dsa {
namespace {

using testing::DeviceArray;
using testing::indexer_problem;
using tools::Distribution;
using tools::IndexerProblem;
using tools::Layout;

// The poison pattern as a float (0xABABABAB, a finite negative number).
float poison_value() {
  std::uint32_t bits = 0xABABABABu;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// The K of every problem here; only the boundary layout reads it.
constexpr int kK = 512;

// Scores of `prob` on the GPU, [T, stride = N + 3], outputs poisoned first.
std::vector<float> gpu_scores(const IndexerProblem& prob, std::int64_t* stride_out, bool fill_outside = false) {
  const std::int64_t stride = prob.N + 3;
  DeviceArray<std::uint8_t> q(prob.q), k(prob.k);
  DeviceArray<float> k_scale(prob.k_scale), w(prob.w), scores(static_cast<std::size_t>(prob.T * stride));
  DeviceArray<std::int32_t> ks(prob.ks), ke(prob.ke);
  scores.poison();
  IndexerScoresParams p;
  static_cast<IndexerInputs&>(p) = prob.params(nullptr, nullptr, SelectOptions{});
  p.q = q.get();
  p.k = k.get();
  p.k_scale = k_scale.get();
  p.w = w.get();
  p.ks = ks.get();
  p.ke = ke.get();
  p.scores = scores.get();
  p.score_stride = stride;
  p.fill_outside = fill_outside;
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  const Status st = indexer_scores(p, ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  *stride_out = stride;
  return scores.download();
}

// Compares every entry: in range against `expect(t, s, cpu_score)`, out of
// range against the poison, or, with fill_outside, columns below N outside
// the range against -inf (columns N.. stride-1 against the poison either way).
// Returns the number of in-range entries checked.
template <typename Expect>
std::int64_t compare(const IndexerProblem& prob, const std::vector<float>& gpu, std::int64_t stride, Expect expect,
                     bool fill_outside = false) {
  const IndexerInputs in = prob.params(nullptr, nullptr, SelectOptions{});
  const reference::DecodedKeys keys(in, 0);
  std::vector<float> row;
  std::int64_t checked = 0;
  const float poison = poison_value();
  for (std::int64_t t = 0; t < prob.T; ++t) {
    reference::score_row(in, keys, t, &row);
    for (std::int64_t s = 0; s < stride; ++s) {
      const float g = gpu[t * stride + s];
      if (s >= prob.ks[t] && s < prob.ke[t]) {
        if (!expect(t, s, row[s - prob.ks[t]], g)) return -1;
        ++checked;
      } else if (fill_outside && s < prob.N) {
        if (!same_bits(g, -INFINITY)) {
          ADD_FAILURE() << "row " << t << " key " << s << " outside [" << prob.ks[t] << ", " << prob.ke[t]
                        << ") is " << g << ", not -inf";
          return -1;
        }
      } else if (!same_bits(g, poison)) {
        ADD_FAILURE() << "row " << t << " key " << s << " outside [" << prob.ks[t] << ", " << prob.ke[t]
                      << ") was written: " << g;
        return -1;
      }
    }
  }
  return checked;
}

std::int64_t expect_bit_exact(const IndexerProblem& prob, bool fill_outside = false) {
  std::int64_t stride = 0;
  const std::vector<float> gpu = gpu_scores(prob, &stride, fill_outside);
  return compare(
      prob, gpu, stride,
      [&](std::int64_t t, std::int64_t s, float cpu, float g) {
        if (same_bits(cpu, g)) return true;
        ADD_FAILURE() << prob.name << " row " << t << " key " << s << ": gpu " << g << " cpu " << cpu;
        return false;
      },
      fill_outside);
}

void bit_exact_on_every_layout(int H) {
  std::uint64_t seed = H;
  for (Layout layout : tools::all_layouts()) {
    const auto prob = indexer_problem(Distribution::kSmallInteger, layout, 37, 1000, kK, H, 0, ++seed);
    EXPECT_GT(expect_bit_exact(prob), 0) << prob.name << " H=" << H;
  }
}

TEST(ScoringGpu, SmallIntegerBitExactOnEveryLayoutH64) { bit_exact_on_every_layout(64); }
TEST(ScoringGpu, SmallIntegerBitExactOnEveryLayoutH32) { bit_exact_on_every_layout(32); }

TEST(ScoringGpu, SmallIntegerAwkwardShapesAndStrides) {
  struct Shape {
    std::int64_t T, N, stride;
  };
  for (const Shape& sh : {Shape{1, 1, 0}, Shape{3, 63, 0}, Shape{5, 65, 144}, Shape{9, 129, 256},
                          Shape{130, 4097, 0}, Shape{2, 70001, 160}}) {
    const auto prob = indexer_problem(Distribution::kSmallInteger, Layout::kFull, sh.T, sh.N, kK, 64, sh.stride, 7);
    EXPECT_GT(expect_bit_exact(prob), 0) << "T=" << sh.T << " N=" << sh.N << " stride=" << sh.stride;
  }
}

// Minimal reproducer: a block whose rows all start off a 4-key boundary once
// made the scale TMA load start unaligned (an illegal instruction).
TEST(ScoringGpu, RangesStartingOffTileBoundaries) {
  auto prob = indexer_problem(Distribution::kSmallInteger, Layout::kFull, 6, 300, kK, 64, 0, 13);
  prob.ks = {3, 5, 7, 130, 299, 65};
  prob.ke = {200, 300, 64, 131, 300, 66};
  EXPECT_EQ(expect_bit_exact(prob), 197 + 295 + 57 + 1 + 1 + 1);
}

// Small T splits each row across many CTAs (key chunks): still exact.
TEST(ScoringGpu, SmallIntegerSplitKeyRanges) {
  const auto prob = indexer_problem(Distribution::kSmallInteger, Layout::kCausalSuffix, 8, 150001, kK, 64, 0, 11);
  EXPECT_GT(expect_bit_exact(prob), 0);
}

// Random FP8 inputs. FP8 tensor cores accumulate with reduced precision
// (about 13 mantissa bits per 32-term group, truncated), so the per-entry
// bound is relative to the magnitude sum of the terms:
//   |gpu - float64| <= 2^-9 * k_scale * sum_h |w_h| sum_d |q_hd k_d|,
// the truncation of 32 terms at 2^-13 each. The contract's figure of merit,
// the error over the row's largest |score| (the best public kernel: about
// 3e-4), is measured and held to 4e-4.
TEST(ScoringGpu, RandomInputsWithinDocumentedBound) {
  constexpr double kMagnitudeBound = 1.0 / 512;
  constexpr double kRowMaxBound = 4e-4;
  double worst_magnitude = 0, worst_row = 0;
  std::uint64_t seed = 40;
  for (Distribution dist : {Distribution::kModelLike, Distribution::kMixedSign, Distribution::kDeadRelu,
                            Distribution::kShifted, Distribution::kTies}) {
    for (Layout layout : {Layout::kCausalSuffix, Layout::kVarlenBatch}) {
      const auto prob = indexer_problem(dist, layout, 24, 3000, kK, 64, 0, ++seed);
      const IndexerInputs in = prob.params(nullptr, nullptr, SelectOptions{});
      std::int64_t stride = 0;
      const std::vector<float> gpu = gpu_scores(prob, &stride);
      for (std::int64_t t = 0; t < prob.T; ++t) {
        std::vector<double> exact;
        reference::score_row_f64(in, t, &exact);
        double row_max = 0;
        for (double v : exact) row_max = std::max(row_max, std::fabs(v));
        for (std::size_t i = 0; i < exact.size(); ++i) {
          const std::int64_t s = prob.ks[t] + static_cast<std::int64_t>(i);
          const double err = std::fabs(gpu[t * stride + s] - exact[i]);
          const double magnitude = reference::score_magnitude(in, t, s);
          const double by_magnitude = magnitude > 0 ? err / magnitude : err;
          const double by_row = row_max > 0 ? err / row_max : err;
          worst_magnitude = std::max(worst_magnitude, by_magnitude);
          worst_row = std::max(worst_row, by_row);
          ASSERT_LE(by_magnitude, kMagnitudeBound) << prob.name << " row " << t << " key " << s;
          ASSERT_LE(by_row, kRowMaxBound) << prob.name << " row " << t << " key " << s;
        }
      }
    }
  }
  std::printf("worst error / magnitude sum: %.3g (bound %.3g); worst error / row max |score|: %.3g (bound %.1g)\n",
              worst_magnitude, kMagnitudeBound, worst_row, kRowMaxBound);
}

TEST(ScoringGpu, RunsAreBitIdentical) {
  const auto prob = indexer_problem(Distribution::kModelLike, Layout::kContextParallel, 50, 5000, kK, 64, 0, 3);
  std::int64_t stride = 0;
  const std::vector<float> a = gpu_scores(prob, &stride), b = gpu_scores(prob, &stride);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// NaN inputs never crash or write outside the ranges.
TEST(ScoringGpu, NonFiniteInputsStayInBounds) {
  auto prob = indexer_problem(Distribution::kModelLike, Layout::kFull, 6, 700, kK, 64, 0, 5);
  for (std::int64_t s = 0; s < prob.N; s += 7) prob.k[s * prob.k_row_stride + 3] = 0x7F;
  prob.w[64 + 5] = NAN;
  std::int64_t stride = 0;
  const std::vector<float> gpu = gpu_scores(prob, &stride);
  const float poison = poison_value();
  for (std::int64_t t = 0; t < prob.T; ++t) {
    for (std::int64_t s = prob.N; s < stride; ++s) EXPECT_TRUE(same_bits(gpu[t * stride + s], poison));
  }
  // Keys without NaN bytes in rows with finite weights keep finite scores.
  EXPECT_TRUE(std::isfinite(gpu[0 * stride + 1]));
}

// fill_outside: every column below N outside a row's range is -inf, the
// range keeps its exact scores, and the padding columns past N stay
// untouched; on every layout (empty rows, whole rows, suffixes, ragged
// batches), with rows whose ranges start and end off any tile or warp width.
TEST(ScoringGpu, FillOutsideWritesOnlyOutsideTheRanges) {
  std::uint64_t seed = 70;
  for (Layout layout : tools::all_layouts()) {
    const auto prob = indexer_problem(Distribution::kSmallInteger, layout, 37, 1000, kK, 64, 0, ++seed);
    EXPECT_GT(expect_bit_exact(prob, true), 0) << prob.name;
  }
  auto prob = indexer_problem(Distribution::kSmallInteger, Layout::kFull, 7, 300, kK, 64, 0, 17);
  prob.ks = {0, 5, 33, 130, 299, 65, 300};
  prob.ke = {300, 300, 64, 131, 300, 65, 300};
  EXPECT_EQ(expect_bit_exact(prob, true), 300 + 295 + 31 + 1 + 1);
  EXPECT_GE(expect_bit_exact(indexer_problem(Distribution::kSmallInteger, Layout::kBoundary, 10, 1, kK, 64, 0, 9), true),
            0);
}

// Rows of length 0 and 1 (N = 1): nothing outside the ranges is written.
TEST(ScoringGpu, TinyAndEmptyRows) {
  EXPECT_GE(expect_bit_exact(indexer_problem(Distribution::kSmallInteger, Layout::kBoundary, 10, 1, kK, 64, 0, 9)), 0);
}

}  // namespace
}  // namespace dsa
