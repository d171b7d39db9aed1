// The fused operator's host-side plan (fused/plan.h): the route by shape,
// the workspace each route needs and its layout, the batches of the scores
// buffer and the stages' launch geometry. Pure arithmetic, so it runs
// without a GPU (the public indexer_topk_workspace_size validates device
// pointers first, which needs one).
#include "fused/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "fused/config.h"

namespace dsa::fused {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kChecksumBytes = 256;  // one word, in a 256-byte piece

IndexerTopkParams shape(std::int64_t T, std::int64_t N, int K = 2048) {
  IndexerTopkParams p{};
  p.num_queries = T;
  p.num_keys = N;
  p.num_heads = 64;
  p.options.k = K;
  return p;
}

DeviceLimits h200() {
  DeviceLimits limits;
  limits.sm_count = 132;
  limits.smem_per_sm = 233472;
  limits.reserved_per_block = 1024;
  limits.l2_bytes = 60 * static_cast<int>(kMiB);
  return limits;
}

FusedHooks pinned(FusedHooks::Route route) {
  FusedHooks hooks;
  hooks.route = route;
  return hooks;
}

// Shapes around the route's, the buffer's and the samples' boundaries.
std::vector<std::pair<std::int64_t, std::int64_t>> shape_sweep() {
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  constexpr std::int64_t k1M = std::int64_t{1} << 20;
  for (std::int64_t T : {1, 2, 3, 64, 131, 132, 133, 264, 265, 513, 1024, 1025, 4096}) {
    for (std::int64_t N : {std::int64_t{1}, std::int64_t{3}, std::int64_t{4}, std::int64_t{5}, std::int64_t{255},
                           std::int64_t{256}, std::int64_t{257}, std::int64_t{5001}, std::int64_t{8191},
                           std::int64_t{8192}, std::int64_t{8193}, std::int64_t{32768}, std::int64_t{131072},
                           std::int64_t{131073}, std::int64_t{262144}, std::int64_t{262145}, k1M, k1M + 7, 8 * k1M}) {
      shapes.push_back({T, N});
    }
  }
  return shapes;
}

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Up to 128K keys every shape takes the unfused route; past it only when every row's
// scores fit 256 MB (one scoring and one top-k launch).
TEST(FusedPlan, RouteByShape) {
  EXPECT_TRUE(unfused_by_shape(4096, 8192));
  EXPECT_TRUE(unfused_by_shape(4096, kUnfusedMaxKeys));
  EXPECT_FALSE(unfused_by_shape(4096, kUnfusedMaxKeys + 1));
  // 256K keys: a row is 1 MB, so 256 rows fill 256 MB.
  EXPECT_TRUE(unfused_by_shape(256, 262144));
  EXPECT_FALSE(unfused_by_shape(257, 262144));
  EXPECT_TRUE(unfused_by_shape(1, std::int64_t{1} << 30));  // one row, however long
}

// The unfused route's workspace is its batch buffer (T rows, at most 512 MB
// of them, at least one) and the checksum word; nothing of the fused stages.
TEST(FusedPlan, UnfusedWorkspaceIsTheBatchBuffer) {
  EXPECT_EQ(workspace_size(shape(4096, 8192)), 128 * kMiB + kChecksumBytes);
  EXPECT_EQ(workspace_size(shape(4096, 32768)), 512 * kMiB + kChecksumBytes);
  EXPECT_EQ(workspace_size(shape(4096, 131072)), 512 * kMiB + kChecksumBytes);  // 1024 of 4096 rows a batch
  EXPECT_EQ(workspace_size(shape(512, 131072)), 256 * kMiB + kChecksumBytes);
  EXPECT_EQ(workspace_size(shape(64, 131072)), 32 * kMiB + kChecksumBytes);
  // Rows padded to 4 floats, the piece to 256 bytes: 3 x 5004 x 4 = 60048.
  EXPECT_EQ(workspace_size(shape(3, 5001)), std::size_t{60160} + kChecksumBytes);
  EXPECT_EQ(workspace_size(shape(0, 8192)), 0u);
  for (int K : {512, 1024, 2048}) {
    EXPECT_EQ(workspace_size(shape(100, 20000, K)), std::size_t{100} * 20000 * 4 + kChecksumBytes) << "K=" << K;
  }
}

// The fused stages add samples, per-row counters and candidates (4 K of 8
// bytes a row), which grow with T and K but not with N.
TEST(FusedPlan, FusedWorkspaceGrowsWithRowsNotKeys) {
  const std::int64_t N = std::int64_t{1} << 20;
  ASSERT_FALSE(unfused_by_shape(4096, N));
  const std::size_t fused = workspace_size(shape(4096, N));
  const std::size_t candidates = std::size_t{4096} * 4 * 2048 * 8;
  EXPECT_GT(fused, 512 * kMiB + candidates);
  EXPECT_LT(fused, 1100 * kMiB);
  // Eight times the keys: the same samples (at most 16384 a row), counters
  // and candidates, and the same 512 MB buffer (fewer rows a batch).
  EXPECT_EQ(workspace_size(shape(4096, 8 * N)), fused);
  // Half the rows: the per-row pieces halve.
  EXPECT_LT(workspace_size(shape(2048, N)), fused);
}

// Hooks size the route they take: a fused route pinned on an unfused-route shape
// needs the fused stages' pieces; the unfused route pinned past 128K keys
// and the math-only control need only the buffer and the checksum word.
TEST(FusedPlan, HooksSizeThePinnedRoute) {
  const IndexerTopkParams small = shape(40, 20000);
  ASSERT_TRUE(unfused_by_shape(40, 20000));
  FusedHooks fused_route;
  fused_route.route = FusedHooks::Route::kFused;
  EXPECT_GT(workspace_size(small, fused_route), workspace_size(small) + std::size_t{40} * 4 * 2048 * 8);
  FusedHooks forced;
  forced.force_threshold = true;  // implies the fused route
  EXPECT_EQ(workspace_size(small, forced), workspace_size(small, fused_route));
  FusedHooks math_only;
  math_only.mode = FusedMode::kMathOnly;
  EXPECT_EQ(workspace_size(small, math_only), workspace_size(small));

  const IndexerTopkParams long_rows = shape(4096, 262144);
  ASSERT_FALSE(unfused_by_shape(4096, 262144));
  FusedHooks unfused;
  unfused.route = FusedHooks::Route::kUnfused;
  EXPECT_EQ(workspace_size(long_rows, unfused), 512 * kMiB + kChecksumBytes);
  EXPECT_LT(workspace_size(long_rows, unfused), workspace_size(long_rows));
  math_only.route = FusedHooks::Route::kFused;  // the control ignores the route
  EXPECT_EQ(workspace_size(long_rows, math_only), workspace_size(long_rows, unfused));
}

// The route make_plan takes: by shape at every shape of the h200 bench grid
// (all unfused) and past it; a pinned route, a forced tau (the fused route)
// and the math-only control whatever the shape.
TEST(FusedPlan, RouteAtTheBenchShapes) {
  for (auto [T, N] : {std::pair<std::int64_t, std::int64_t>{4096, 8192}, {4096, 16384}, {4096, 32768},
                      {4096, 65536}, {4096, 131072}, {512, 131072}, {64, 131072}}) {
    EXPECT_EQ(make_plan(shape(T, N), h200()).route, FusedRoute::kUnfused) << T << " x " << N;
  }
  // The decode grid's longest rows: 4 rows of 1M keys fit one 256 MB batch.
  EXPECT_EQ(make_plan(shape(4, std::int64_t{1} << 20), h200()).route, FusedRoute::kUnfused);
  EXPECT_EQ(make_plan(shape(4096, 262144), h200()).route, FusedRoute::kFused);
  EXPECT_EQ(make_plan(shape(257, 262144), h200()).route, FusedRoute::kFused);
  EXPECT_EQ(make_plan(shape(4096, 8192), h200(), pinned(FusedHooks::Route::kFused)).route, FusedRoute::kFused);
  EXPECT_EQ(make_plan(shape(4096, 262144), h200(), pinned(FusedHooks::Route::kUnfused)).route, FusedRoute::kUnfused);
  FusedHooks forced;
  forced.force_threshold = true;
  EXPECT_EQ(make_plan(shape(4096, 8192), h200(), forced).route, FusedRoute::kFused);
  FusedHooks math_only = pinned(FusedHooks::Route::kFused);
  math_only.mode = FusedMode::kMathOnly;
  EXPECT_EQ(make_plan(shape(4096, 262144), h200(), math_only).route, FusedRoute::kMathOnly);
}

// The workspace total is the pieces laid end to end, each rounded up to 256
// bytes: samples, per-row counters and candidates on the fused route only,
// then the scores buffer (up to 512 MB of rows, at most T) and the checksum
// word on every route; the pieces sit in that order at those sizes.
TEST(FusedPlan, WorkspaceIsItsPiecesEndToEnd) {
  for (auto [T, N] : shape_sweep()) {
    for (int K : {512, 1024, 2048}) {
      for (FusedHooks::Route route : {FusedHooks::Route::kFused, FusedHooks::Route::kUnfused}) {
        const IndexerTopkParams p = shape(T, N, K);
        const FusedPlan plan = make_plan(p, h200(), pinned(route));
        const FusedWorkspace& w = plan.workspace;
        const auto rows = static_cast<std::size_t>(route == FusedHooks::Route::kFused ? T : 0);
        const auto S = static_cast<std::size_t>(plan.sample.samples.count);
        const auto stride = static_cast<std::size_t>(std::max<std::int64_t>(4, (N + 3) / 4 * 4));
        const std::size_t buffer_rows = std::min<std::size_t>(std::max<std::size_t>(1, (512 * kMiB) / (4 * stride)),
                                                              static_cast<std::size_t>(T));
        const std::size_t pieces[] = {
            S * 128,  S * 4,                         // sample keys, their scales
            rows * 4, rows * 4, rows * S * 4,        // sample ranges, sample scores
            rows * 4, rows * 4, rows * 4, rows * 4,  // tau, count, unstaged, flags
            rows * 4 * K * 8,                        // candidates
            buffer_rows * stride * 4, 4,             // the scores buffer, the checksum
        };
        const std::size_t offsets[] = {w.sample_keys, w.sample_scale, w.sample_ks, w.sample_ke,
                                       w.sample_scores, w.tau, w.count, w.unstaged, w.flags, w.candidates,
                                       w.scores, w.checksum, w.total};
        std::size_t at = 0;
        for (std::size_t i = 0; i < std::size(pieces); ++i) {
          EXPECT_EQ(offsets[i], at) << T << " x " << N << " K=" << K << " piece " << i;
          at += aligned(pieces[i]);
        }
        EXPECT_EQ(w.total, at) << T << " x " << N << " K=" << K;
        EXPECT_EQ(workspace_size(p, pinned(route)), w.total);
      }
    }
  }
}

// The limits pick launch widths, never sizes: workspace_size plans with no
// device and gets the layout a launch on any device uses.
TEST(FusedPlan, WorkspaceDoesNotDependOnTheDevice) {
  DeviceLimits small = h200();
  small.sm_count = 1;
  for (auto [T, N] : shape_sweep()) {
    for (FusedHooks::Route route : {FusedHooks::Route::kByShape, FusedHooks::Route::kFused}) {
      const std::size_t bytes = workspace_size(shape(T, N), pinned(route));
      EXPECT_EQ(make_plan(shape(T, N), h200(), pinned(route)).workspace.total, bytes) << T << " x " << N;
      EXPECT_EQ(make_plan(shape(T, N), small, pinned(route)).workspace.total, bytes) << T << " x " << N;
    }
  }
}

// The rows of the batches, in order: every row exactly once, each batch
// within the buffer, none empty.
void expect_batches_cover_rows(const FusedPlan& plan, std::int64_t T, const char* what) {
  const Batches& batches = plan.score_and_select.batches;
  const std::size_t row_bytes = static_cast<std::size_t>(plan.score_and_select.score_stride) * sizeof(float);
  std::int64_t next = 0;
  for (std::int64_t b = 0; b < batches.count(); ++b) {
    const Batch batch = batches[b];
    ASSERT_EQ(batch.first, next) << what << ": batch " << b << " of " << T << " rows";
    ASSERT_GE(batch.size, 1) << what << ": batch " << b;
    EXPECT_LE(static_cast<std::size_t>(batch.size) * row_bytes, plan.workspace.checksum - plan.workspace.scores)
        << what << ": batch " << b << " passes the buffer";
    next += batch.size;
  }
  EXPECT_EQ(next, T) << what;
}

TEST(FusedPlan, BatchesCoverEveryRowOnce) {
  for (auto [T, N] : shape_sweep()) {
    expect_batches_cover_rows(make_plan(shape(T, N), h200(), pinned(FusedHooks::Route::kUnfused)), T, "unfused");
    expect_batches_cover_rows(make_plan(shape(T, N), h200(), pinned(FusedHooks::Route::kFused)), T, "repair");
    for (std::int64_t cap : {1, 2, 7, 1000000}) {
      FusedHooks hooks = pinned(FusedHooks::Route::kUnfused);
      hooks.unfused_batch_rows = cap;
      const FusedPlan plan = make_plan(shape(T, N), h200(), hooks);
      EXPECT_LE(plan.score_and_select.batches.per_batch, cap);
      expect_batches_cover_rows(plan, T, "unfused, capped");
    }
  }
  // The buffer holds 512 MB of rows: 4096 x 128K takes four batches of 1024.
  const Batches batches = make_plan(shape(4096, 131072), h200()).score_and_select.batches;
  EXPECT_EQ(batches.count(), 4);
  EXPECT_EQ(batches.per_batch, 1024);
  // The unfused batch cap is for the unfused route; the repair's batches are
  // what the buffer holds.
  FusedHooks capped = pinned(FusedHooks::Route::kFused);
  capped.unfused_batch_rows = 3;
  EXPECT_EQ(make_plan(shape(40, 20000), h200(), capped).score_and_select.batches.count(), 1);
  FusedHooks math_only;
  math_only.mode = FusedMode::kMathOnly;
  EXPECT_EQ(make_plan(shape(40, 20000), h200(), math_only).score_and_select.batches.count(), 0);
}

// Stage 1 samples every step-th key from offset: at least half of and at most
// a target of N / 32 clamped to [min(N, kMinSampledKeys), kMaxSampledKeys],
// every sample inside the row and none past the last step, their keys in the
// threshold kernel's shared memory.
TEST(FusedPlan, SamplePlan) {
  for (auto [T, N] : shape_sweep()) {
    const FusedPlan plan = make_plan(shape(T, N), h200(), pinned(FusedHooks::Route::kFused));
    const SamplePlan& s = plan.sample.samples;
    const std::int64_t target =
        std::clamp<std::int64_t>(N / 32, std::min<std::int64_t>(N, kMinSampledKeys), kMaxSampledKeys);
    EXPECT_GE(2 * s.count, target) << N;
    EXPECT_LE(s.count, target) << N;
    EXPECT_LT(s.offset + (s.count - 1) * s.step, N) << N;
    EXPECT_GE(s.offset + s.count * s.step, N) << N << ": keys past the last sample";
    EXPECT_EQ(plan.sample.threshold.smem_bytes, static_cast<int>(s.count * sizeof(std::uint32_t))) << N;
    EXPECT_LE(plan.sample.threshold.smem_bytes, plan.sample.threshold_smem_limit);
    EXPECT_EQ(plan.sample.threshold.blocks, static_cast<unsigned>(T));
    EXPECT_GE(plan.sample.prepare.blocks, 1u);
    EXPECT_LE(plan.sample.prepare.blocks, 65535u);
  }
  const SamplePlan s8k = make_plan(shape(4096, 8192), h200(), pinned(FusedHooks::Route::kFused)).sample.samples;
  EXPECT_EQ(s8k.step, 32);
  EXPECT_EQ(s8k.offset, 16);
  EXPECT_EQ(s8k.count, 256);
  const SamplePlan s1m =
      make_plan(shape(4096, std::int64_t{1} << 20), h200(), pinned(FusedHooks::Route::kFused)).sample.samples;
  EXPECT_EQ(s1m.step, 64);
  EXPECT_EQ(s1m.count, kMaxSampledKeys);
  // The unfused route samples nothing.
  EXPECT_EQ(make_plan(shape(4096, 8192), h200()).sample.samples.count, 0);
}

// Stage 3's threads a row: wide (K / 2, at most 1024) up to two rows per
// SM, 256 beyond, unless the hooks pin a width; the filter's capacity and
// tie target follow K.
TEST(FusedPlan, SelectWidthAndFilterByK) {
  const FusedHooks fused = pinned(FusedHooks::Route::kFused);
  for (int K : {512, 1024, 2048}) {
    const int wide = std::min(K / 2, 1024);
    EXPECT_EQ(make_plan(shape(1, 20000, K), h200(), fused).select.threads, wide) << K;
    EXPECT_EQ(make_plan(shape(264, 20000, K), h200(), fused).select.threads, wide) << K;
    EXPECT_EQ(make_plan(shape(265, 20000, K), h200(), fused).select.threads, kSelectThreads) << K;
    FusedHooks narrow = fused;
    narrow.select_width = FusedHooks::SelectWidth::kNarrow;
    EXPECT_EQ(make_plan(shape(1, 20000, K), h200(), narrow).select.threads, kSelectThreads) << K;
    FusedHooks widened = fused;
    widened.select_width = FusedHooks::SelectWidth::kWide;
    EXPECT_EQ(make_plan(shape(4096, 20000, K), h200(), widened).select.threads, wide) << K;
    const FusedPlan plan = make_plan(shape(100, 20000, K), h200(), fused);
    EXPECT_EQ(plan.select.blocks, 100u);
    EXPECT_EQ(plan.filter.capacity, static_cast<std::uint32_t>(4 * K));
    EXPECT_EQ(plan.filter.tie_target, static_cast<std::uint32_t>(K + K / 4));
  }
}

// A call with no rows plans no launch and no workspace, on every route.
TEST(FusedPlan, NoRowsPlanNothing) {
  using Route = FusedHooks::Route;
  for (Route route : {Route::kByShape, Route::kFused, Route::kUnfused}) {
    const FusedPlan plan = make_plan(shape(0, 8192), h200(), pinned(route));
    EXPECT_EQ(plan.workspace.total, 0u);
    EXPECT_EQ(plan.score_and_select.batches.count(), 0);
    EXPECT_EQ(plan.select.blocks, 0u);
    EXPECT_EQ(plan.sample.threshold.blocks, 0u);
    EXPECT_EQ(plan.unfused_trace.blocks, 0u);
  }
}

}  // namespace
}  // namespace dsa::fused
