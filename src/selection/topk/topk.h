// Launcher of the standalone GPU top-k (contract section 5) and its internal
// test hooks. Not part of the public API: src/api/operators.cpp calls
// launch_topk with default hooks after validating the arguments.
#pragma once

#include <cstdint>

#include "dsa_topk/dsa_topk.h"
#include "selection/topk/trace.h"

namespace dsa::selection::topk {

// Which kernel runs the rows (TopkHooks::engine).
enum class TopkEngine {
  kAuto,         // the resident kernel for num_cols <= kResidentMaxLen, else
                 //   cluster-resident when the launch plan finds a cluster size
                 //   for the rows (plan.h), else
                 //   sampled: wide when num_rows <= the SM count and K >= 1024
                 //   (split over clusters when the rows are few and long enough,
                 //   plan.h), LongRows64K up to its kMaxLen, LongRows beyond
  kSampled,      // the sampled-threshold kernel (topk_kernel.cuh) at any length,
                 //   512 threads a row (LongRows)
  kSampled64K,   // the sampled kernel with LongRows64K's smaller buffers;
                 //   num_cols must be <= LongRows64K::kMaxLen
  kSampledWide,  // the sampled kernel at 1024 threads a row (WideRows); K >= 1024
  kSampledSplit, // the wide sampled kernel with each row split over a cluster of
                 //   TopkHooks::split_ctas CTAs (0: as kAuto picks, at least 2); K >= 1024
  kResident,     // the resident kernel; num_cols must be <= kResidentMaxLen
  kClusterResident,  // each row over a cluster of TopkHooks::split_ctas CTAs (0: the
                     //   launch plan's size, at least 2) holding it in shared memory;
                     //   K >= 1024, num_cols at most that many CTAs' parts
};

// Rows a launch takes as entries instead of scores (the decode bar
// selection's long rows, decode/bar_select.cuh): row t, when it has a key
// and stored[t] is 0, is the count[t] order keys at areas + t * capacity
// (score key << 32 | ~position, selection/device/candidates.cuh) that a
// sink kept from its scores, every key of the row at or above floor[t]
// among them and K of them at or above it, so the row's top K are the top
// K of its entries at or above floor[t] (every tie with the K-th
// included). Other rows are scores at scores + t * stride as usual (an
// empty row reads neither its flag nor its state). Such
// a launch runs the sampled kernel (WideRows for at most a row an SM at K
// >= 1024, else LongRows): its entry rows take the candidate buffer, the
// window select and the write-out the scored rows use, so one launch takes
// both kinds of row. Active when areas is set.
struct EntryRows {
  const std::uint32_t* count = nullptr;  // [rows]
  const std::uint64_t* areas = nullptr;  // [rows, capacity]
  std::int64_t capacity = 0;             // entries an area holds
  const std::uint32_t* floor = nullptr;  // [rows]
  const std::uint32_t* stored = nullptr; // [rows]: not 0 where the row is scores
};

// Test hooks; the operator uses the defaults (the decode operator sets
// entries).
struct TopkHooks {
  // Replace the sampled threshold by forced_threshold_key (forces a path:
  // high -> underflow, 0 -> every key a candidate -> overflow on long rows,
  // a tied value -> threshold tie).
  bool force_threshold = false;
  std::uint32_t forced_threshold_key = 0;
  // Treat the forced tau as the bottom of a sampled bin wider than one key:
  // the filter compares once an element first (keys > tau), and filters the
  // row again with both compares when fewer than K keys pass (a float tau only).
  bool forced_tau_tie_free = false;
  TopkRowTrace* trace = nullptr;  // [num_rows] device memory, or null
  // [num_rows] device memory, or null: rows whose entry is 0 are skipped
  // (nothing written). The fused operator's repair finishes only the rows it
  // flagged.
  const std::uint32_t* row_mask = nullptr;
  // Tests pin the kernel (force_threshold implies a sampled geometry: only
  // the sampled kernel has a threshold to force; kAuto and kResident become
  // kSampled).
  TopkEngine engine = TopkEngine::kAuto;
  // kSampledSplit's and kClusterResident's CTAs a row: 2, 4, 8 or 16
  // (kMaxSplit), or 0 to pick.
  int split_ctas = 0;
  // Launched programmatically after the kernel that writes the scores
  // (which calls sm90::allow_dependent_launch): the top-k's CTAs may take
  // the SMs that kernel's CTAs leave and wait there for its end before they
  // read anything, instead of being launched after it. The launcher
  // declines where that measured slower (launch_programmatic in plan.h:
  // the resident kernel with fewer rows than the device holds CTAs of
  // it).
  bool after_producer = false;
  // Rows given as entries (EntryRows); the engine must be kAuto and no
  // threshold forced.
  EntryRows entries;
};

// Runs dsa::topk on params (already validated; device pointers) on `stream`:
// one kernel launch, no synchronisation, no allocation. Returns kCudaError
// if the launch fails.
Status launch_topk(const TopkParams& params, CUstream_st* stream, const TopkHooks& hooks = {});

// CTAs of the kernel launch_topk picks for (k, num_cols, engine; kAuto as
// for a launch of more rows than SMs) that the
// device keeps resident per SM, or -1 on a CUDA error or an engine that
// cannot take num_cols (tests check the shared plan fits the geometry's
// occupancy).
int topk_ctas_per_sm(int k, std::int64_t num_cols, TopkEngine engine = TopkEngine::kAuto);

}  // namespace dsa::selection::topk
