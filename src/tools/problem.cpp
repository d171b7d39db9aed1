#include "tools/problem.h"

#include <cassert>

namespace dsa::tools {
namespace {

std::int64_t sum_of_lengths(const std::vector<std::int32_t>& ks,
                            const std::vector<std::int32_t>& ke) {
  assert(ks.size() == ke.size());
  std::int64_t total = 0;
  for (std::size_t t = 0; t < ks.size(); ++t) total += static_cast<std::int64_t>(ke[t]) - ks[t];
  return total;
}

}  // namespace

IndexerTopkParams IndexerProblem::params(std::int32_t* indices, float* values,
                                         const SelectOptions& options) const {
  IndexerTopkParams p;
  p.q = q.data();
  p.k = k.data();
  p.k_scale = k_scale.data();
  p.w = w.data();
  p.ks = ks.data();
  p.ke = ke.data();
  p.num_queries = T;
  p.num_keys = N;
  p.num_heads = H;
  p.head_dim = D;
  p.k_row_stride = k_row_stride;
  p.indices = indices;
  p.values = values;
  p.options = options;
  return p;
}

std::int64_t IndexerProblem::valid_pairs() const { return sum_of_lengths(ks, ke); }

TopkParams ScoresProblem::params(std::int32_t* indices, float* values,
                                 const SelectOptions& options) const {
  TopkParams p;
  p.scores = scores.data();
  p.ks = ks.data();
  p.ke = ke.data();
  p.num_rows = T;
  p.num_cols = N;
  p.score_stride = stride;
  p.indices = indices;
  p.values = values;
  p.options = options;
  return p;
}

std::int64_t ScoresProblem::valid_pairs() const { return sum_of_lengths(ks, ke); }

MergeTopkParams MergeProblem::params(std::int32_t* out_indices, float* out_values,
                                     const SelectOptions& options) const {
  MergeTopkParams p;
  p.values = values.data();
  p.indices = indices.data();
  p.num_parts = P;
  p.num_rows = R;
  p.part_k = part_k;
  p.out_indices = out_indices;
  p.out_values = out_values;
  p.options = options;
  return p;
}

}  // namespace dsa::tools
