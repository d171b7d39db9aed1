// The exact CPU reference: the oracle every GPU path is judged against, and
// the CPU backend of the public API.
//
// Summation order of the fp32 score (documented so results are reproducible):
//   dot(h, s)  16 lanes; lane j sums q[h,d]*k[s,d] for d = j, j+16, ..., j+112
//              in increasing d (each product is exact in fp32: e4m3 values have
//              4 significant bits); the lanes are then folded pairwise,
//              lane[i] += lane[i + w] for w = 8, 4, 2, 1; dot = lane[0].
//   acc        for h = 0 .. H-1 in order: acc = acc + w[t,h] * max(dot(h,s), 0)
//              (a rounded multiply, then a rounded add: no fused multiply-add).
//   score      k_scale[s] * acc.
// The float64 variant evaluates the same expression in double (used to bound
// the error of fp32 paths). Small-integer inputs (tools/generators.h) make
// every partial sum exact, so any correct fp32 path matches bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa_topk/dsa_topk.h"

namespace dsa::reference {

// FP8 keys of a problem decoded once to fp32, [N, D], shared by all rows.
class DecodedKeys {
 public:
  DecodedKeys(const IndexerInputs& params, int num_threads);
  const float* row(std::int64_t s) const { return data_.data() + s * dim_; }

 private:
  int dim_ = 0;
  std::vector<float> data_;
};

// Scores of row t over [ks[t], ke[t]) into out (resized to len).
void score_row(const IndexerInputs& params, const DecodedKeys& keys, std::int64_t t, std::vector<float>* out);
void score_row_f64(const IndexerInputs& params, std::int64_t t, std::vector<double>* out);

// k_scale[s] * sum_h |w[t,h]| * sum_d |q[t,h,d] k[s,d]| in double: the
// magnitude that bounds the rounding error of any evaluation order.
double score_magnitude(const IndexerInputs& params, std::int64_t t, std::int64_t s);

// Exact top-min(K, len) of one row: ties at the K-th score go to the smallest
// indices (a valid choice for both tie modes). Writes K slots of `indices`
// (and `values` if non-null) following options.index_base and options.sorted.
void select_row(std::span<const float> row, std::int32_t ks, const SelectOptions& options,
                std::int32_t* indices, float* values);

// The CPU backend's operators (arguments already validated).
Status indexer_topk_cpu(const IndexerTopkParams& params, int num_threads);
Status topk_cpu(const TopkParams& params, int num_threads);
Status indexer_scores_cpu(const IndexerScoresParams& params, int num_threads);

// indexer_topk_paged: each request's keys are gathered from the cache in
// position order and scored by score_row and select_row (relative indices),
// so a paged row's result is bit-identical to the prefill row over the same
// keys; then positions become physical slots when asked.
Status indexer_topk_paged_cpu(const PagedIndexerTopkParams& params, int num_threads);

// merge_topk: per row the non-empty entries of all parts ranked by score_key
// (descending), ties by ascending index (a valid choice for both tie modes),
// written in that order whether or not options.sorted asks for it.
Status merge_topk_cpu(const MergeTopkParams& params, int num_threads);

// ------------------------------------------------------- paged addressing --
// The paged cache's definition (dsa_topk.h), in one place for the reference,
// the validation and the tools. context_lens and block_table must be
// host-readable.

// len(b, j), clamped at 0 below.
std::int64_t paged_row_length(const PagedIndexerInputs& params, std::int64_t b, int j);
// The longest row of request b: the positions [0, len) its rows read.
std::int64_t paged_request_length(const PagedIndexerInputs& params, std::int64_t b);
// Blocks a length occupies: ceil(len / block_size).
std::int64_t paged_blocks(const PagedIndexerInputs& params, std::int64_t len);
// Physical slot of request b's position: block_table[b, p / bs] * bs + p % bs.
std::int64_t paged_slot(const PagedIndexerInputs& params, std::int64_t b, std::int64_t position);
// Request b's positions [0, len) copied out of the cache: keys [len, D] FP8,
// scales [len].
void gather_paged_keys(const PagedIndexerInputs& params, std::int64_t b, std::int64_t len, std::uint8_t* keys,
                       float* scales);

}  // namespace dsa::reference
