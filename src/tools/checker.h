// The one checker every test, the CLI and the benchmarks use to judge a top-k
// result (contract sections 1-2).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "tools/problem.h"

namespace dsa::tools {

// Scores of row t over its range [ks[t], ke[t]): element i is score(t, ks[t] + i).
using RowScoresFn = std::function<std::span<const float>(std::int64_t t)>;

struct CheckInput {
  std::int64_t T = 0;
  const std::int32_t* ks = nullptr;    // [T]
  const std::int32_t* ke = nullptr;    // [T]
  RowScoresFn row_scores;              // the operator's own fp32 scores
  const std::int32_t* indices = nullptr;  // [T, K] result under test
  const float* values = nullptr;          // [T, K] or null if values were not requested
  SelectOptions options;                  // k, ties, index_base, sorted as requested
};

struct RowFailure {
  std::int64_t row = 0;
  std::string what;  // e.g. "slot 17: index 900 outside [0, 512)"
};

struct CheckReport {
  std::int64_t rows_checked = 0;
  std::int64_t rows_failed = 0;
  std::vector<RowFailure> failures;  // the first max_failures failing rows
  bool ok() const { return rows_failed == 0; }
  std::string summary() const;       // one line, plus one line per recorded failure
};

// Per row: count == min(K, len); slots [0, count) hold in-range, unique indices
// and slots [count, K) hold -1; the multiset of selected scores equals the
// reference top-count multiset (NaN ranks as -inf, -0 == +0); in kSmallestIndex
// mode the index set is exactly the smallest-index tie-break set; with values,
// values[i] is bit-equal to the score of indices[i] and -inf in padding; with
// sorted, scores are non-increasing (and indices ascending within equal scores
// in kSmallestIndex mode).
CheckReport check_topk(const CheckInput& input, std::int64_t max_failures = 8);

// Convenience: scores from a dense [T, stride] matrix indexed by absolute key.
RowScoresFn dense_row_scores(const float* scores, std::int64_t stride, const std::int32_t* ks,
                             const std::int32_t* ke);

// A result for a generated or replayed problem, judged against the problem's
// own scores: the matrix for a ScoresProblem, the CPU reference's fp32 scores
// (computed row by row on `num_threads` threads for decoding) for an
// IndexerProblem. `out.values` empty means values were not requested.
CheckReport check_problem(const ScoresProblem& prob, const SelectOptions& options, const TopkOutput& out,
                          std::int64_t max_failures = 8);
CheckReport check_problem(const IndexerProblem& prob, const SelectOptions& options, const TopkOutput& out,
                          int num_threads = 0, std::int64_t max_failures = 8);

}  // namespace dsa::tools
