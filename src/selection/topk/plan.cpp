// The standalone top-k's plan (plan.h).
#include "selection/topk/plan.h"

#include <string>

namespace dsa::selection::topk {
namespace {

// A pinned engine whose rows are shorter than num_cols.
Status too_long(const std::string& what, std::int64_t max_len, std::int64_t num_cols) {
  return {StatusCode::kInvalidArgument, std::string("topk: the ") + what + " takes rows of at most " +
                                            std::to_string(max_len) + " keys (num_cols " + std::to_string(num_cols) +
                                            ")"};
}

// What the hooks pin that the shape or K cannot take.
Status check_pinned(int k, std::int64_t num_cols, TopkEngine engine, int split_ctas) {
  if (engine == TopkEngine::kResident && num_cols > kResidentMaxLen) {
    return too_long("resident kernel", kResidentMaxLen, num_cols);
  }
  if (engine == TopkEngine::kSampled64K && num_cols > LongRows64K::kMaxLen) {
    return too_long("64K sampled geometry", LongRows64K::kMaxLen, num_cols);
  }
  if (split_ctas != 0 && (split_ctas < 2 || split_ctas > kMaxSplit || (split_ctas & (split_ctas - 1)) != 0)) {
    return {StatusCode::kInvalidArgument,
            "topk: a row splits over 2, 4, 8 or 16 CTAs (split_ctas " + std::to_string(split_ctas) + ")"};
  }
  const bool wide_fits = k % WideRows::kThreads == 0;
  if ((engine == TopkEngine::kSampledWide || engine == TopkEngine::kSampledSplit) && !wide_fits) {
    return {StatusCode::kInvalidArgument, "topk: the wide sampled geometry needs K >= " +
                                              std::to_string(WideRows::kThreads) + " (K " + std::to_string(k) + ")"};
  }
  if (engine == TopkEngine::kClusterResident) {
    if (k % ClusterRows::kThreads != 0) {
      return {StatusCode::kInvalidArgument, "topk: the cluster-resident kernel needs K >= " +
                                                std::to_string(ClusterRows::kThreads) + " (K " + std::to_string(k) +
                                                ")"};
    }
    const int size = split_ctas != 0 ? split_ctas : kMaxSplit;
    if (cluster_part_keys(num_cols, size) > ClusterRows::kMaxPartKeys) {
      return too_long("cluster-resident kernel at " + std::to_string(size) + " CTAs a row",
                      size * ClusterRows::kMaxPartKeys - 3, num_cols);
    }
  }
  return Status::Ok();
}

// Whether some cluster size could hold a launch of num_rows rows of up to
// num_cols keys in the cluster-resident kernel with every row at once:
// cluster_resident_size's rule on a device whose clusters of each size tile
// its SMs (the occupancy, read at launch, decides among them:
// cluster_ctas_for).
bool cluster_may_hold(std::int64_t num_rows, std::int64_t num_cols, const DeviceLimits& limits) {
  int tiling[kSplitSizes];
  for (int i = 0; i < kSplitSizes; ++i) tiling[i] = limits.sm_count / (2 << i);
  return cluster_resident_size(num_rows, num_cols, tiling) != 0;
}

// Rows are at most num_cols long (known on the host without reading
// ks/ke). Up to kResidentMaxLen the row fits shared memory: the resident
// kernel, the geometry with the most rows per SM that holds it; longer rows
// of a launch of few rows fit a cluster's shared memory where some cluster
// size holds them all at once (cluster_may_hold; the occupancy decides at
// launch, and else the launch is the split or wide one below); other rows
// (or a pinned sampled engine) take the sampled kernel, at 1024 threads a
// row when the launch has at most one row per SM (then each CTA is alone on
// its SM and more threads keep more of the row in flight), each row split
// over a cluster of such CTAs when the rows are few and long enough
// (split_cluster_size), else with LongRows64K's smaller buffers up to 64K
// (more of the SM left to L1) and LongRows beyond.
TopkGeometry geometry(int k, std::int64_t num_rows, std::int64_t num_cols, TopkEngine engine,
                      const DeviceLimits& limits) {
  if (engine == TopkEngine::kClusterResident) return TopkGeometry::kClusterRows;
  const bool sampled = engine == TopkEngine::kSampled || engine == TopkEngine::kSampledWide ||
                       engine == TopkEngine::kSampled64K || engine == TopkEngine::kSampledSplit;
  if (!sampled && num_cols <= kResidentMaxLen) {
    return num_cols <= ResidentRows8K::kMaxLen ? TopkGeometry::kResident8K : TopkGeometry::kResident16K;
  }
  if (k % WideRows::kThreads == 0) {
    const bool few_rows = engine == TopkEngine::kAuto && num_rows <= limits.sm_count;
    if (few_rows && cluster_may_hold(num_rows, num_cols, limits)) return TopkGeometry::kClusterRows;
    if (engine == TopkEngine::kSampledSplit || (few_rows && rows_may_split(num_cols))) return TopkGeometry::kSplitRows;
    if (engine == TopkEngine::kSampledWide || few_rows) return TopkGeometry::kWideRows;
  }
  if (engine == TopkEngine::kSampled64K || (engine == TopkEngine::kAuto && num_cols <= LongRows64K::kMaxLen)) {
    return TopkGeometry::kLongRows64K;
  }
  return TopkGeometry::kLongRows;
}

// A launch with entry rows (TopkHooks::entries): the sampled kernel, whose
// candidate buffer and window select take an entry row as they take a
// scored row's candidates, at the automatic engine's threads (the wide
// CTAs for at most a row an SM), never split, clustered or resident (its
// scored rows are selected as the automatic engine would at that geometry).
TopkGeometry entry_geometry(int k, std::int64_t num_rows, const DeviceLimits& limits) {
  return k % WideRows::kThreads == 0 && num_rows <= limits.sm_count ? TopkGeometry::kWideRows
                                                                     : TopkGeometry::kLongRows;
}

template <class G>
void take_geometry(TopkPlan* plan) {
  plan->threads = G::kThreads;
  plan->min_ctas_per_sm = G::kMinCtasPerSm;
}

}  // namespace

Status make_plan(const TopkParams& params, const DeviceLimits& limits, const TopkHooks& hooks, TopkPlan* plan) {
  const int k = params.options.k;
  // Only the sampled kernel has a threshold to force: the automatic and
  // resident engines become the sampled one.
  TopkEngine engine = hooks.engine;
  if (hooks.force_threshold && engine != TopkEngine::kSampledWide && engine != TopkEngine::kSampled64K &&
      engine != TopkEngine::kSampledSplit) {
    engine = TopkEngine::kSampled;
  }
  const bool entries = hooks.entries.areas != nullptr;
  if (entries && (hooks.engine != TopkEngine::kAuto || hooks.force_threshold)) {
    return {StatusCode::kInvalidArgument, "topk: rows given as entries take the automatic engine, no forced threshold"};
  }
  if (const Status st = check_pinned(k, params.num_cols, engine, hooks.split_ctas); !st.ok()) return st;
  *plan = TopkPlan{};
  plan->entry_rows = entries;
  plan->geometry = entries ? entry_geometry(k, params.num_rows, limits)
                           : geometry(k, params.num_rows, params.num_cols, engine, limits);
  switch (plan->geometry) {
    case TopkGeometry::kResident8K: take_geometry<ResidentRows8K>(plan); break;
    case TopkGeometry::kResident16K: take_geometry<ResidentRows16K>(plan); break;
    case TopkGeometry::kClusterRows: take_geometry<ClusterRows>(plan); break;
    case TopkGeometry::kSplitRows:
    case TopkGeometry::kWideRows: take_geometry<WideRows>(plan); break;
    case TopkGeometry::kLongRows64K: take_geometry<LongRows64K>(plan); break;
    case TopkGeometry::kLongRows: take_geometry<LongRows>(plan); break;
  }
  plan->ctas_on_device = plan->min_ctas_per_sm * limits.sm_count;
  if (plan->geometry == TopkGeometry::kSplitRows || plan->geometry == TopkGeometry::kClusterRows) {
    plan->split_pinned = engine == TopkEngine::kSampledSplit || engine == TopkEngine::kClusterResident;
    plan->split_ctas = plan->split_pinned ? hooks.split_ctas : 0;
  }
  const bool resident = plan->geometry == TopkGeometry::kResident8K || plan->geometry == TopkGeometry::kResident16K;
  plan->programmatic = launch_programmatic(hooks.after_producer, resident, params.num_rows, plan->ctas_on_device);
  return Status::Ok();
}

int split_ctas_for(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols,
                   const int (&clusters)[kSplitSizes]) {
  const int ctas = plan.split_ctas != 0 ? plan.split_ctas : split_cluster_size(num_rows, num_cols, clusters);
  return plan.split_pinned ? std::max(ctas, 2) : ctas;
}

int cluster_ctas_for(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols,
                     const int (&clusters)[kSplitSizes]) {
  if (plan.split_ctas != 0) return plan.split_ctas;
  if (plan.split_pinned) {
    int size = 2;
    while (size < kMaxSplit && cluster_part_keys(num_cols, size) > ClusterRows::kMaxPartKeys) size *= 2;
    return size;
  }
  return cluster_resident_size(num_rows, num_cols, clusters);
}

}  // namespace dsa::selection::topk
