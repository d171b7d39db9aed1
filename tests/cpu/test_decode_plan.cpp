// The paged indexer's host-side plan (decode/plan.h): launch rows per
// request and block columns for every head count and next_n, the workspace
// layout, the batches of requests and the launch grids. Pure arithmetic, so
// it runs without a GPU.
#include "decode/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "decode/decode.h"

namespace dsa::decode {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

PagedIndexerTopkParams shape(std::int64_t batch, int next_n, int heads, std::int64_t blocks_per_seq,
                             int block_size = 64, int K = 2048) {
  PagedIndexerTopkParams p{};
  p.batch = batch;
  p.next_n = next_n;
  p.num_heads = heads;
  p.block_size = block_size;
  p.max_blocks_per_seq = blocks_per_seq;
  p.num_blocks = batch * blocks_per_seq;
  p.options.k = K;
  return p;
}

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// A scoring block holds H x (next_n rounded up to a power of two) columns,
// 64 to 256; a request's rows pad to a power of two of launch rows that
// fills whole blocks, so no block spans two requests.
TEST(DecodePlan, BlockColumnsAndRowsPerRequest) {
  struct Want {
    int heads, next_n, block_columns, rows_per_request;
  };
  const Want table[] = {
      {64, 1, 64, 1},  {64, 2, 128, 2}, {64, 3, 256, 4}, {64, 4, 256, 4}, {64, 5, 256, 8}, {64, 6, 256, 8},
      {64, 7, 256, 8}, {64, 8, 256, 8}, {32, 1, 64, 2},  {32, 2, 64, 2},  {32, 3, 128, 4}, {32, 4, 128, 4},
      {32, 5, 256, 8}, {32, 6, 256, 8}, {32, 7, 256, 8}, {32, 8, 256, 8},
  };
  static_assert(std::size(table) == std::size(kSupportedHeads) * kMaxNextN, "every H x next_n");
  for (const Want& w : table) {
    const PagedPlan plan = make_plan(shape(3, w.next_n, w.heads, 16));
    EXPECT_EQ(plan.block_columns, w.block_columns) << "H " << w.heads << ", next_n " << w.next_n;
    EXPECT_EQ(plan.rows_per_request, w.rows_per_request) << "H " << w.heads << ", next_n " << w.next_n;
    EXPECT_EQ(std::int64_t{1} << plan.rows_per_request_shift, plan.rows_per_request);
    EXPECT_GE(plan.rows_per_request, w.next_n);
    EXPECT_EQ(plan.rows_per_request * w.heads % plan.block_columns, 0) << "a block spans two requests";
    EXPECT_EQ(plan.padded, plan.rows_per_request != w.next_n);
    EXPECT_EQ(plan.mapped, plan.padded);  // positions asked for: mapped only to drop padding rows
  }
  PagedIndexerTopkParams slots = shape(3, 1, 64, 16);
  slots.physical_slots = true;
  EXPECT_TRUE(make_plan(slots).mapped);
  EXPECT_FALSE(make_plan(slots).padded);
}

// The block size's shift, and the longest row the prepare kernel lets a
// length reach: the cache's positions, 0 when it has no blocks.
TEST(DecodePlan, ShiftsAndRowLengthLimit) {
  for (int block_size : {16, 32, 64, 128}) {
    const PagedPlan plan = make_plan(shape(2, 1, 64, 10, block_size));
    EXPECT_EQ(1 << plan.block_shift, block_size);
    EXPECT_EQ(plan.max_row_length, 10 * block_size);
    EXPECT_EQ(plan.score_stride, 10 * block_size);
  }
  PagedIndexerTopkParams empty_cache = shape(2, 1, 64, 10);
  empty_cache.num_blocks = 0;
  EXPECT_EQ(make_plan(empty_cache).max_row_length, 0);
  EXPECT_EQ(make_plan(shape(2, 1, 64, 0)).score_stride, 4);  // rows of no keys: one float4
}

// The workspace: the launch rows' ranges, their padded weights (padded
// calls only), the scores buffer of a batch's rows, and the top-k's output
// for the map kernel (mapped calls only; values when asked for), end to end.
TEST(DecodePlan, WorkspaceIsItsPiecesEndToEnd) {
  float value = 0;
  for (int heads : {32, 64}) {
    for (int next_n = 1; next_n <= kMaxNextN; ++next_n) {
      for (std::int64_t batch : {1, 2, 7, 64, 3000}) {
        for (std::int64_t blocks : {0, 1, 100, 2048}) {
          for (int K : {512, 2048}) {
            for (bool slots : {false, true}) {
              for (float* values : {static_cast<float*>(nullptr), &value}) {
                PagedIndexerTopkParams p = shape(batch, next_n, heads, blocks, 64, K);
                p.physical_slots = slots;
                p.values = values;
                const PagedPlan plan = make_plan(p);
                const PagedWorkspace& w = plan.workspace;
                const auto rows = static_cast<std::size_t>(batch * plan.rows_per_request);
                const auto batch_rows = static_cast<std::size_t>(plan.batches.per_batch * plan.rows_per_request);
                const auto stride = static_cast<std::size_t>(plan.score_stride);
                const std::size_t k = K;
                const std::size_t range_rows = plan.ranges_from_lengths ? 0 : rows;
                const std::size_t pieces[] = {
                    range_rows * 4,                                           // ks
                    range_rows * 4,                                           // ke
                    plan.padded ? rows * heads * 4 : 0,                       // padded weights
                    plan.bar_select ? 0 : batch_rows * stride * 4,            // scores
                    plan.mapped ? batch_rows * k * 4 : 0,                     // indices
                    plan.mapped && values != nullptr ? batch_rows * k * 4 : 0,  // values
                    plan.fused_select ? batch_rows * kSelectStateWords * 4 : 0,  // histograms and counters
                    plan.fused_select ? batch_rows * static_cast<std::size_t>(plan.select_capacity) * 8 : 0,
                    0,  // the streaming selection's counters (pinned only)
                    0,  // and lists
                    plan.bar_select ? batch_rows * kBarStateWords * 4 : 0,  // the bar selection's state
                    plan.bar_select ? batch_rows * 4 : 0,                   // flags
                    plan.bar_select ? batch_rows * static_cast<std::size_t>(plan.bar_capacity) * 8 : 0,  // candidates
                };
                const std::size_t offsets[] = {w.ks,           w.ke,          w.w,         w.scores,
                                               w.indices,      w.values,      w.select_state, w.candidates,
                                               w.stream_state, w.stream_list, w.bar_state, w.bar_flags,
                                               w.bar_candidates, w.total};
                std::size_t at = 0;
                for (std::size_t i = 0; i < std::size(pieces); ++i) {
                  EXPECT_EQ(offsets[i], at) << "piece " << i << ": H " << heads << ", next_n " << next_n << ", B "
                                            << batch << ", " << blocks << " blocks";
                  at += aligned(pieces[i]);
                }
                EXPECT_EQ(w.total, at);
                EXPECT_EQ(paged_workspace_size(p), w.total);
              }
            }
          }
        }
      }
    }
  }
}

// Batches of requests: every request exactly once, in order, each batch's
// scores within 512 MB unless one request alone is more.
TEST(DecodePlan, BatchesCoverEveryRequestOnce) {
  for (int next_n : {1, 2, 4, 8}) {
    for (std::int64_t batch : {1, 2, 3, 64, 1000, 70000}) {
      for (std::int64_t blocks : {1, 64, 2048, 16384}) {
        const PagedPlan plan = make_plan(shape(batch, next_n, 64, blocks));
        // The bar selection's batches count its rows' areas, not scores.
        const PagedWorkspace& w = plan.workspace;
        const auto request_bytes =
            plan.bar_select ? static_cast<std::size_t>(plan.bar_capacity) * sizeof(std::uint64_t)
                            : static_cast<std::size_t>(plan.rows_per_request * plan.score_stride) * sizeof(float);
        const std::size_t buffer = plan.bar_select ? w.total - w.bar_candidates : w.indices - w.scores;
        std::int64_t next = 0;
        for (std::int64_t b = 0; b < plan.batches.count(); ++b) {
          const Batch batch_of = plan.batches[b];
          ASSERT_EQ(batch_of.first, next) << "batch " << b;
          ASSERT_GE(batch_of.size, 1);
          if (batch_of.size > 1) {
            EXPECT_LE(batch_of.size * request_bytes, 512 * kMiB);
          }
          EXPECT_LE(static_cast<std::size_t>(batch_of.size) * request_bytes, buffer)
              << "batch " << b << " passes the scores buffer";
          next += batch_of.size;
        }
        EXPECT_EQ(next, batch) << "next_n " << next_n << ", " << blocks << " blocks";
      }
    }
  }
  // 1M-key requests of one token: 128 of them fill 512 MB.
  const Batches big = make_plan(shape(1000, 1, 64, 16384)).batches;
  EXPECT_EQ(big.per_batch, 128);
  EXPECT_EQ(big.count(), 8);
}

// A thread an item, 256 a block, 1 to 4096 blocks: the prepare kernel's
// items are the launch rows (rows x heads when padded), the map kernel's a
// batch's next_n x K outputs.
TEST(DecodePlan, LaunchGrids) {
  const PagedPlan unpadded = make_plan(shape(1000, 1, 64, 16));
  EXPECT_EQ(unpadded.prepare.blocks, 4u);  // 1000 rows
  EXPECT_EQ(unpadded.prepare.threads, 256u);
  const PagedPlan padded = make_plan(shape(1000, 3, 64, 16));
  EXPECT_EQ(padded.prepare.blocks, 1000u);  // 4000 launch rows x 64 heads
  EXPECT_EQ(make_plan(shape(100000, 1, 32, 16)).prepare.blocks, 4096u);  // capped
  EXPECT_EQ(unpadded.map_grid(1).blocks, 8u);  // 2048 outputs
  EXPECT_EQ(unpadded.map_grid(7).blocks, 56u);
  EXPECT_EQ(unpadded.map_grid(1000).blocks, 4096u);
  EXPECT_EQ(unpadded.map_grid(1).threads, 256u);
}

// A call with no rows plans no launch and no workspace.
// One token a request, unpadded (H = 64), a cache with blocks: the kernels
// read the lengths as the rows' ends, no prepare kernel runs and no range
// takes workspace; every other shape prepares its ranges.
TEST(DecodePlan, LengthsAsRangesForOneTokenRequests) {
  EXPECT_TRUE(make_plan(shape(1, 1, 64, 16)).ranges_from_lengths);
  EXPECT_TRUE(make_plan(shape(kZeroStartRows, 1, 64, 16)).ranges_from_lengths);
  PagedIndexerTopkParams slots = shape(7, 1, 64, 16);
  slots.physical_slots = true;  // mapped, not padded
  EXPECT_TRUE(make_plan(slots).ranges_from_lengths);
  PagedIndexerTopkParams per_token = shape(7, 1, 64, 16);
  per_token.lens_per_token = true;  // [B, 1]: the same layout as [B]
  EXPECT_TRUE(make_plan(per_token).ranges_from_lengths);
  EXPECT_FALSE(make_plan(shape(kZeroStartRows + 1, 1, 64, 16)).ranges_from_lengths);  // more rows than zeros
  EXPECT_FALSE(make_plan(shape(1, 1, 32, 16)).ranges_from_lengths);  // H = 32 pads a token to 2 rows
  for (int next_n = 2; next_n <= kMaxNextN; ++next_n) {
    EXPECT_FALSE(make_plan(shape(1, next_n, 64, 16)).ranges_from_lengths) << next_n;  // ends differ by token
  }
  PagedIndexerTopkParams no_blocks = shape(2, 1, 64, 16);
  no_blocks.num_blocks = 0;  // rows clamp to no keys, which only the prepare kernel knows
  EXPECT_FALSE(make_plan(no_blocks).ranges_from_lengths);
  const PagedWorkspace& w = make_plan(shape(5, 1, 64, 16)).workspace;
  EXPECT_EQ(w.ks, 0u);
  EXPECT_EQ(w.ke, 0u);
  EXPECT_EQ(w.scores, 0u);  // the scores buffer is the first piece
}

// The fused selection: one-token requests read as ranges, any-tie unsorted
// positions, contexts of 64K keys and more, at most kFusedSelectMaxCtas
// select CTAs.
TEST(DecodePlan, FusedSelectForFewLongOneTokenRequests) {
  const PagedPlan one = make_plan(shape(1, 1, 64, 2048));  // 1 x 128K
  EXPECT_TRUE(one.fused_select);
  EXPECT_EQ(one.select_parts, 16);  // 8K keys a CTA
  EXPECT_EQ(one.select_capacity, 131072 / 8);
  EXPECT_TRUE(one.select_cluster);  // 16 parts: a cluster a row
  EXPECT_EQ(make_plan(shape(1, 1, 64, 16384)).select_parts, kSelectMaxParts);  // 1M keys
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 16384)).select_cluster);               // 128 parts: the counters
  EXPECT_TRUE(make_plan(shape(2, 1, 64, 16384)).fused_select);                 // 256 CTAs
  EXPECT_FALSE(make_plan(shape(3, 1, 64, 16384)).fused_select);
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 16385)).fused_select);  // a part would hold more than kSelectPartKeys
  EXPECT_TRUE(make_plan(shape(16, 1, 64, 2048)).fused_select);   // 16 x 128K: 256 CTAs
  EXPECT_FALSE(make_plan(shape(17, 1, 64, 2048)).fused_select);
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 1023)).fused_select);  // shorter than kFusedSelectMinKeys
  EXPECT_TRUE(make_plan(shape(1, 1, 64, 1024)).fused_select);   // 64K keys
  EXPECT_TRUE(make_plan(shape(1, 1, 64, 1024)).select_cluster);  // 8 parts
  EXPECT_TRUE(make_plan(shape(32, 1, 64, 1024)).fused_select);   // 32 x 64K: 256 CTAs
  EXPECT_FALSE(make_plan(shape(33, 1, 64, 1024)).fused_select);
  EXPECT_EQ(make_plan(shape(1, 1, 64, 2049)).select_parts, 17);
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 2049)).select_cluster);
  EXPECT_FALSE(make_plan(shape(1, 2, 64, 2048)).fused_select);
  EXPECT_FALSE(make_plan(shape(1, 1, 32, 2048)).fused_select);
  for (int variant = 0; variant < 3; ++variant) {
    PagedIndexerTopkParams p = shape(4, 1, 64, 2048);
    if (variant == 0) p.options.ties = TieBreak::kSmallestIndex;
    if (variant == 1) p.options.sorted = true;
    if (variant == 2) p.physical_slots = true;
    EXPECT_FALSE(make_plan(p).fused_select) << variant;
  }
}

// The route pinned by hooks: the fused selection wherever the select kernel
// can take the call (unpadded rows, H = 64, any ties, unsorted
// positions, a context past K of at most kSelectMaxParts parts), whatever
// the speed rule says; the unfused pipeline always.
TEST(DecodePlan, PinnedRoutes) {
  const PagedHooks fused{PagedHooks::Route::kFusedSelect};
  const PagedHooks unfused{PagedHooks::Route::kUnfused};
  const PagedPlan by_shape = make_plan(shape(64, 1, 64, 128));  // 64 x 8K
  const PagedPlan pinned = make_plan(shape(64, 1, 64, 128), fused);
  EXPECT_FALSE(by_shape.fused_select);
  EXPECT_TRUE(pinned.fused_select);
  EXPECT_EQ(pinned.select_parts, 1);
  EXPECT_EQ(pinned.select_capacity, 4096);
  EXPECT_EQ(pinned.workspace.total, by_shape.workspace.total + aligned(64 * kSelectStateWords * sizeof(std::uint32_t)) +
                                        aligned(64 * 4096 * sizeof(std::uint64_t)));
  EXPECT_EQ(paged_workspace_size(shape(64, 1, 64, 128), fused), pinned.workspace.total);
  EXPECT_TRUE(make_plan(shape(32, 1, 64, 2048), fused).fused_select);  // 512 select CTAs
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 2048), unfused).fused_select);
  EXPECT_TRUE(make_plan(shape(1, 1, 64, 2048)).fused_select);
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 32), fused).fused_select);  // 2048 keys: not past K
  EXPECT_TRUE(make_plan(shape(1, 1, 64, 33), fused).fused_select);
  EXPECT_FALSE(make_plan(shape(1, 1, 64, 16385), fused).fused_select);  // past kSelectMaxParts parts
  // More tokens a request: unpadded rows (a power of two next_n) when pinned,
  // never by shape.
  for (int next_n : {2, 4, 8}) {
    const PagedPlan many = make_plan(shape(2, next_n, 64, 2048), fused);
    EXPECT_TRUE(many.fused_select) << next_n;
    EXPECT_FALSE(many.ranges_from_lengths) << next_n;  // the prepare kernel's ranges
    EXPECT_EQ(many.rows_per_request, next_n);
    EXPECT_EQ(many.select_parts, 16);
    EXPECT_FALSE(make_plan(shape(2, next_n, 64, 2048)).fused_select) << next_n;
  }
  EXPECT_FALSE(make_plan(shape(2, 3, 64, 2048), fused).fused_select);  // padded to 4 rows a request
  EXPECT_FALSE(make_plan(shape(2, 2, 32, 2048), fused).fused_select);
  EXPECT_FALSE(make_plan(shape(1, 1, 32, 2048), fused).fused_select);
  PagedIndexerTopkParams sorted = shape(1, 1, 64, 2048);
  sorted.options.sorted = true;
  EXPECT_FALSE(make_plan(sorted, fused).fused_select);
}

// The streaming selection, pinned only: one token a request read as its
// range, H = 64, any ties, unsorted positions, at any context (short rows
// too); no scores buffer, a row's counters and a list as long as its
// context, batches bounded by the lists.
TEST(DecodePlan, StreamSelectPinned) {
  const PagedHooks stream{PagedHooks::Route::kStreamSelect};
  EXPECT_FALSE(make_plan(shape(256, 1, 64, 2048)).stream_select);
  for (std::int64_t blocks : {1, 32, 2048, 16384}) {
    const PagedPlan plan = make_plan(shape(256, 1, 64, blocks), stream);
    EXPECT_TRUE(plan.stream_select) << blocks;
    EXPECT_FALSE(plan.fused_select) << blocks;
    EXPECT_EQ(plan.stream_list_capacity, blocks * 64);
    const PagedWorkspace& w = plan.workspace;
    const auto rows = static_cast<std::size_t>(plan.batches.per_batch);
    EXPECT_EQ(plan.batches.per_batch, std::min<std::int64_t>(256, (std::int64_t{512} << 20) / (blocks * 64 * 8)));
    EXPECT_EQ(w.stream_list - w.stream_state, aligned(rows * kStreamStateWords * sizeof(std::uint32_t)));
    EXPECT_EQ(w.total - w.stream_list, aligned(rows * static_cast<std::size_t>(blocks * 64) * sizeof(std::uint64_t)));
    EXPECT_EQ(w.total, w.stream_list + aligned(rows * static_cast<std::size_t>(blocks * 64) * sizeof(std::uint64_t)));
    EXPECT_EQ(paged_workspace_size(shape(256, 1, 64, blocks), stream), w.total);
  }
  EXPECT_FALSE(make_plan(shape(4, 2, 64, 2048), stream).stream_select);  // two tokens a request
  EXPECT_FALSE(make_plan(shape(4, 1, 32, 2048), stream).stream_select);  // H = 32
  PagedIndexerTopkParams det = shape(4, 1, 64, 2048);
  det.options.ties = TieBreak::kSmallestIndex;
  EXPECT_FALSE(make_plan(det, stream).stream_select);
  PagedIndexerTopkParams slots = shape(4, 1, 64, 2048);
  slots.physical_slots = true;
  EXPECT_FALSE(make_plan(slots, stream).stream_select);
}

// The bar selection by shape: one-token requests of 64 heads reading their
// lengths as ranges, positions, at least kBarSelectMinRows rows a batch
// under a table of at least kBarSelectMinKeys keys, any tie rule, sorted
// or not.
TEST(DecodePlan, BarSelectByShape) {
  static_assert(kBarSelectMinKeys == 131072 && kBarSelectMinRows == 128);
  for (std::int64_t rows : {128, 256, 4096}) {
    for (std::int64_t blocks : {2048, 8192}) {
      PagedIndexerTopkParams p = shape(rows, 1, 64, blocks);
      EXPECT_TRUE(make_plan(p).bar_select) << rows << " x " << blocks;
      p.options.ties = TieBreak::kSmallestIndex;
      p.options.sorted = true;
      EXPECT_TRUE(make_plan(p).bar_select) << rows << " x " << blocks;
    }
  }
  EXPECT_FALSE(make_plan(shape(127, 1, 64, 2048)).bar_select);   // too few rows
  EXPECT_FALSE(make_plan(shape(256, 1, 64, 2047)).bar_select);   // a narrower table
  EXPECT_FALSE(make_plan(shape(4097, 1, 64, 2048)).bar_select);  // past the zero starts: ranges prepared
  EXPECT_FALSE(make_plan(shape(256, 2, 64, 2048)).bar_select);   // two tokens a request
  EXPECT_FALSE(make_plan(shape(256, 1, 32, 2048)).bar_select);   // H = 32
  PagedIndexerTopkParams slots = shape(256, 1, 64, 2048);
  slots.physical_slots = true;
  EXPECT_FALSE(make_plan(slots).bar_select);
  // Rows past kScoresBytes of areas (an entry, 8 bytes, a key) run in
  // batches: the rule counts a batch's. 128 areas of 512K keys fill it, 64
  // of 1M keys.
  const PagedPlan long_rows = make_plan(shape(200, 1, 64, 8192));
  EXPECT_EQ(long_rows.batches.per_batch, 128);
  EXPECT_EQ(long_rows.batches.count(), 2);
  EXPECT_TRUE(long_rows.bar_select);
  EXPECT_EQ(long_rows.bar_stored_below, kBarStoredBelowKeys);
  EXPECT_FALSE(make_plan(shape(256, 1, 64, 16384)).bar_select);
  EXPECT_FALSE(make_plan(shape(256, 1, 64, 2048), PagedHooks{PagedHooks::Route::kUnfused}).bar_select);
}

// The bar selection, pinned: one-token requests of 64 heads reading their
// lengths as ranges, any tie rule, sorted or not, positions, at any rows
// and table width; no scores buffer (short rows store theirs over their
// areas), then its state (kBarStateWords a row), flags and candidate areas
// (an entry for each key of the table), batched by the areas.
TEST(DecodePlan, BarSelectPinned) {
  const PagedHooks bar{PagedHooks::Route::kBarSelect};
  EXPECT_FALSE(make_plan(shape(32, 1, 64, 2048)).bar_select);
  EXPECT_TRUE(make_plan(shape(32, 1, 64, 2048), bar).bar_select);
  for (std::int64_t blocks : {1, 32, 2048, 16384}) {
    for (bool det : {false, true}) {
      PagedIndexerTopkParams p = shape(256, 1, 64, blocks);
      if (det) {
        p.options.ties = TieBreak::kSmallestIndex;
        p.options.sorted = true;
      }
      const PagedPlan plan = make_plan(p, bar);
      EXPECT_TRUE(plan.bar_select) << blocks;
      EXPECT_FALSE(plan.fused_select || plan.stream_select) << blocks;
      const std::int64_t n = blocks * 64;
      EXPECT_EQ(plan.bar_capacity, std::max<std::int64_t>(n, 1)) << blocks;
      const PagedWorkspace& w = plan.workspace;
      const auto rows = static_cast<std::size_t>(plan.batches.per_batch);
      EXPECT_EQ(plan.batches.per_batch,
                std::min<std::int64_t>(256, (std::int64_t{512} << 20) / (plan.bar_capacity * 8)))
          << blocks;
      EXPECT_EQ(w.bar_state, w.scores);  // no scores buffer
      EXPECT_EQ(w.bar_flags - w.bar_state, aligned(rows * kBarStateWords * sizeof(std::uint32_t)));
      EXPECT_EQ(w.bar_candidates - w.bar_flags, aligned(rows * sizeof(std::uint32_t)));
      EXPECT_EQ(w.total - w.bar_candidates,
                aligned(rows * static_cast<std::size_t>(plan.bar_capacity) * sizeof(std::uint64_t)));
      EXPECT_EQ(paged_workspace_size(p, bar), w.total);
    }
  }
  EXPECT_FALSE(make_plan(shape(4, 2, 64, 2048), bar).bar_select);  // two tokens a request
  EXPECT_FALSE(make_plan(shape(4, 1, 32, 2048), bar).bar_select);  // H = 32
  PagedIndexerTopkParams slots = shape(4, 1, 64, 2048);
  slots.physical_slots = true;
  EXPECT_FALSE(make_plan(slots, bar).bar_select);
}

// The bar selection's short rows store their scores: below
// kBarStoredBelowKeys keys (by shape too), or below the hooks' count when
// they set one (0: no row stores), clamped to the lengths' int32 range; 0
// off the route.
TEST(DecodePlan, BarSelectStoresShortRows) {
  static_assert(kBarStoredBelowKeys == 65536);
  const PagedHooks bar{PagedHooks::Route::kBarSelect};
  EXPECT_EQ(make_plan(shape(4, 1, 64, 2048), bar).bar_stored_below, kBarStoredBelowKeys);
  EXPECT_EQ(make_plan(shape(4, 1, 64, 2048), PagedHooks{PagedHooks::Route::kBarSelect, 0}).bar_stored_below, 0);
  EXPECT_EQ(make_plan(shape(4, 1, 64, 2048), PagedHooks{PagedHooks::Route::kBarSelect, 5000}).bar_stored_below, 5000);
  EXPECT_EQ(make_plan(shape(4, 1, 64, 2048), PagedHooks{PagedHooks::Route::kBarSelect, std::int64_t{1} << 40})
                .bar_stored_below,
            std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(make_plan(shape(32, 1, 64, 2048)).bar_stored_below, 0);  // by shape: not the bar route
}

TEST(DecodePlan, NoRowsPlanNothing) {
  const PagedPlan plan = make_plan(shape(0, 4, 64, 16));
  EXPECT_EQ(plan.workspace.total, 0u);
  EXPECT_EQ(plan.batches.count(), 0);
  EXPECT_EQ(plan.prepare.blocks, 0u);
  EXPECT_EQ(paged_workspace_size(shape(0, 4, 64, 16)), 0u);
}

}  // namespace
// merge_topk's rows run the cached kernel up to 160 KB of 64-bit keys
// (20480 entries), whatever the split into parts.
TEST(MergePlan, CachesRowsOfUpTo20480Entries) {
  EXPECT_EQ(kMergeCacheEntries, 20480);
  EXPECT_TRUE(merge_caches_entries(10, 2048));
  EXPECT_TRUE(merge_caches_entries(1, 20480));
  EXPECT_TRUE(merge_caches_entries(2, 10240));
  EXPECT_TRUE(merge_caches_entries(0, 1));
  EXPECT_FALSE(merge_caches_entries(10, 2049));
  EXPECT_FALSE(merge_caches_entries(11, 2048));
  EXPECT_FALSE(merge_caches_entries(1, 20481));
  EXPECT_FALSE(merge_caches_entries(2, 10241));
}

}  // namespace dsa::decode
