// The standalone top-k's host-side plan (selection/topk/plan.h): the kernel
// instance by shape and hooks, the split, the programmatic launch and the
// row prefetch.
#include "selection/topk/plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

namespace dsa::selection::topk {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr int kSms = 132;

DeviceLimits h200() {
  DeviceLimits limits;
  limits.sm_count = kSms;
  limits.smem_per_sm = 233472;
  limits.reserved_per_block = 1024;
  limits.l2_bytes = static_cast<int>(60 * kMiB);
  return limits;
}

TopkParams shape(std::int64_t rows, std::int64_t cols, int K = 2048) {
  TopkParams p;
  p.num_rows = rows;
  p.num_cols = cols;
  p.score_stride = cols;
  p.options.k = K;
  return p;
}

TopkHooks engine(TopkEngine e, int split_ctas = 0) {
  TopkHooks hooks;
  hooks.engine = e;
  hooks.split_ctas = split_ctas;
  return hooks;
}

// The plan, which must succeed.
TopkPlan plan_of(const TopkParams& p, const TopkHooks& hooks = {}, const DeviceLimits& limits = h200()) {
  TopkPlan plan;
  const Status st = make_plan(p, limits, hooks, &plan);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return plan;
}

TopkGeometry geometry_of(std::int64_t rows, std::int64_t cols, int K = 2048, const TopkHooks& hooks = {}) {
  return plan_of(shape(rows, cols, K), hooks).geometry;
}

// The H200 (60 MiB of L2, 132 SMs): the rows in flight share a third of L2,
// in whole 16-byte units.
TEST(TopkPlan, RowPrefetchSharesAThirdOfL2) {
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
TEST(TopkPlan, RowPrefetchEdges) {
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
TEST(TopkPlan, SplitClusterSize) {
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

// The unfused route's programmatic top-k: the resident kernel only once its
// rows fill the device's CTAs (528 at 8K, 264 at 16K on the H200), every
// sampled launch whatever its rows, and nothing that was not asked for.
TEST(TopkPlan, ProgrammaticLaunchSkipsResidentLaunchesOfFewRows) {
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


// The kernel by shape: rows that fit shared memory the resident kernel (the
// 8K geometry up to 8K keys), longer rows the sampled kernel; at most one
// row per SM (K >= 1024) the wide geometry, split over clusters past 64K
// keys; otherwise LongRows64K up to 64K keys and LongRows beyond.
TEST(TopkPlan, GeometryByShape) {
  for (int K : {512, 1024, 2048}) {
    for (std::int64_t rows : {1, kSms, kSms + 1, 4096}) {
      EXPECT_EQ(geometry_of(rows, 2048, K), TopkGeometry::kResident8K) << rows << " rows, K " << K;
      EXPECT_EQ(geometry_of(rows, 8192, K), TopkGeometry::kResident8K) << rows << " rows, K " << K;
      EXPECT_EQ(geometry_of(rows, 8193, K), TopkGeometry::kResident16K) << rows << " rows, K " << K;
      EXPECT_EQ(geometry_of(rows, 16384, K), TopkGeometry::kResident16K) << rows << " rows, K " << K;
    }
    const bool wide = K >= 1024;
    EXPECT_EQ(geometry_of(kSms, 16385, K), wide ? TopkGeometry::kWideRows : TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(kSms, 65536, K), wide ? TopkGeometry::kWideRows : TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(kSms, 65537, K), wide ? TopkGeometry::kSplitRows : TopkGeometry::kLongRows) << K;
    EXPECT_EQ(geometry_of(1, std::int64_t{1} << 20, K), wide ? TopkGeometry::kSplitRows : TopkGeometry::kLongRows);
    EXPECT_EQ(geometry_of(kSms + 1, 16385, K), TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(kSms + 1, 65536, K), TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(kSms + 1, 65537, K), TopkGeometry::kLongRows) << K;
    // Few rows that some cluster size holds at once with every row on its
    // own CTAs: the cluster-resident kernel (K >= 1024).
    EXPECT_EQ(geometry_of(1, 16385, K), wide ? TopkGeometry::kClusterRows : TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(66, 65536, K), wide ? TopkGeometry::kClusterRows : TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(67, 65536, K), wide ? TopkGeometry::kWideRows : TopkGeometry::kLongRows64K) << K;
    EXPECT_EQ(geometry_of(1, 16 * ClusterRows::kMaxPartKeys - 3, K),
              wide ? TopkGeometry::kClusterRows : TopkGeometry::kLongRows) << K;
  }
}

// The launches the fused operator's unfused route makes at the h200 bench
// grid's shapes (batches of at most 512 MB of rows) and the decode grid's.
TEST(TopkPlan, GeometryAtTheBenchShapes) {
  EXPECT_EQ(geometry_of(4096, 8192), TopkGeometry::kResident8K);
  EXPECT_EQ(geometry_of(4096, 16384), TopkGeometry::kResident16K);
  EXPECT_EQ(geometry_of(4096, 32768), TopkGeometry::kLongRows64K);
  EXPECT_EQ(geometry_of(2048, 65536), TopkGeometry::kLongRows64K);
  EXPECT_EQ(geometry_of(1024, 131072), TopkGeometry::kLongRows);
  EXPECT_EQ(geometry_of(512, 131072), TopkGeometry::kLongRows);
  for (std::int64_t rows : {1, 8, 32}) EXPECT_EQ(geometry_of(rows, 131072), TopkGeometry::kClusterRows) << rows;
  for (std::int64_t rows : {64, 128}) EXPECT_EQ(geometry_of(rows, 131072), TopkGeometry::kSplitRows) << rows;
  EXPECT_EQ(geometry_of(16, 32768), TopkGeometry::kClusterRows);
  EXPECT_EQ(geometry_of(4, std::int64_t{1} << 20), TopkGeometry::kSplitRows);
}

// A plan's threads and occupancy are its geometry's; the CTAs running at
// once are that many on every SM.
TEST(TopkPlan, ThreadsAndOccupancyFollowTheGeometry) {
  const struct {
    std::int64_t rows, cols;
    int threads, ctas_per_sm;
  } cases[] = {{4096, 8192, ResidentRows8K::kThreads, ResidentRows8K::kMinCtasPerSm},
               {4096, 16384, ResidentRows16K::kThreads, ResidentRows16K::kMinCtasPerSm},
               {4096, 32768, LongRows64K::kThreads, LongRows64K::kMinCtasPerSm},
               {4096, 131072, LongRows::kThreads, LongRows::kMinCtasPerSm},
               {16, 32768, WideRows::kThreads, WideRows::kMinCtasPerSm},
               {16, 131072, WideRows::kThreads, WideRows::kMinCtasPerSm}};
  for (const auto& c : cases) {
    const TopkPlan plan = plan_of(shape(c.rows, c.cols));
    EXPECT_EQ(plan.threads, c.threads) << c.rows << " x " << c.cols;
    EXPECT_EQ(plan.min_ctas_per_sm, c.ctas_per_sm) << c.rows << " x " << c.cols;
    EXPECT_EQ(plan.ctas_on_device, c.ctas_per_sm * kSms) << c.rows << " x " << c.cols;
  }
}

// Pinned engines take their kernel at any shape they can hold; forcing tau
// makes the automatic and resident engines sampled (only the sampled kernel
// has a threshold) and keeps the other sampled geometries.
TEST(TopkPlan, PinnedEngines) {
  EXPECT_EQ(geometry_of(4096, 100, 2048, engine(TopkEngine::kSampled)), TopkGeometry::kLongRows);
  EXPECT_EQ(geometry_of(1, 100, 2048, engine(TopkEngine::kSampled)), TopkGeometry::kLongRows);
  EXPECT_EQ(geometry_of(4096, 100, 2048, engine(TopkEngine::kSampled64K)), TopkGeometry::kLongRows64K);
  EXPECT_EQ(geometry_of(4096, 100, 2048, engine(TopkEngine::kSampledWide)), TopkGeometry::kWideRows);
  EXPECT_EQ(geometry_of(4096, 100, 2048, engine(TopkEngine::kSampledSplit)), TopkGeometry::kSplitRows);
  EXPECT_EQ(geometry_of(1, 16384, 2048, engine(TopkEngine::kResident)), TopkGeometry::kResident16K);
  EXPECT_EQ(geometry_of(4096, 100, 2048, engine(TopkEngine::kClusterResident)), TopkGeometry::kClusterRows);
  EXPECT_EQ(geometry_of(1, 131072, 1024, engine(TopkEngine::kClusterResident)), TopkGeometry::kClusterRows);
  // The wide geometry pinned never splits; the automatic one splits few long rows.
  EXPECT_EQ(geometry_of(1, 131072, 2048, engine(TopkEngine::kSampledWide)), TopkGeometry::kWideRows);
  for (TopkEngine e : {TopkEngine::kAuto, TopkEngine::kResident, TopkEngine::kSampled}) {
    TopkHooks forced = engine(e);
    forced.force_threshold = true;
    EXPECT_EQ(geometry_of(4096, 8192, 2048, forced), TopkGeometry::kLongRows);
    EXPECT_EQ(geometry_of(1, 131072, 2048, forced), TopkGeometry::kLongRows);
  }
  for (auto [e, g] : {std::pair{TopkEngine::kSampled64K, TopkGeometry::kLongRows64K},
                      {TopkEngine::kSampledWide, TopkGeometry::kWideRows},
                      {TopkEngine::kSampledSplit, TopkGeometry::kSplitRows}}) {
    TopkHooks forced = engine(e);
    forced.force_threshold = true;
    EXPECT_EQ(geometry_of(4096, 8192, 2048, forced), g);
  }
}

// What a pinned engine cannot take is refused, naming the rule.
TEST(TopkPlan, RefusesWhatThePinnedEngineCannotTake) {
  const auto refused = [](const TopkParams& p, const TopkHooks& hooks, const char* words) {
    TopkPlan plan;
    const Status st = make_plan(p, h200(), hooks, &plan);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << words;
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  };
  refused(shape(1, kResidentMaxLen + 1), engine(TopkEngine::kResident), "resident kernel");
  refused(shape(1, LongRows64K::kMaxLen + 1), engine(TopkEngine::kSampled64K), "64K sampled geometry");
  for (int bad : {1, 3, 6, 32, -2}) refused(shape(1, 131072), engine(TopkEngine::kSampledSplit, bad), "2, 4, 8 or 16");
  refused(shape(1, 131072, 512), engine(TopkEngine::kSampledWide), "K >= 1024");
  refused(shape(1, 131072, 512), engine(TopkEngine::kSampledSplit), "K >= 1024");
  refused(shape(1, 131072, 512), engine(TopkEngine::kClusterResident), "K >= 1024");
  refused(shape(1, 100000), engine(TopkEngine::kClusterResident, 2), "cluster-resident kernel at 2 CTAs");
  refused(shape(1, 16 * ClusterRows::kMaxPartKeys - 2), engine(TopkEngine::kClusterResident),
          "cluster-resident kernel at 16 CTAs");
  // split_ctas is checked whatever the engine.
  refused(shape(4096, 8192), engine(TopkEngine::kAuto, 3), "2, 4, 8 or 16");
}

// A split plan's CTAs a row: the automatic engine's from the cluster
// occupancy (1: run the wide kernel unsplit), a pinned count as pinned, a
// pinned engine at least 2 even where the occupancy picks 1.
TEST(TopkPlan, SplitCtas) {
  const int clusters[kSplitSizes] = {66, 32, 16, 8};
  // Rows no cluster holds in shared memory (1M keys: 65540 a CTA of 16).
  const std::int64_t long_row = 32 * kMinSplitPart;
  const TopkPlan by_shape = plan_of(shape(8, long_row));
  ASSERT_EQ(by_shape.geometry, TopkGeometry::kSplitRows);
  EXPECT_FALSE(by_shape.split_pinned);
  EXPECT_EQ(split_ctas_for(by_shape, 8, long_row, clusters), 16);
  const TopkPlan crowded = plan_of(shape(kSms, kMinCrowdedSplitRow));
  ASSERT_EQ(crowded.geometry, TopkGeometry::kSplitRows);
  EXPECT_EQ(split_ctas_for(crowded, kSms, kMinCrowdedSplitRow, clusters), 1);  // the wide kernel runs
  const TopkPlan pinned = plan_of(shape(kSms, kMinCrowdedSplitRow), engine(TopkEngine::kSampledSplit));
  EXPECT_TRUE(pinned.split_pinned);
  EXPECT_EQ(split_ctas_for(pinned, kSms, kMinCrowdedSplitRow, clusters), 2);
  for (int ctas : {2, 4, 8, 16}) {
    const TopkPlan forced = plan_of(shape(4096, 100), engine(TopkEngine::kSampledSplit, ctas));
    EXPECT_EQ(split_ctas_for(forced, 4096, 100, clusters), ctas);
  }
  // A count pinned without the split engine is not a split.
  EXPECT_EQ(plan_of(shape(4096, 8192), engine(TopkEngine::kAuto, 4)).geometry, TopkGeometry::kResident8K);
}

// The cluster-resident kernel takes a launch's rows when clusters of some
// size take them all at once with parts between the least and the most a
// CTA holds: the largest such size; never rows the resident kernel holds.
TEST(TopkPlan, ClusterResidentSizeFromRowsAndParts) {
  const int clusters[kSplitSizes] = {66, 32, 16, 7};  // of 2, 4, 8 and 16 CTAs, one an SM
  constexpr std::int64_t kMax = ClusterRows::kMaxPartKeys;
  static_assert(kMax == 40960 && ClusterRows::kMinPartKeys == 4096 && kResidentMaxLen == 16384, "the cases below");
  const auto size = [&](std::int64_t rows, std::int64_t cols) { return cluster_resident_size(rows, cols, clusters); };
  EXPECT_EQ(size(1, 131072), 16);   // parts of 8196 keys
  EXPECT_EQ(size(7, 131072), 16);
  EXPECT_EQ(size(8, 131072), 8);    // 7 clusters of 16 fit
  EXPECT_EQ(size(32, 131072), 4);   // parts of 32772
  EXPECT_EQ(size(33, 131072), 0);   // clusters of 2 fit, but parts of 65536 do not
  EXPECT_EQ(size(66, 65536), 2);
  EXPECT_EQ(size(67, 65536), 0);
  // The longest rows 16 CTAs hold (a row may start 3 keys past a 16-byte
  // boundary), and one key more.
  EXPECT_EQ(size(1, 16 * kMax - 3), 16);
  EXPECT_EQ(size(1, 16 * kMax - 2), 0);
  // Short rows: fewer CTAs, parts of at least kMinPartKeys; the resident
  // kernel's rows are not taken.
  EXPECT_EQ(size(1, 20000), 4);
  EXPECT_EQ(size(1, 16385), 4);
  EXPECT_EQ(size(1, kResidentMaxLen), 0);
  const int no_sixteens[kSplitSizes] = {66, 32, 16, 0};
  EXPECT_EQ(cluster_resident_size(1, 131072, no_sixteens), 8);
  const int none[kSplitSizes] = {0, 0, 0, 0};
  EXPECT_EQ(cluster_resident_size(1, 131072, none), 0);
}

// A cluster plan's CTAs a row: the automatic engine's from the occupancy
// (0: the split or wide kernel runs), a pinned count as pinned, a pinned
// engine's otherwise the fewest whose parts hold the rows.
TEST(TopkPlan, ClusterCtas) {
  const int clusters[kSplitSizes] = {66, 32, 16, 7};
  const int none[kSplitSizes] = {0, 0, 0, 0};
  const TopkPlan by_shape = plan_of(shape(1, 131072));
  ASSERT_EQ(by_shape.geometry, TopkGeometry::kClusterRows);
  EXPECT_FALSE(by_shape.split_pinned);
  EXPECT_EQ(cluster_ctas_for(by_shape, 1, 131072, clusters), 16);
  EXPECT_EQ(cluster_ctas_for(by_shape, 1, 131072, none), 0);
  const TopkPlan pinned = plan_of(shape(1, 100000), engine(TopkEngine::kClusterResident));
  EXPECT_TRUE(pinned.split_pinned);
  EXPECT_EQ(cluster_ctas_for(pinned, 1, 100000, none), 4);  // 2 CTAs would hold 50004 keys each
  EXPECT_EQ(cluster_ctas_for(plan_of(shape(1, 100), engine(TopkEngine::kClusterResident)), 1, 100, none), 2);
  for (int ctas : {2, 4, 8, 16}) {
    const TopkPlan forced = plan_of(shape(4, 20000), engine(TopkEngine::kClusterResident, ctas));
    EXPECT_EQ(cluster_ctas_for(forced, 4, 20000, none), ctas);
  }
}

// The plan's programmatic launch is launch_programmatic's on its geometry:
// asked for and not a resident launch of fewer rows than its CTAs on the
// device (528 at 8K, 264 at 16K).
TEST(TopkPlan, ProgrammaticFollowsTheGeometry) {
  TopkHooks after;
  after.after_producer = true;
  EXPECT_FALSE(plan_of(shape(527, 8192), after).programmatic);
  EXPECT_TRUE(plan_of(shape(528, 8192), after).programmatic);
  EXPECT_FALSE(plan_of(shape(263, 16384), after).programmatic);
  EXPECT_TRUE(plan_of(shape(264, 16384), after).programmatic);
  EXPECT_TRUE(plan_of(shape(1, 131072), after).programmatic);
  EXPECT_TRUE(plan_of(shape(64, 32768), after).programmatic);
  EXPECT_FALSE(plan_of(shape(4096, 131072)).programmatic);
}

// A launch with entry rows (TopkHooks::entries) runs the sampled kernel's
// entry instance at any length: the wide CTAs for at most a row an SM at K
// >= 1024, LongRows otherwise; never resident, clustered, split or with
// LongRows64K's buffers, which have no entry instance. It follows the
// producer programmatically, as every sampled launch does.
TEST(TopkPlan, EntryRowsTakeTheSampledKernel) {
  static const std::uint64_t area = 0;  // only the pointer's presence is planned
  TopkHooks entries;
  entries.entries.areas = &area;
  entries.after_producer = true;
  for (int K : {512, 1024, 2048}) {
    for (std::int64_t cols : {std::int64_t{100}, std::int64_t{8192}, std::int64_t{65536}, std::int64_t{131072},
                              std::int64_t{1} << 20}) {
      for (std::int64_t rows : {std::int64_t{1}, std::int64_t{kSms}, std::int64_t{kSms + 1}, std::int64_t{512}}) {
        const TopkPlan plan = plan_of(shape(rows, cols, K), entries);
        const bool wide = K >= 1024 && rows <= kSms;
        EXPECT_EQ(plan.geometry, wide ? TopkGeometry::kWideRows : TopkGeometry::kLongRows)
            << rows << " x " << cols << ", K " << K;
        EXPECT_TRUE(plan.entry_rows);
        EXPECT_TRUE(plan.programmatic) << rows << " x " << cols << ", K " << K;
        EXPECT_EQ(plan.threads, wide ? WideRows::kThreads : LongRows::kThreads);
      }
    }
  }
  EXPECT_FALSE(plan_of(shape(4096, 131072)).entry_rows);
  // Only the automatic engine, with no forced threshold.
  for (TopkEngine e : {TopkEngine::kSampled, TopkEngine::kSampled64K, TopkEngine::kSampledWide,
                       TopkEngine::kSampledSplit, TopkEngine::kResident, TopkEngine::kClusterResident}) {
    TopkHooks pinned = entries;
    pinned.engine = e;
    TopkPlan plan;
    const Status st = make_plan(shape(256, 131072), h200(), pinned, &plan);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << static_cast<int>(e);
    EXPECT_NE(st.message().find("entries"), std::string::npos) << st.message();
  }
  TopkHooks forced = entries;
  forced.force_threshold = true;
  TopkPlan plan;
  EXPECT_EQ(make_plan(shape(256, 131072), h200(), forced, &plan).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsa::selection::topk
