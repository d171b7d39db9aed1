// Public baselines timed beside our kernels in the same run (issue 3): what a
// user without this library would run on the same score rows.
#pragma once

#include "dsa_topk/dsa_topk.h"
#include "tools/problem.h"

namespace dsa::cli {

// CUB's segmented radix sort (descending, (score, position) pairs) over every
// row's [ks, ke): a full sort, from which the first K of each row are the
// top-K. Median of `reps` timed sorts after a warm-up; the allocation and the
// upload are outside the timing.
Status time_cub_segmented_sort(const tools::ScoresProblem& prob, int reps, double* median_ms);

}  // namespace dsa::cli
