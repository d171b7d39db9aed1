// Which keys a CTA scores: query block blockIdx.x (Shape::kQueries rows) and
// key chunk blockIdx.y. The block's range is the union of its rows' ranges,
// cut to the chunk [c * chunk_keys, (c + 1) * chunk_keys); scores outside a
// row's own range are computed but never stored. Reading the ranges on the
// device keeps the launch free of host synchronisation.
#pragma once

#include <cstdint>

namespace dsa::scoring {

struct KeyRange {
  std::int64_t begin = 0;  // first key of the first tile: a multiple of the tile size, so
                           // every TMA box of fp32 key scales starts 16-byte aligned
                           // (an unaligned start is an illegal instruction)
  std::int64_t end = 0;    // one past the last key the block needs
  int tiles = 0;           // ceil((end - begin) / tile)
};

// Row t's range clamped to [0, num_keys): unvalidated ranges
// (ExecutionContext::check_ranges = false) can never address memory outside
// the inputs and outputs. A row whose row_mask entry is 0 gets an empty range
// (the fused operator's repair rescores only the rows it flagged).
struct RowRange {
  std::int32_t begin = 0, end = 0;
};
__device__ __forceinline__ RowRange row_range(const std::int32_t* __restrict__ ks, const std::int32_t* __restrict__ ke,
                                              const std::uint32_t* __restrict__ row_mask, std::int64_t t,
                                              std::int64_t num_keys) {
  const std::int32_t n = static_cast<std::int32_t>(num_keys);
  RowRange r;
  r.begin = min(max(__ldg(ks + t), 0), n);
  r.end = min(max(__ldg(ke + t), r.begin), n);
  if (row_mask != nullptr && __ldg(row_mask + t) == 0) r.end = r.begin;
  return r;
}

template <int kQueries, int kTile>
__device__ __forceinline__ KeyRange block_key_range(const std::int32_t* __restrict__ ks,
                                                    const std::int32_t* __restrict__ ke,
                                                    const std::uint32_t* __restrict__ row_mask, std::int64_t t0,
                                                    std::int64_t num_queries, std::int64_t num_keys,
                                                    std::int64_t chunk, std::int64_t chunk_keys) {
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
  KeyRange r;
  r.begin = max(lo, chunk * chunk_keys) / kTile * kTile;
  r.end = min(hi, (chunk + 1) * chunk_keys);
  r.tiles = r.end > r.begin ? static_cast<int>((r.end - r.begin + kTile - 1) / kTile) : 0;
  return r;
}

}  // namespace dsa::scoring
