// Device side of the Tensor Memory Accelerator: tiled bulk tensor loads that
// complete on an mbarrier (PTX ISA "cp.async.bulk.tensor"), via cuda::ptx.
#pragma once

#include <cuda.h>
#include <cuda/ptx>

#include <cstdint>

namespace dsa::sm90 {

__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, std::int32_t x, std::int32_t y,
                                            std::uint64_t* bar) {
  const std::int32_t coords[2] = {x, y};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, map, coords, bar);
}

__device__ __forceinline__ void tma_load_3d(void* smem, const CUtensorMap* map, std::int32_t x, std::int32_t y,
                                            std::int32_t z, std::uint64_t* bar) {
  const std::int32_t coords[3] = {x, y, z};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, map, coords, bar);
}

// A vector encoded by make_tensor_map_f32_1d (one row of a 2-D map).
__device__ __forceinline__ void tma_load_1d(void* smem, const CUtensorMap* map, std::int32_t x, std::uint64_t* bar) {
  tma_load_2d(smem, map, x, 0, bar);
}

// A plain bulk copy of `bytes` (a multiple of 16; both addresses 16-byte
// aligned) from global memory, completing on `bar`: no tensor map, so a
// destination need not have a tensor copy's 128-byte alignment.
__device__ __forceinline__ void bulk_load(void* smem, const void* gmem, std::uint32_t bytes, std::uint64_t* bar) {
  cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, gmem, bytes, bar);
}

// Hides the descriptor fetch latency of a tensor map passed as a kernel parameter.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

}  // namespace dsa::sm90
