// The standalone top-k's launch geometries (docs/design.md, "GPU top-k"):
// the sampled kernel's LongRows, LongRows64K and WideRows, the resident
// kernel's ResidentRows8K and ResidentRows16K, the split's largest cluster
// and the cluster-resident kernel's ClusterRows. No CUDA header: the launch plan (plan.h) picks among them on the
// host and CPU tests check it; config.h builds the kernels' shared-memory
// plans on them.
#pragma once

#include <cstdint>

namespace dsa::selection::topk {

// The sampled kernel (topk_kernel.cuh) takes the rows longer than the
// resident kernel holds (kResidentMaxLen, below), up to 1M, with one CTA per
// row. A geometry is a type (kernel template arguments of class type do not
// survive nvcc's host stubs): kThreads per CTA, kMinCtasPerSm for
// __launch_bounds__ (the shared plan fits it), kCandidateCapacity entries
// of the key > tau buffer, kMaxSamples of the threshold's sample buffer.
// 512 threads and 2 CTAs per SM: long rows stream better with more threads
// per row (docs/perf-log.md, T6: 64 x 128K took 0.085 ms with 256
// threads, 0.060 with 512); e = 16 at 1M needs 8192 candidates (4-sigma
// ~7.2K at K = 2048) and up to 8192 samples.
struct LongRows {
  static constexpr int kThreads = 512;
  static constexpr int kMinCtasPerSm = 2;
  // Filter pass: float4 loads in flight per thread per round (the round's
  // 4 * kLoadUnroll elements share one warp-aggregated append). A row's
  // fixed phases (threshold, select, write-out) leave one CTA of an SM
  // streaming at a time, so its loads in flight bound the read rate. 8 (a
  // batch's 32 mask bits) compiles without spills for every K with the
  // one-compare filter; against 6: 64K -3.0 %, 128K -2.6 %, 32K -1.6 %
  // (docs/perf-log.md, T37).
  static constexpr int kLoadUnroll = 8;
  static constexpr int kCandidateCapacity = 8192;
  static constexpr int kMaxSamples = 8192;
  static constexpr int kMinExpectedInTop = 16;  // e >= 16 at 1M: 8192 samples
};
// Launches whose rows are at most kMaxLen (64K) long: LongRows' threads with
// half its candidate buffer (4096) and samples enough for e >= 128
// (kMinExpectedInTop; S = 4096 at 64K, K = 2048: a 4-sigma count of ~3.6 K
// with the bin excess below). A CTA takes ~58 KB of shared memory where
// LongRows takes ~91 KB, so 2 CTAs leave the SM ~124 KB of L1 instead of
// ~60: the filter's re-read of each candidate hits L1 more often (19 %
// of L1 hits at 32K in LongRows; loads that skip L1 measured 29 % slower,
// T79). Against LongRows: 32K -4 to -8 %, 64K -1 % (docs/perf-log.md, T80).
struct LongRows64K {
  static constexpr int kThreads = 512;
  static constexpr int kMinCtasPerSm = 2;
  static constexpr int kMaxLen = 65536;
  static constexpr int kLoadUnroll = 8;
  static constexpr int kCandidateCapacity = 4096;
  static constexpr int kMaxSamples = 4096;
  static constexpr int kMinExpectedInTop = 128;
};
// Launches of at most one row per SM (T <= the SM count, e.g. decode-sized
// batches of long rows): one CTA is alone on its SM, the filter's loads in
// flight are what bounds it, so the row gets 1024 threads (twice LongRows'
// bytes in flight at the same 64 registers a thread). K >= 1024 (the sorted
// write-out gives each thread K / kThreads slots).
struct WideRows {
  static constexpr int kThreads = 1024;
  static constexpr int kMinCtasPerSm = 1;
  // 6 (the most that compiles without spills: 7 and 8 spill 8 bytes) against
  // 4, timed with L2 flushed: 64 x 128K 0.956-0.969 on model-like, ties and
  // shifted rows, 32 x 128K (split in 4) 0.946, launches of 1-8 rows, 128 x
  // 128K and 4 x 1M unchanged (docs/perf-log.md, T115; an A/B with warm L2
  // could not tell, its rounds spread 5-18 %, T38).
  static constexpr int kLoadUnroll = 6;
  static constexpr int kCandidateCapacity = 8192;
  static constexpr int kMaxSamples = 8192;
  static constexpr int kMinExpectedInTop = 16;
};

// A row split over a cluster of CTAs (topk_split_kernel, config.h) takes
// at most kMaxSplit CTAs: twice the portable cluster size (plan.h).
inline constexpr int kMaxSplit = 16;

// The resident kernel (resident_kernel.cuh) for rows up to kMaxLen: the
// whole row sits in shared memory as keys (4 * kMaxLen bytes), so the
// geometry is set by how many rows fit an SM: 8K rows at 256 threads and 4
// CTAs per SM (~49 KB each at K = 2048), 16K rows at 512 threads and 2 CTAs
// (~81 KB each). kLoadGroups 16-byte loads per thread are in flight at once:
// one round reads a whole row of kMaxLen.
// kFirstBinBits, kBinBits: histogram bins of the first pass (taken during
// the load) and of each later pass (2^bits; a 32-bit span takes at most
// ResidentConfig::kMaxPasses, 3 in both geometries). Each pick reads and
// re-zeroes every bin (device::pick_striped_bin: a load, a store and a
// warp reduction per row of 32 bins), so more bins cost every pass, and
// fewer make the first pass's bins wider (more keys in the second pass's
// window). 11 bits at 16K (4 bin rows a lane), where 12 bits (8 rows)
// measured 2.8-7.0 % slower (docs/perf-log.md, T53). At 8K, 10
// bits in every pass (4 rows a lane) measured model-like rows 1.1 %
// faster and tie-cut rows 7 % slower (a fourth pass, T58); a 10-bit first
// pass and 11-bit later passes keep 3 passes: ties / dead-relu / shifted
// rows 2.2-3.5 % faster, model-like unchanged (docs/perf-log.md, T60).
struct ResidentRows8K {
  static constexpr int kThreads = 256;
  static constexpr int kMinCtasPerSm = 4;
  static constexpr int kMaxLen = 8192;
  static constexpr int kLoadGroups = kMaxLen / (4 * kThreads);
  static constexpr int kFirstBinBits = 10;
  static constexpr int kBinBits = 11;
};
struct ResidentRows16K {
  static constexpr int kThreads = 512;
  static constexpr int kMinCtasPerSm = 2;
  static constexpr int kMaxLen = 16384;
  static constexpr int kLoadGroups = kMaxLen / (4 * kThreads);
  static constexpr int kFirstBinBits = 11;
  static constexpr int kBinBits = 11;
};

inline constexpr std::int64_t kResidentMaxLen = ResidentRows16K::kMaxLen;

// The cluster-resident kernel (cluster_kernel.cuh) for launches of few rows
// longer than kResidentMaxLen: a row over a cluster of 2 to kMaxSplit CTAs,
// one an SM (1024 threads), each holding its part as keys in shared memory.
// kMaxPartKeys: the keys a CTA holds (160 KB; with the histograms, the
// emission's order keys and the sort, ~215 KB at K = 2048), so rows of up
// to 16 x 40960 - 3 keys (a row starts up to 3 keys past a 16-byte
// boundary). kMinPartKeys: the launcher's smallest part
// (plan.h); below it a pass's two cluster barriers and the count
// exchange cost more than the shorter part saves. kLoadUnroll: 16-byte
// loads a thread has in flight (64 KB a CTA).
struct ClusterRows {
  static constexpr int kThreads = 1024;
  static constexpr int kMinCtasPerSm = 1;
  static constexpr std::int64_t kMaxPartKeys = 40960;
  static constexpr std::int64_t kMinPartKeys = 4096;
  static constexpr int kLoadUnroll = 4;
};
// Keys a CTA of the cluster-resident kernel holds for rows of up to
// num_cols keys over `size` CTAs (a row starts up to 3 keys past a 16-byte
// boundary; whole 16-byte groups of 4 keys).
constexpr std::int64_t cluster_part_keys(std::int64_t num_cols, int size) {
  return ((num_cols + 6) / 4 + size - 1) / size * 4;
}

}  // namespace dsa::selection::topk
