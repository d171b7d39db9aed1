// Small builders shared by the tests: selection options and generated indexer
// problems. Host-only (no CUDA, no gtest), so the CPU tests use it too.
#pragma once

#include <cstdint>

#include "dsa_topk/dsa_topk.h"
#include "tools/generators.h"

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

// A generated indexer problem; the defaults are tools::ProblemSpec's own
// (k_row_stride 0 = D).
inline tools::IndexerProblem indexer_problem(tools::Distribution dist, tools::Layout layout, std::int64_t T,
                                             std::int64_t N, int K, int H = 64, std::int64_t k_row_stride = 0,
                                             std::uint64_t seed = 1) {
  tools::ProblemSpec spec;
  spec.dist = dist;
  spec.layout = layout;
  spec.T = T;
  spec.N = N;
  spec.H = H;
  spec.K = K;
  spec.k_row_stride = k_row_stride;
  spec.seed = seed;
  return tools::make_indexer_problem(spec);
}

}  // namespace dsa::testing
