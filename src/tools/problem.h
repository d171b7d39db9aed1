// Host-side containers for one indexer or top-k problem: what generators make,
// dumps hold, the CLI runs and the checker verifies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"

namespace dsa::tools {

// An indexer problem (contract section 1), all tensors host-resident.
struct IndexerProblem {
  std::string name;            // generator or file it came from
  std::uint64_t seed = 0;
  std::int64_t T = 0;          // queries
  std::int64_t N = 0;          // keys
  int H = 64;
  int D = kHeadDim;
  std::int64_t k_row_stride = kHeadDim;  // bytes, >= D, multiple of 16
  std::vector<std::uint8_t> q;           // [T, H, D] FP8 e4m3
  std::vector<std::uint8_t> k;           // [N, k_row_stride] FP8 e4m3 (first D bytes of a row used)
  std::vector<float> k_scale;            // [N]
  std::vector<float> w;                  // [T, H]
  std::vector<std::int32_t> ks, ke;      // [T]

  // Params pointing into this problem's buffers (host pointers).
  IndexerTopkParams params(std::int32_t* indices, float* values, const SelectOptions& options) const;
  std::int64_t valid_pairs() const;  // sum over rows of ke - ks
};

// A standalone top-k problem: an fp32 score matrix with row ranges.
struct ScoresProblem {
  std::string name;
  std::uint64_t seed = 0;
  std::int64_t T = 0;
  std::int64_t N = 0;             // columns
  std::int64_t stride = 0;        // elements, >= N
  std::vector<float> scores;      // [T, stride]
  std::vector<std::int32_t> ks, ke;

  TopkParams params(std::int32_t* indices, float* values, const SelectOptions& options) const;
  std::int64_t valid_pairs() const;
};

// A merge_topk problem: P parts' top-part_k lists of R rows.
struct MergeProblem {
  std::string name;
  std::uint64_t seed = 0;
  std::int64_t P = 0;               // parts
  std::int64_t R = 0;               // rows
  std::int64_t part_k = 0;          // entries per part and row
  std::vector<float> values;        // [P, R, part_k]; NaN in empty slots
  std::vector<std::int32_t> indices;  // [P, R, part_k]; -1 = empty slot

  // Params pointing into this problem's buffers (host pointers).
  MergeTopkParams params(std::int32_t* out_indices, float* out_values, const SelectOptions& options) const;
};

// Output buffers for any operator.
struct TopkOutput {
  std::int64_t T = 0;
  int K = 0;
  std::vector<std::int32_t> indices;  // [T, K]
  std::vector<float> values;          // [T, K] or empty
};

}  // namespace dsa::tools
