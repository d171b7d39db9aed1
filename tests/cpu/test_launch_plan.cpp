// The standalone top-k's host-side launch arithmetic
// (selection/topk/launch_plan.h).
#include "selection/topk/launch_plan.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace dsa::selection::topk {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// The H200 (60 MiB of L2, 132 SMs): the rows in flight share a third of L2,
// in whole 16-byte units.
TEST(LaunchPlan, RowPrefetchSharesAThirdOfL2) {
  const std::int64_t l2 = 60 * kMiB, share = l2 / 3;
  // 4096 rows, 264 resident CTAs (2 an SM): 264 rows in flight.
  EXPECT_EQ(row_prefetch_bytes(4096, 264, l2), static_cast<std::uint32_t>(share / 264 / 16 * 16));
  // Fewer rows than resident CTAs: each row gets a larger piece.
  EXPECT_EQ(row_prefetch_bytes(64, 132, l2), static_cast<std::uint32_t>(share / 64 / 16 * 16));
  EXPECT_EQ(row_prefetch_bytes(1, 132, l2), static_cast<std::uint32_t>(share / 16 * 16));
  for (std::int64_t rows : {1, 2, 63, 64, 131, 132, 133, 264, 265, 511, 512, 4096, 1 << 20}) {
    for (std::int64_t ctas : {132, 264, 528}) {
      const std::uint32_t bytes = row_prefetch_bytes(rows, ctas, l2);
      EXPECT_EQ(bytes % 16, 0u) << rows << " rows, " << ctas << " CTAs";
      const std::int64_t in_flight = rows < ctas ? rows : ctas;
      EXPECT_LE(static_cast<std::int64_t>(bytes) * in_flight, share) << rows << " rows, " << ctas << " CTAs";
      EXPECT_GT(static_cast<std::int64_t>(bytes + 16) * in_flight, share) << rows << " rows, " << ctas << " CTAs";
    }
  }
}

// No L2 size (an attribute the device did not report), no rows, and an L2
// far larger than any row: no prefetch, one row in flight, and a cap that
// keeps the byte count inside the bulk prefetch's 32-bit size.
TEST(LaunchPlan, RowPrefetchEdges) {
  EXPECT_EQ(row_prefetch_bytes(4096, 264, 0), 0u);
  EXPECT_EQ(row_prefetch_bytes(4096, 264, -1), 0u);
  EXPECT_EQ(row_prefetch_bytes(0, 264, 48), 16u);  // 48 / 3 = 16 bytes for the one row
  EXPECT_EQ(row_prefetch_bytes(1, 264, 47), 0u);   // 15 bytes: no whole unit
  EXPECT_EQ(row_prefetch_bytes(1, 1, std::int64_t{1} << 40), std::uint32_t{1} << 30);
}

// The split kernel's cluster size: the largest of 2, 4, 8, 16 whose
// clusters hold every row at once with parts of at least kMinSplitPart
// keys; 1 when none does, for rows of at most kMinSplitRow keys, and for
// crowded launches of rows of at most kMinCrowdedSplitRow keys.
TEST(LaunchPlan, SplitClusterSize) {
  const int clusters[kSplitSizes] = {66, 32, 16, 8};  // of 2, 4, 8 and 16 CTAs, one an SM
  const std::int64_t n = 16 * kMinSplitPart;
  static_assert(n > kMinSplitRow, "the cases below");
  EXPECT_EQ(split_cluster_size(1, n, clusters), 16);
  EXPECT_EQ(split_cluster_size(8, n, clusters), 16);
  EXPECT_EQ(split_cluster_size(9, n, clusters), 8);
  EXPECT_EQ(split_cluster_size(16, n, clusters), 8);
  EXPECT_EQ(split_cluster_size(17, n, clusters), 4);
  EXPECT_EQ(split_cluster_size(32, n, clusters), 4);
  EXPECT_EQ(split_cluster_size(33, n, clusters), 2);
  EXPECT_EQ(split_cluster_size(66, n, clusters), 2);
  EXPECT_EQ(split_cluster_size(67, n, clusters), 1);
  EXPECT_EQ(split_cluster_size(4096, n, clusters), 1);
  // Shorter rows take fewer, longer parts; rows of at most kMinSplitRow
  // keys are not split.
  EXPECT_EQ(split_cluster_size(1, n - 1, clusters), 8);
  EXPECT_EQ(split_cluster_size(1, 8 * kMinSplitPart, clusters), 8);
  EXPECT_EQ(split_cluster_size(1, kMinSplitRow + 1, clusters), kMinSplitRow / kMinSplitPart);
  EXPECT_EQ(split_cluster_size(1, kMinSplitRow, clusters), 1);
  EXPECT_FALSE(rows_may_split(kMinSplitRow));
  EXPECT_TRUE(rows_may_split(kMinSplitRow + 1));
  // More rows than clusters of 4 fit: rows of at most kMinCrowdedSplitRow
  // keys stay whole, longer ones still split.
  static_assert(kMinCrowdedSplitRow >= 4 * kMinSplitPart, "the cases below");
  EXPECT_EQ(split_cluster_size(32, kMinCrowdedSplitRow, clusters), 4);
  EXPECT_EQ(split_cluster_size(33, kMinCrowdedSplitRow, clusters), 1);
  EXPECT_EQ(split_cluster_size(66, kMinCrowdedSplitRow, clusters), 1);
  EXPECT_EQ(split_cluster_size(33, kMinCrowdedSplitRow + 1, clusters), 2);
  EXPECT_EQ(split_cluster_size(66, kMinCrowdedSplitRow + 1, clusters), 2);
  // A device that places no cluster of a size skips it.
  const int no_sixteens[kSplitSizes] = {66, 32, 16, 0};
  EXPECT_EQ(split_cluster_size(1, n, no_sixteens), 8);
  const int none[kSplitSizes] = {0, 0, 0, 0};
  EXPECT_EQ(split_cluster_size(1, n, none), 1);
}

// The staged route's programmatic top-k: the resident kernel only once its
// rows fill the device's CTAs (528 at 8K, 264 at 16K on the H200), every
// sampled launch whatever its rows, and nothing that was not asked for.
TEST(LaunchPlan, ProgrammaticLaunchSkipsResidentLaunchesOfFewRows) {
  constexpr int kSlots8K = 4 * 132;
  EXPECT_FALSE(launch_programmatic(true, true, 64, kSlots8K));
  EXPECT_FALSE(launch_programmatic(true, true, kSlots8K - 1, kSlots8K));
  EXPECT_TRUE(launch_programmatic(true, true, kSlots8K, kSlots8K));
  EXPECT_TRUE(launch_programmatic(true, true, 4096, kSlots8K));
  EXPECT_TRUE(launch_programmatic(true, false, 1, 132));
  EXPECT_TRUE(launch_programmatic(true, false, 64, 2 * 132));
  EXPECT_FALSE(launch_programmatic(false, false, 64, 2 * 132));
  EXPECT_FALSE(launch_programmatic(false, true, 4096, kSlots8K));
}

}  // namespace
}  // namespace dsa::selection::topk
