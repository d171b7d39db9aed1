// Runs an operator on the CUDA backend: uploads the problem, poisons the
// outputs, times `reps` calls with CUDA events, downloads the last result.
#pragma once

#include <vector>

#include "decode/plan.h"
#include "dsa_topk/dsa_topk.h"
#include "fused/fused.h"
#include "tools/paged.h"
#include "tools/problem.h"

namespace dsa::cli {

Status run_on_device(const tools::IndexerProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms);
Status run_on_device(const tools::ScoresProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms);
// indexer_topk_paged (positions, not physical slots).
Status run_on_device(const tools::PagedProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms);
// The same with its route pinned (hooks.route other than kByShape):
// decode::launch_indexer_topk_paged on the workspace its plan sizes (the
// inputs are generated valid, so no validation call); kByShape: the public
// operator, as above.
Status run_paged_on_device(const tools::PagedProblem& prob, const SelectOptions& options, bool want_values, int reps,
                           const decode::PagedHooks& hooks, tools::TopkOutput* out, std::vector<double>* ms);
// indexer_topk_paged by shape beside its two pinned routes, on the same
// device inputs in one run, timed call by call in turn (operator, unfused,
// fused selection, operator, ...) so all meet the same power state: the
// public operator (its warm-up validates the inputs), the unfused pipeline
// (paged scores into a bounded buffer, then the standalone top-k) and the
// fused selection, the last only where it can take the call.
// The math-only control (decode::PagedHooks::Route::kMathOnly: the scoring
// launches with the scores folded into a checksum) is timed in the same
// rounds; it writes no output, so it is not judged.
// The streaming and the bar selections (pinned) are timed too where they
// can take the call.
struct PagedComparison {
  tools::TopkOutput op, unfused, fused, stream, bar;  // the last result of each
  std::vector<double> op_ms, unfused_ms, fused_ms, math_ms, stream_ms, bar_ms;
  bool fused_possible = false;   // decode::fused_select_possible: fused and fused_ms were timed
  bool stream_possible = false;  // decode::stream_select_possible: stream and stream_ms were timed
  bool bar_possible = false;     // decode::bar_select_possible: bar and bar_ms were timed
  // The bar selection's last call, its last batch of rows: the entries its
  // scoring kernel kept (over the keys of the rows that kept entries), the
  // rows it repaired and the rows that stored their scores instead.
  double bar_entry_fraction = 0;
  std::int64_t bar_repaired = 0;
  std::int64_t bar_stored = 0;
};
Status compare_paged_on_device(const tools::PagedProblem& prob, const SelectOptions& options, bool want_values,
                               int reps, PagedComparison* out);
Status run_on_device(const tools::MergeProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms);

// The judge's scores of a paged problem: request by request, its keys
// gathered from the cache in position order and scored by indexer_scores on
// `backend` (kCuda: the scoring kernel, whose arithmetic the paged operator
// shares, so the scores are bit-identical to its values). *scores is
// [rows, *stride] with *stride = the longest request; row r = b * next_n + j
// holds score(r, p) at column p for p in [0, len(b, j)), -inf elsewhere.
Status paged_scores(const tools::PagedProblem& prob, Backend backend, int threads, std::vector<float>* scores,
                    std::int64_t* stride);

// The fused indexer top-k beside our unfused pipeline, on the same device
// inputs in one run, each timed `reps` times after a warm-up, call by call
// in turn (fused, math-only, unfused, fused, ...) so that all three meet
// the same power state:
//   * fused: the complete operator (dsa::indexer_topk, every stage);
//   * unfused: indexer_scores into a [T, N] matrix, then topk (both CUDA);
//   * math-only: the fused kernel's control build (fused::FusedMode::
//     kMathOnly) on the same workspace, so fused - math-only is the exposed
//     selection time.
// With a pinned route (kFused, kUnfused) the fused side runs
// fused::launch_indexer_topk with that route; kByShape runs the public
// dsa::indexer_topk, whose warm-up call validates the ranges.
struct IndexerBenchHooks {
  fused::FusedHooks::Route route = fused::FusedHooks::Route::kByShape;
};
struct IndexerComparison {
  tools::TopkOutput fused, unfused;  // the last result of each
  std::vector<float> scores;         // [T, N] unfused scores, when asked for
  std::vector<double> fused_ms, unfused_ms, math_ms;
  bool took_unfused_route = false;  // the fused side took the unfused route, not the fused stages
};
Status compare_indexer_on_device(const tools::IndexerProblem& prob, const SelectOptions& options, bool want_values,
                                 int reps, bool keep_scores, const IndexerBenchHooks& bench_hooks,
                                 IndexerComparison* out);

// The scoring kernel alone ([T, N] fp32 scores); `scores` receives the
// last run's matrix when non-null.
Status run_scores_on_device(const tools::IndexerProblem& prob, int reps, std::vector<float>* scores,
                            std::vector<double>* ms);

}  // namespace dsa::cli
