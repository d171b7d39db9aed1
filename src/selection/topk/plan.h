// The standalone top-k's host-side plan (topk.h): from the shape, the
// device's limits and the hooks, the kernel instance (engine and geometry),
// whether and how a row splits over a cluster, the programmatic launch and
// the row prefetch. Pure functions with no CUDA header, so CPU tests check
// them; launch_topk reads the limits, plans, and only maps the plan to a
// kernel instance and its attributes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_limits.h"
#include "dsa_topk/dsa_topk.h"
#include "selection/topk/geometry.h"
#include "selection/topk/topk.h"

namespace dsa::selection::topk {

// The sampled kernel's CTAs prefetch the start of their rows into L2 (the
// filter then reads it from there, after the samples and the threshold):
// the rows in flight share a third of L2. Measured on the H200 (60 MiB L2,
// docs/perf-log.md, T83-T87): fixed budgets of 16 and 32 MB sped 4096 x
// 32K / 64K / 128K by 3-6 %, 64 MB lost 10-16 % at 64K-128K (lines evicted
// before their CTA read them).
inline constexpr int kPrefetchShareOfL2 = 3;

// Bytes of its row each CTA prefetches: a multiple of 16 (the bulk
// prefetch's unit), 0 when the L2 size is unknown (0). Rows in flight: the
// launch's rows, at most the CTAs resident at once (ctas_on_device).
constexpr std::uint32_t row_prefetch_bytes(std::int64_t num_rows, std::int64_t ctas_on_device,
                                           std::int64_t l2_bytes) {
  const std::int64_t in_flight = std::max<std::int64_t>(1, std::min(num_rows, ctas_on_device));
  const std::int64_t bytes = std::min<std::int64_t>(std::max<std::int64_t>(l2_bytes, 0) / kPrefetchShareOfL2 / in_flight,
                                                    std::int64_t{1} << 30);
  return static_cast<std::uint32_t>(bytes & ~std::int64_t{15});
}

// Which launches split their rows (measured on the H200 against one
// 1024-thread CTA a row, L2 flushed before each call, docs/perf-log.md,
// T112): rows longer than kMinSplitRow keys, in parts of at least
// kMinSplitPart keys. With the counts and candidates pushed to their
// readers the unsplit rows take 1.07-1.28x the time of split ones at 1-24
// x 128K (shifted 1.40x), 1.07x at 1 x 100K, 1.13-1.17x at 40-64 x 256K
// and 64 x 1M, 3.1-3.9x at 4 x 1M; 16 x 32K in two parts is 1.17x slower
// (T107).
inline constexpr std::int64_t kMinSplitRow = 65536;
inline constexpr std::int64_t kMinSplitPart = 32768;
// ... but a launch of more rows than the device holds clusters of 4 CTAs
// (over a quarter as many rows as SMs) splits only rows longer than
// kMinCrowdedSplitRow: its rows' lone CTAs already draw most of the DRAM
// bandwidth together, and two parts a 128K row measured even to 2 % slower
// (48 / 64 x 128K: unsplit 1.015 / 0.981 of split) where 256K rows still
// gained.
inline constexpr std::int64_t kMinCrowdedSplitRow = 131072;
// Whether rows of up to num_cols keys may split at all (the launcher asks
// before it reads the device's cluster occupancy).
constexpr bool rows_may_split(std::int64_t num_cols) { return num_cols > kMinSplitRow; }

// Cluster sizes of a split row: 2 << i CTAs for i < kSplitSizes (2 to 16).
inline constexpr int kSplitSizes = 4;
static_assert(kMaxSplit == 2 << (kSplitSizes - 1), "the split's shared plan holds the largest cluster's counts");

// CTAs a row for a launch of num_rows rows of up to num_cols keys when the
// device holds clusters[i] clusters of 2 << i CTAs of the split kernel at
// once (one CTA an SM): the largest size whose clusters take every row at
// once and leave each CTA at least kMinSplitPart keys, so a launch of few
// long rows spreads over the SMs (the filter streams each part of a row on
// its own SM); 1 (no split) when no size does, for rows of at most
// kMinSplitRow keys, and for more rows than clusters[1] of at most
// kMinCrowdedSplitRow keys.
constexpr int split_cluster_size(std::int64_t num_rows, std::int64_t num_cols, const int (&clusters)[kSplitSizes]) {
  if (!rows_may_split(num_cols)) return 1;
  if (num_rows > clusters[1] && num_cols <= kMinCrowdedSplitRow) return 1;
  for (int i = kSplitSizes - 1; i >= 0; --i) {
    const int size = 2 << i;
    if (num_rows <= clusters[i] && num_cols >= size * kMinSplitPart) return size;
  }
  return 1;
}

// CTAs a row of the cluster-resident kernel for a launch of num_rows rows of
// up to num_cols keys when the device holds clusters[i] clusters of 2 << i
// of its CTAs at once: the largest size whose clusters take every row at
// once and whose parts are between ClusterRows' least and most (more SMs
// load and count each row, until the cluster barriers cost more than the
// shorter part saves), or 0 when no size does. Rows that fit one CTA's
// resident kernel are not this kernel's.
constexpr int cluster_resident_size(std::int64_t num_rows, std::int64_t num_cols, const int (&clusters)[kSplitSizes]) {
  if (num_cols <= kResidentMaxLen) return 0;
  for (int i = kSplitSizes - 1; i >= 0; --i) {
    const int size = 2 << i;
    const std::int64_t part = cluster_part_keys(num_cols, size);
    if (num_rows <= clusters[i] && part <= ClusterRows::kMaxPartKeys && part >= ClusterRows::kMinPartKeys) {
      return size;
    }
  }
  return 0;
}

// Whether a launch asked to follow the scores' producer programmatically
// (TopkHooks::after_producer) is launched so: num_rows rows of a kernel the
// device holds ctas_on_device CTAs of at once. Not when the resident kernel
// has fewer rows than that. Measured on the H200 in the operator's unfused
// route against ordinary launches (docs/perf-log.md, F34, F35): 64 / 132
// / 264 x 8K sorted took 1.68 / 1.57 / 1.25x the time (default options
// 1.02-1.07x), 64 x 16K 1.03-1.24x, and 64 sorted 8K rows took about as
// long as 528 (a full launch), as if the early CTAs sat several to an SM
// instead of spread over the device (inferred, not traced). 528 x 8K,
// 264 x 16K and every sampled launch (32K-1M, decode shapes) gained
// 0.5-4.5 %.
constexpr bool launch_programmatic(bool after_producer, bool resident, std::int64_t num_rows, int ctas_on_device) {
  return after_producer && !(resident && num_rows < ctas_on_device);
}

// The kernel instance a launch runs: the kernel and its geometry
// (geometry.h).
enum class TopkGeometry {
  kResident8K,   // topk_resident_kernel, ResidentRows8K
  kResident16K,  // topk_resident_kernel, ResidentRows16K
  kClusterRows,  // topk_cluster_kernel, ClusterRows: each row in a cluster's shared memory
  kSplitRows,    // topk_split_kernel, WideRows: each row over a cluster of CTAs
  kWideRows,     // topk_kernel, WideRows
  kLongRows64K,  // topk_kernel, LongRows64K
  kLongRows,     // topk_kernel, LongRows
};

static_assert(ClusterRows::kThreads == WideRows::kThreads && ClusterRows::kMinCtasPerSm == WideRows::kMinCtasPerSm,
              "a cluster plan the occupancy declines runs the split or wide kernel at its threads and CTAs an SM");

struct TopkPlan {
  TopkGeometry geometry = TopkGeometry::kLongRows;
  int threads = 0;          // a CTA's (the geometry's kThreads)
  int min_ctas_per_sm = 0;  // the geometry's kMinCtasPerSm: the carveout keeps that many resident
  int ctas_on_device = 0;   // SMs x min_ctas_per_sm: CTAs running at once
  // kSplitRows: split_ctas_for picks the CTAs a row once the device's
  // cluster occupancy is read, and a pick of 1 runs topk_kernel with
  // WideRows (the same threads and CTAs an SM) instead. kClusterRows:
  // cluster_ctas_for picks, and a pick of 0 runs the split or wide kernel
  // as the automatic engine would without the cluster-resident one (the
  // same threads and CTAs an SM).
  bool split_pinned = false;  // kSampledSplit / kClusterResident: pinned, at least 2 CTAs a row
  int split_ctas = 0;         // pinned: TopkHooks::split_ctas (0: picked)
  bool programmatic = false;  // launched after the scores' producer (launch_programmatic)
  bool entry_rows = false;    // TopkHooks::entries: the sampled kernel's instance that takes entry rows
};

// The plan of launch_topk(params, ..., hooks) on a device with these limits
// (params validated). kInvalidArgument when the hooks pin an engine the
// shape or K cannot take, or a split that is not 2, 4, 8 or 16 CTAs.
Status make_plan(const TopkParams& params, const DeviceLimits& limits, const TopkHooks& hooks, TopkPlan* plan);

// CTAs a row of a kSplitRows plan for num_rows rows of up to num_cols keys
// when the device holds clusters[i] clusters of 2 << i CTAs of the split
// kernel at once: the pinned count, else split_cluster_size's (at least 2
// when the engine is pinned; 1: the rows do not split).
int split_ctas_for(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols,
                   const int (&clusters)[kSplitSizes]);

// CTAs a row of a kClusterRows plan for num_rows rows of up to num_cols keys
// when the device holds clusters[i] clusters of 2 << i CTAs of the
// cluster-resident kernel at once: the pinned count, else the smallest size
// whose parts hold the rows when the engine is pinned, else
// cluster_resident_size's (0: not this kernel).
int cluster_ctas_for(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols,
                     const int (&clusters)[kSplitSizes]);

}  // namespace dsa::selection::topk
