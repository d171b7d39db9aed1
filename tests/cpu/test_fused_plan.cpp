// The fused operator's host-side plan (fused/fused.h): the route by shape
// and the workspace each route needs. Pure arithmetic, so it runs without a
// GPU (the public indexer_topk_workspace_size validates device pointers
// first, which needs one).
#include "fused/fused.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

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

// Up to 128K keys every shape is staged; past it only when every row's
// scores fit 256 MB (one scoring and one top-k launch).
TEST(FusedPlan, RouteByShape) {
  EXPECT_TRUE(staged_by_shape(4096, 8192));
  EXPECT_TRUE(staged_by_shape(4096, kStagedMaxKeys));
  EXPECT_FALSE(staged_by_shape(4096, kStagedMaxKeys + 1));
  // 256K keys: a row is 1 MB, so 256 rows fill 256 MB.
  EXPECT_TRUE(staged_by_shape(256, 262144));
  EXPECT_FALSE(staged_by_shape(257, 262144));
  EXPECT_TRUE(staged_by_shape(1, std::int64_t{1} << 30));  // one row, however long
}

// The staged route's workspace is its batch buffer (T rows, at most 512 MB
// of them, at least one) and the checksum word; nothing of the fused stages.
TEST(FusedPlan, StagedWorkspaceIsTheBatchBuffer) {
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
  ASSERT_FALSE(staged_by_shape(4096, N));
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

// Hooks size the route they take: a fused route pinned on a staged shape
// needs the fused stages' pieces; the staged route pinned past 128K keys
// and the math-only control need only the buffer and the checksum word.
TEST(FusedPlan, HooksSizeThePinnedRoute) {
  const IndexerTopkParams small = shape(40, 20000);
  ASSERT_TRUE(staged_by_shape(40, 20000));
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
  ASSERT_FALSE(staged_by_shape(4096, 262144));
  FusedHooks staged;
  staged.route = FusedHooks::Route::kStaged;
  EXPECT_EQ(workspace_size(long_rows, staged), 512 * kMiB + kChecksumBytes);
  EXPECT_LT(workspace_size(long_rows, staged), workspace_size(long_rows));
  math_only.route = FusedHooks::Route::kFused;  // the control ignores the route
  EXPECT_EQ(workspace_size(long_rows, math_only), workspace_size(long_rows, staged));
}

}  // namespace
}  // namespace dsa::fused
