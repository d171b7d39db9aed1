// Small builders shared by the tests: selection options and generated indexer
// problems. Host-only (no CUDA, no gtest), so the CPU tests use it too.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "tools/generators.h"
#include "tools/paged.h"

namespace dsa::testing {

// The defaults are SelectOptions' own.
inline SelectOptions make_options(int k, TieBreak ties = TieBreak::kAny, IndexBase base = IndexBase::kAbsolute,
                                  bool sorted = false) {
  SelectOptions o;
  o.k = k;
  o.ties = ties;
  o.index_base = base;
  o.sorted = sorted;
  return o;
}

// The spec of a generated problem; the defaults are tools::ProblemSpec's own
// (k_row_stride 0 = D).
inline tools::ProblemSpec problem_spec(tools::Distribution dist, tools::Layout layout, std::int64_t T, std::int64_t N,
                                       int K, int H = 64, std::int64_t k_row_stride = 0, std::uint64_t seed = 1) {
  tools::ProblemSpec spec;
  spec.dist = dist;
  spec.layout = layout;
  spec.T = T;
  spec.N = N;
  spec.H = H;
  spec.K = K;
  spec.k_row_stride = k_row_stride;
  spec.seed = seed;
  return spec;
}

// A generated indexer problem (problem_spec's defaults).
inline tools::IndexerProblem indexer_problem(tools::Distribution dist, tools::Layout layout, std::int64_t T,
                                             std::int64_t N, int K, int H = 64, std::int64_t k_row_stride = 0,
                                             std::uint64_t seed = 1) {
  return tools::make_indexer_problem(problem_spec(dist, layout, T, N, K, H, k_row_stride, seed));
}

// A generated score-row problem (K only shapes the kBoundary layout).
inline tools::ScoresProblem scores_problem(tools::Distribution dist, tools::Layout layout, std::int64_t T,
                                           std::int64_t N, int K, std::uint64_t seed) {
  return tools::make_scores_problem(problem_spec(dist, layout, T, N, K, 64, 0, seed));
}

// The spec of a generated paged decode problem (the other fields keep
// tools::PagedSpec's defaults).
inline tools::PagedSpec paged_spec(tools::Distribution dist, std::int64_t B, int next_n, int H, int block_size,
                                   std::vector<std::int32_t> lens, bool per_token, std::uint64_t seed) {
  tools::PagedSpec spec;
  spec.dist = dist;
  spec.B = B;
  spec.next_n = next_n;
  spec.H = H;
  spec.block_size = block_size;
  spec.context_lens = std::move(lens);
  spec.lens_per_token = per_token;
  spec.seed = seed;
  return spec;
}

}  // namespace dsa::testing
