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

// One read of every row's [ks, ke), timed as our kernels are (events, L2
// flushed first unless --warm-l2): the floor under any top-k of the same
// rows, launch included. CTAs of 256 threads each reduce 16K keys of a row
// to their greatest score (kept, so the loads stay), 16-byte loads, all of
// a thread's in flight at once. Median of `reps` after a warm-up.
Status time_read_once(const tools::ScoresProblem& prob, int reps, double* median_ms);

}  // namespace dsa::cli
