// The paged indexer's plan (plan.h), and paged_workspace_size (decode.h),
// its total.
#include "decode/plan.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "common/workspace.h"
#include "decode/decode.h"
#include "scoring/tile.h"

namespace dsa::decode {
namespace {

// The scores buffer: rows are scored batch by batch into at most this many
// bytes (at least one request), as the prefill operator's unfused route does.
constexpr std::size_t kScoresBytes = std::size_t{512} << 20;

// The prepare and map kernels: a thread an item, in at most kMaxItemBlocks
// blocks (they loop over the rest).
constexpr std::int64_t kItemThreads = 256;
constexpr std::int64_t kMaxItemBlocks = 4096;

LaunchGrid item_grid(std::int64_t items) {
  return {static_cast<unsigned>(std::clamp<std::int64_t>((items + kItemThreads - 1) / kItemThreads, 1, kMaxItemBlocks)),
          kItemThreads, 0};
}

PagedWorkspace layout(const PagedIndexerTopkParams& p, const PagedPlan& plan) {
  const auto rows = static_cast<std::size_t>(p.batch * plan.rows_per_request);
  const auto batch_rows = static_cast<std::size_t>(plan.batches.per_batch * plan.rows_per_request);
  const auto K = static_cast<std::size_t>(p.options.k);
  WorkspaceLayout pieces;
  PagedWorkspace w;
  const std::size_t range_rows = plan.ranges_from_lengths ? 0 : rows;
  w.ks = pieces.take(range_rows * sizeof(std::int32_t));
  w.ke = pieces.take(range_rows * sizeof(std::int32_t));
  w.w = pieces.take(plan.padded ? rows * static_cast<std::size_t>(p.num_heads) * sizeof(float) : 0);
  // The streaming selection stores no score; the bar selection's short
  // rows store theirs over their own candidate areas.
  const std::size_t score_rows = plan.stream_select || plan.bar_select ? 0 : batch_rows;
  w.scores = pieces.take(score_rows * static_cast<std::size_t>(plan.score_stride) * sizeof(float));
  w.indices = pieces.take(plan.mapped ? batch_rows * K * sizeof(std::int32_t) : 0);
  w.values = pieces.take(plan.mapped && p.values != nullptr ? batch_rows * K * sizeof(float) : 0);
  const std::size_t select_rows = plan.fused_select ? batch_rows : 0;
  w.select_state = pieces.take(select_rows * kSelectStateWords * sizeof(std::uint32_t));
  w.candidates = pieces.take(select_rows * static_cast<std::size_t>(plan.select_capacity) * sizeof(std::uint64_t));
  const std::size_t stream_rows = plan.stream_select ? batch_rows : 0;
  w.stream_state = pieces.take(stream_rows * kStreamStateWords * sizeof(std::uint32_t));
  w.stream_list =
      pieces.take(stream_rows * static_cast<std::size_t>(plan.stream_list_capacity) * sizeof(std::uint64_t));
  const std::size_t bar_rows = plan.bar_select ? batch_rows : 0;
  w.bar_state = pieces.take(bar_rows * kBarStateWords * sizeof(std::uint32_t));
  w.bar_flags = pieces.take(bar_rows * sizeof(std::uint32_t));
  w.bar_candidates = pieces.take(bar_rows * static_cast<std::size_t>(plan.bar_capacity) * sizeof(std::uint64_t));
  w.total = pieces.total();
  return w;
}

}  // namespace

LaunchGrid PagedPlan::map_grid(std::int64_t requests) const { return item_grid(requests * map_items_per_request); }

// The fused route launches the scoring kernel with blocks of one query (64
// columns at H = 64), so a request's next_n rows are next_n blocks of the
// launch and each launch row its own histogram row; unpadded rows (a power
// of two next_n) are the output's rows.
bool fused_select_possible(const PagedIndexerTopkParams& p, const PagedPlan& plan) {
  const std::int64_t n = p.max_context();
  return !plan.padded && p.num_heads == 64 && p.options.ties == TieBreak::kAny && !p.options.sorted &&
         !p.physical_slots && n > p.options.k && (n + kSelectPartKeys - 1) / kSelectPartKeys <= kSelectMaxParts;
}

bool stream_select_possible(const PagedIndexerTopkParams& p, const PagedPlan& plan) {
  return plan.ranges_from_lengths && p.num_heads == 64 && plan.block_columns == 64 &&
         p.options.ties == TieBreak::kAny && !p.options.sorted && !p.physical_slots && p.options.k <= kStreamMaxK;
}

bool bar_select_possible(const PagedIndexerTopkParams& p, const PagedPlan& plan) {
  return plan.ranges_from_lengths && p.num_heads == 64 && plan.block_columns == 64 && !p.physical_slots;
}

PagedPlan make_plan(const PagedIndexerTopkParams& p, const PagedHooks& hooks) {
  PagedPlan plan;
  if (p.num_rows() == 0) return plan;
  const int tokens = static_cast<int>(std::bit_ceil(static_cast<unsigned>(p.next_n)));
  plan.block_columns = std::clamp(p.num_heads * tokens, 64, scoring::kTileCols);
  plan.rows_per_request = std::max(tokens, plan.block_columns / p.num_heads);
  // Both powers of two (block_size validated).
  plan.rows_per_request_shift = std::countr_zero(static_cast<unsigned>(plan.rows_per_request));
  plan.block_shift = std::countr_zero(static_cast<unsigned>(p.block_size));
  plan.max_row_length = p.num_blocks > 0 ? static_cast<std::int32_t>(p.max_context()) : 0;
  plan.score_stride = scoring::score_row_stride(p.max_context());
  plan.padded = plan.rows_per_request != p.next_n;
  plan.mapped = plan.padded || p.physical_slots;
  plan.ranges_from_lengths = p.next_n == 1 && !plan.padded && p.num_blocks > 0 && p.batch <= kZeroStartRows;
  // Requests a batch: as many as kScoresBytes holds at `request_bytes` each (at least one).
  const auto batches_of = [&](std::size_t request_bytes) {
    return Batches{p.batch, std::clamp<std::int64_t>(static_cast<std::int64_t>(kScoresBytes / request_bytes), 1,
                                                     std::max<std::int64_t>(p.batch, 1))};
  };
  plan.batches =
      batches_of(static_cast<std::size_t>(plan.rows_per_request * plan.score_stride) * sizeof(float));
  const std::int64_t n = p.max_context();
  const std::int64_t parts = (n + kSelectPartKeys - 1) / kSelectPartKeys;
  // The speed rule is measured on one-token requests only (more tokens:
  // pinned only).
  const bool faster = plan.ranges_from_lengths && n >= kFusedSelectMinKeys &&
                      plan.batches.per_batch * parts <= kFusedSelectMaxCtas;
  using Route = PagedHooks::Route;
  plan.fused_select = fused_select_possible(p, plan) &&
                      (hooks.route == Route::kFusedSelect || (hooks.route == Route::kByShape && faster));
  if (plan.fused_select) {
    plan.select_parts = parts;
    plan.select_cluster = parts <= kSelectClusterParts;
    // The K-th key's bin holds ~1 % of a model-like row; an eighth of the
    // row leaves room for far more before the slow path.
    plan.select_capacity = std::min<std::int64_t>(n, std::max<std::int64_t>(n / 8, 4096));
  }
  plan.stream_select = !plan.fused_select && hooks.route == Route::kStreamSelect && stream_select_possible(p, plan);
  // The bar selection's areas hold a whole row (an entry a key: no row
  // outruns its area, so nothing is ever repaired), and its batches are as
  // many requests as kScoresBytes holds such areas.
  const std::int64_t bar_capacity = std::max<std::int64_t>(n, 1);
  const Batches bar_batches = batches_of(static_cast<std::size_t>(bar_capacity) * sizeof(std::uint64_t));
  const bool bar_faster = n >= kBarSelectMinKeys && bar_batches.per_batch >= kBarSelectMinRows;
  plan.bar_select = !plan.fused_select && bar_select_possible(p, plan) &&
                    (hooks.route == Route::kBarSelect || (hooks.route == Route::kByShape && bar_faster));
  if (plan.bar_select) {
    const std::int64_t stored_below = hooks.bar_stored_below >= 0 ? hooks.bar_stored_below : kBarStoredBelowKeys;
    plan.bar_stored_below = std::min<std::int64_t>(stored_below, std::numeric_limits<std::int32_t>::max());
    plan.bar_capacity = bar_capacity;
    plan.batches = bar_batches;
  }
  if (plan.stream_select) {
    // No scores buffer: the batches are bounded by the rows' lists instead.
    plan.stream_list_capacity = std::max<std::int64_t>(n, 1);
    plan.batches = batches_of(static_cast<std::size_t>(plan.stream_list_capacity) * sizeof(std::uint64_t));
  }
  const std::int64_t launch_rows = p.batch * plan.rows_per_request;
  plan.prepare = item_grid(plan.padded ? launch_rows * p.num_heads : launch_rows);
  plan.map_items_per_request = static_cast<std::int64_t>(p.next_n) * p.options.k;
  plan.workspace = layout(p, plan);
  return plan;
}

std::size_t paged_workspace_size(const PagedIndexerTopkParams& params, const PagedHooks& hooks) {
  return make_plan(params, hooks).workspace.total;
}

}  // namespace dsa::decode
