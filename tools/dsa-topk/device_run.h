// Runs an operator on the CUDA backend: uploads the problem, poisons the
// outputs, times `reps` calls with CUDA events, downloads the last result.
#pragma once

#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "tools/problem.h"

namespace dsa::cli {

Status run_on_device(const tools::IndexerProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms);
Status run_on_device(const tools::ScoresProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms);

// The scoring kernel alone ([T, N] fp32 scores); `scores` receives the
// last run's matrix when non-null.
Status run_scores_on_device(const tools::IndexerProblem& prob, int reps, std::vector<float>* scores,
                            std::vector<double>* ms);

}  // namespace dsa::cli
