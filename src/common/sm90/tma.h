// Host side of the Tensor Memory Accelerator: building tensor maps.
// cuTensorMapEncodeTiled is fetched from the driver at run time
// (cudaGetDriverEntryPointByVersion), so binaries need no link-time libcuda
// and build on GPU-less machines.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "dsa_topk/dsa_topk.h"

namespace dsa::sm90 {

// A 2-D row-major tensor of `rows` x `row_bytes` bytes (rows `stride_bytes`
// apart, a multiple of 16), loaded in boxes of `box_rows` x `row_bytes` with
// the 128-byte swizzle (row_bytes must be 128). Out-of-range rows read as 0.
Status make_tensor_map_rows_sw128(CUtensorMap* map, const void* base, std::uint64_t rows, std::uint64_t row_bytes,
                                  std::uint64_t stride_bytes, std::uint32_t box_rows);

// A 1-D fp32 vector of `n` elements loaded in boxes of `box` elements
// (tma_load_1d).
// Out-of-range elements read as 0.
Status make_tensor_map_f32_1d(CUtensorMap* map, const float* base, std::uint64_t n, std::uint32_t box);

// The keys of a paged cache: `blocks` blocks `block_stride` bytes apart, each
// starting with `block_rows` rows of `row_bytes` = 128 key bytes. Loaded in
// boxes of `box_rows` rows of one block (tma_load_3d at (0, row, block)),
// 128-byte swizzled; a block index past `blocks` reads as 0.
Status make_tensor_map_paged_rows_sw128(CUtensorMap* map, const void* base, std::uint64_t blocks,
                                        std::uint32_t block_rows, std::uint64_t row_bytes, std::uint64_t block_stride,
                                        std::uint32_t box_rows);

}  // namespace dsa::sm90
