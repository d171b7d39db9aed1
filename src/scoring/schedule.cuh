// Which keys the scoring kernel scores, and which CTA scores them.
//
// A query block (Shape::kQueries consecutive rows) needs the union of its
// rows' ranges, in whole key tiles; scores outside a row's own range are
// computed but never stored. The kernel is persistent: its grid is one CTA
// per SM, and the blocks' tiles, laid end to end in block order, are cut into
// gridDim.x equal runs, one per CTA. A CTA's run is a sequence of units (one
// block, a run of its tiles): it starts inside one block and usually ends
// inside another, so every CTA gets the same number of tiles (+-1) whatever
// the rows' lengths (causal, ragged, one long row), small T uses every SM
// without a separate key split, and a CTA loads the next unit's queries while
// it finishes the current one. Ranges are read on the device: no host
// synchronisation.
#pragma once

#include <cstdint>

#include "common/row_range.cuh"
#include "common/warp.h"

namespace dsa::scoring {

struct KeyRange {
  std::int64_t begin = 0;  // first key of the first tile: a multiple of the tile size, so
                           // every TMA box of fp32 key scales starts 16-byte aligned
                           // (an unaligned start is an illegal instruction)
  std::int64_t end = 0;    // one past the last key the block needs
  int tiles = 0;           // ceil((end - begin) / tile)
};

// The key tiles that cover [lo, hi) (the union of a block's row ranges;
// lo >= hi: none).
template <int kTile>
__device__ __forceinline__ KeyRange tile_range(std::int64_t lo, std::int64_t hi) {
  KeyRange r;
  if (hi > lo) {
    r.begin = lo / kTile * kTile;
    r.end = hi;
    r.tiles = static_cast<int>((r.end - r.begin + kTile - 1) / kTile);
  }
  return r;
}

// The whole key range of the block of rows [t0, t0 + kQueries).
template <int kQueries, int kTile>
__device__ __forceinline__ KeyRange block_key_range(const std::int32_t* __restrict__ ks,
                                                    const std::int32_t* __restrict__ ke,
                                                    const std::uint32_t* __restrict__ row_mask, std::int64_t t0,
                                                    std::int64_t num_queries, std::int64_t num_keys) {
  std::int64_t lo = INT64_MAX, hi = 0;
#pragma unroll
  for (int q = 0; q < kQueries; ++q) {
    if (t0 + q < num_queries) {
      const RowRange r = row_range(ks, ke, row_mask, t0 + q, num_keys);
      if (r.begin < r.end) {
        lo = min(lo, static_cast<std::int64_t>(r.begin));
        hi = max(hi, static_cast<std::int64_t>(r.end));
      }
    }
  }
  return tile_range<kTile>(lo, hi);
}

// The same, by a converged warp: lane q reads row t0 + q (kQueries <= 32).
template <int kQueries, int kTile>
__device__ __forceinline__ KeyRange block_key_range_warp(const std::int32_t* __restrict__ ks,
                                                         const std::int32_t* __restrict__ ke,
                                                         const std::uint32_t* __restrict__ row_mask, std::int64_t t0,
                                                         std::int64_t num_queries, std::int64_t num_keys) {
  static_assert(kQueries <= kWarpSize);  // a lane a row
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  RowRange r;
  if (lane < kQueries && t0 + lane < num_queries) r = row_range(ks, ke, row_mask, t0 + lane, num_keys);
  const bool any = r.begin < r.end;
  const int lo = __reduce_min_sync(0xFFFFFFFFu, any ? r.begin : INT32_MAX);
  const int hi = __reduce_max_sync(0xFFFFFFFFu, any ? r.end : 0);
  return tile_range<kTile>(lo == INT32_MAX ? INT64_MAX : lo, hi);
}

// One unit of a CTA's work: tiles [first, first + tiles) of query block t0's
// range, i.e. keys from key_begin on. tiles == 0 marks the end of the run.
struct Unit {
  std::int64_t t0 = 0;
  std::int32_t key_begin = 0;  // keys are below num_keys <= INT32_MAX
  std::int32_t tiles = 0;
  std::int32_t odd = 0;        // the run's tiles before this unit, mod 2 (which math
                               // warpgroup takes the unit's first tile)
};

// Where a CTA's run starts: tile `skip` of the block at `block`; `tiles` in all.
struct RunStart {
  std::int64_t block = 0;
  std::int64_t skip = 0;
  std::int64_t tiles = 0;
};

// Block-wide inclusive sum of a 64-bit value; `warp_sums` holds one entry per
// warp. Every thread of the block calls it; returns {inclusive, block total}.
// Written here rather than cub::BlockScan<std::int64_t, 384>: with cub's
// scan the fused kernel's filter-sink instantiations spill 8 bytes
// (docs/perf-log.md, S12), and spills are build errors.
template <int kThreads>
__device__ __forceinline__ void block_inclusive_sum(std::int64_t v, std::int64_t* warp_sums, std::int64_t* inclusive,
                                                    std::int64_t* total) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  std::int64_t x = v;
#pragma unroll
  for (int d = 1; d < kWarpSize; d *= 2) {
    const std::int64_t y = __shfl_up_sync(0xFFFFFFFFu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == kWarpSize - 1) warp_sums[warp] = x;
  __syncthreads();
  std::int64_t before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kThreads / kWarpSize; ++w) {
    before += w < warp ? warp_sums[w] : 0;
    all += warp_sums[w];
  }
  __syncthreads();  // warp_sums may be reused
  *inclusive = before + x;
  *total = all;
}

// This CTA's run (every thread of the CTA calls it; every thread gets it,
// and it is left in *result):
// total tiles W over all blocks, CTA g takes the flattened tiles
// [W g / G, W (g + 1) / G). Two sweeps over the blocks' tile counts, once
// per CTA.
template <int kQueries, int kTile, int kThreads>
__device__ RunStart find_run(const std::int32_t* __restrict__ ks, const std::int32_t* __restrict__ ke,
                             const std::uint32_t* __restrict__ row_mask, std::int64_t num_queries,
                             std::int64_t num_keys, std::int64_t* warp_sums, RunStart* result) {
  const std::int64_t blocks = (num_queries + kQueries - 1) / kQueries;
  const auto tiles_of = [&](std::int64_t b) -> std::int64_t {
    return b < blocks ? block_key_range<kQueries, kTile>(ks, ke, row_mask, b * kQueries, num_queries, num_keys).tiles
                      : 0;
  };
  // The first sweep keeps the tile counts of the thread's first kCached
  // blocks for the second, and loads their ranges all at once: one trip to
  // memory instead of one per block (T <= kCached * kThreads * kQueries).
  constexpr int kCached = 4;
  std::int32_t cached[kCached];
  std::int64_t mine = 0;
#pragma unroll
  for (int i = 0; i < kCached; ++i) {
    cached[i] = static_cast<std::int32_t>(tiles_of(threadIdx.x + static_cast<std::int64_t>(i) * kThreads));
    mine += cached[i];
  }
  for (std::int64_t b = threadIdx.x + static_cast<std::int64_t>(kCached) * kThreads; b < blocks; b += kThreads) {
    mine += tiles_of(b);
  }
  std::int64_t unused = 0, total = 0;
  block_inclusive_sum<kThreads>(mine, warp_sums, &unused, &total);
  const std::int64_t lo = total * blockIdx.x / gridDim.x;
  const std::int64_t hi = total * (blockIdx.x + 1) / gridDim.x;
  RunStart run;
  run.tiles = hi - lo;
  if (run.tiles == 0) return run;  // the same for every thread
  // The block holding flattened tile lo: the one whose tiles [before,
  // before + n) contain it (blocks without tiles never do).
  std::int64_t carry = 0;
  int sweep_no = 0;
  for (std::int64_t base = 0; base < blocks; base += kThreads, ++sweep_no) {
    const std::int64_t b = base + threadIdx.x;
    std::int64_t n = 0;
    if (sweep_no < kCached) {
#pragma unroll
      for (int i = 0; i < kCached; ++i) n = sweep_no == i ? cached[i] : n;  // no local memory
    } else {
      n = tiles_of(b);
    }
    std::int64_t inclusive = 0, sweep = 0;
    block_inclusive_sum<kThreads>(n, warp_sums, &inclusive, &sweep);
    const std::int64_t before = carry + inclusive - n;
    if (before <= lo && lo < before + n) {
      result->block = b;
      result->skip = lo - before;
    }
    carry += sweep;
    if (lo < carry) break;  // the same for every thread
  }
  if (threadIdx.x == 0) result->tiles = run.tiles;
  __syncthreads();  // result written
  return *result;
}

}  // namespace dsa::scoring
