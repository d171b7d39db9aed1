// The fused operator's plan (plan.h), and workspace_size (fused.h), its total.
#include "fused/plan.h"

#include <algorithm>

#include "common/workspace.h"
#include "fused/config.h"
#include "scoring/tile.h"

namespace dsa::fused {
namespace {

// The bounded scores buffer of the repair path and the unfused route: rows
// are scored batch by batch into at most this many bytes (at least one
// row). Each batch pays a scoring tail and a partial last wave of the
// top-k: 512 MB measured 1.2-2.1 % faster than 256 MB at 4096 x 32K and
// 64K (one batch instead of two, two instead of four; docs/perf-log.md,
// F22, F27).
constexpr std::size_t kScoresBufferBytes = std::size_t{512} << 20;
// unfused_by_shape's "every row fits one batch" past kUnfusedMaxKeys keys
// is measured against this size, not the buffer's: the unfused route
// measures faster for rows whose scores fit 256 MB (docs/perf-log.md, F18)
// and slower at 4096 x 256K (F20).
constexpr std::size_t kSingleBatchRouteBytes = std::size_t{256} << 20;

// Threads a block of the one-thread-per-item kernels (the sample gathering,
// the unfused route's trace), and the most blocks the sample gathering
// takes (it loops over the rest).
constexpr std::int64_t kItemThreads = 256;
constexpr std::int64_t kMaxSampleBlocks = 65535;

// The rows `bytes` of scores hold.
std::int64_t rows_in(std::int64_t num_keys, std::size_t bytes) {
  const auto row_bytes = static_cast<std::size_t>(scoring::score_row_stride(num_keys)) * sizeof(float);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / row_bytes));
}

SamplePlan sample_plan(std::int64_t num_keys) {
  SamplePlan plan;
  if (num_keys <= 0) return plan;
  const std::int64_t target =
      std::clamp<std::int64_t>(num_keys / 32, std::min<std::int64_t>(num_keys, kMinSampledKeys), kMaxSampledKeys);
  plan.step = (num_keys + target - 1) / target;
  plan.offset = plan.step / 2;
  plan.count = (num_keys - plan.offset + plan.step - 1) / plan.step;
  return plan;
}

FusedRoute route(const IndexerTopkParams& p, const FusedHooks& hooks) {
  if (hooks.mode == FusedMode::kMathOnly) return FusedRoute::kMathOnly;
  using Route = FusedHooks::Route;
  const bool fused = hooks.route == Route::kFused ||
                     (hooks.route == Route::kByShape &&
                      (hooks.force_threshold || !unfused_by_shape(p.num_queries, p.num_keys)));
  return fused ? FusedRoute::kFused : FusedRoute::kUnfused;
}

// The per-row pieces of the fused stages take rows_with_stages rows (0 on
// the other routes), the scores buffer buffer_rows rows of score_stride
// floats.
FusedWorkspace layout(const IndexerTopkParams& p, std::int64_t rows_with_stages, const SamplePlan& samples,
                      std::int64_t buffer_rows, std::int64_t score_stride) {
  const auto T = static_cast<std::size_t>(rows_with_stages);
  const auto S = static_cast<std::size_t>(samples.count);
  const auto capacity = static_cast<std::size_t>(candidate_capacity(p.options.k));
  WorkspaceLayout pieces;
  FusedWorkspace w;
  w.sample_keys = pieces.take(S * kHeadDim);
  w.sample_scale = pieces.take(S * sizeof(float));
  w.sample_ks = pieces.take(T * sizeof(std::int32_t));
  w.sample_ke = pieces.take(T * sizeof(std::int32_t));
  w.sample_scores = pieces.take(T * S * sizeof(float));
  w.tau = pieces.take(T * sizeof(std::uint32_t));
  w.count = pieces.take(T * sizeof(std::uint32_t));
  w.unstaged = pieces.take(T * sizeof(std::uint32_t));
  w.flags = pieces.take(T * sizeof(std::uint32_t));
  w.candidates = pieces.take(T * capacity * sizeof(std::uint64_t));
  w.scores = pieces.take(static_cast<std::size_t>(buffer_rows * score_stride) * sizeof(float));
  w.checksum = pieces.take(sizeof(std::uint32_t));
  w.total = pieces.total();
  return w;
}

unsigned blocks_for(std::int64_t items) { return static_cast<unsigned>((items + kItemThreads - 1) / kItemThreads); }

}  // namespace

bool unfused_by_shape(std::int64_t num_queries, std::int64_t num_keys) {
  return num_keys <= kUnfusedMaxKeys || num_queries <= rows_in(num_keys, kSingleBatchRouteBytes);
}

FusedPlan make_plan(const IndexerTopkParams& p, const DeviceLimits& limits, const FusedHooks& hooks) {
  FusedPlan plan;
  plan.route = route(p, hooks);
  const std::int64_t T = p.num_queries;
  if (T == 0) return plan;
  const int K = p.options.k;
  const bool fused = plan.route == FusedRoute::kFused;
  const SamplePlan samples = sample_plan(fused ? p.num_keys : 0);
  const std::int64_t buffer_rows = std::min(rows_in(p.num_keys, kScoresBufferBytes), T);
  const std::int64_t score_stride = scoring::score_row_stride(p.num_keys);
  plan.workspace = layout(p, fused ? T : 0, samples, buffer_rows, score_stride);

  switch (plan.route) {
    case FusedRoute::kMathOnly:
      return plan;
    case FusedRoute::kUnfused: {
      plan.unfused_trace = {blocks_for(T), kItemThreads, 0};
      const std::int64_t cap = hooks.unfused_batch_rows;
      plan.score_and_select = {{T, cap > 0 ? std::min(cap, buffer_rows) : buffer_rows}, score_stride};
      return plan;
    }
    case FusedRoute::kFused:
      break;
  }

  plan.sample.samples = samples;
  const std::int64_t sample_items = std::max(samples.count, T);
  plan.sample.prepare = {static_cast<unsigned>(std::min<std::int64_t>(blocks_for(sample_items), kMaxSampleBlocks)),
                         kItemThreads, 0};
  plan.sample.threshold = {static_cast<unsigned>(T), kThresholdThreads,
                           static_cast<int>(std::max<std::int64_t>(samples.count, 1) * sizeof(std::uint32_t))};
  plan.sample.threshold_smem_limit = static_cast<int>(kMaxSampledKeys * sizeof(std::uint32_t));

  plan.filter = {static_cast<std::uint32_t>(candidate_capacity(K)), static_cast<std::uint32_t>(K + K / 4)};

  using Width = FusedHooks::SelectWidth;
  const bool wide = hooks.select_width == Width::kByRows ? select_rows_are_few(T, limits.sm_count)
                                                         : hooks.select_width == Width::kWide;
  plan.select = {static_cast<unsigned>(T), wide ? wide_select_threads(K) : kSelectThreads};

  plan.score_and_select = {{T, buffer_rows}, score_stride};
  return plan;
}

std::size_t workspace_size(const IndexerTopkParams& params, const FusedHooks& hooks) {
  return make_plan(params, DeviceLimits{}, hooks).workspace.total;
}

}  // namespace dsa::fused
