// The launcher of the scoring kernel for any sink (scoring_kernel.cuh): the
// indexer_scores operator (StoreSink) and the fused operator's stages use it,
// so every score on the CUDA backend comes from the same main loop.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_status.h"
#include "common/launch_cache.h"
#include "common/sm90/grid_dependency.cuh"
#include "common/sm90/tma.h"
#include "dsa_topk/dsa_topk.h"
#include "scoring/scoring.h"
#include "scoring/scoring_kernel.cuh"

namespace dsa::scoring {

inline Status scoring_cuda_error(cudaError_t err, const char* what) { return cuda_status(err, what); }

// Dynamic shared memory of the kernel with sink Sink (+1 KiB to align the
// base for the 128-byte swizzle).
template <class Sink>
constexpr int scoring_smem_bytes() {
  return static_cast<int>(sizeof(SharedStorage) + sizeof(typename Sink::Shared)) + 1024;
}

// Whether launch_scoring(in, ...) launches a kernel (a successful call
// with no rows or no keys launches nothing).
inline bool scoring_launches(const IndexerInputs& in) { return in.num_queries > 0 && in.num_keys > 0; }

// Scores rows [0, in.num_queries) of `in` (ranges in.ks/in.ke, rows with
// row_mask[t] == 0 skipped when row_mask is set) into `sink`, on `stream`.
// With Keys = PagedKeys, in.k and in.k_scale are unused and the rows'
// ranges are positions within each row's request (scoring_kernel.cuh).
// kCols: the block's (query, head) columns (Shape); narrower blocks than
// kTileCols only with PagedKeys, whose requests fill them.
// programmatic: launched with programmatic stream serialization, so its CTAs
// may start before the kernel ahead of it in the stream ends (a sink that
// needs that kernel's writes waits for them: wait_for_prerequisite_grids),
// one CTA fewer than the SMs hold: a small kernel ahead of it runs on the
// SM left over instead of delaying one CTA's start, and so every CTA's end
// (the runs are equal).
template <int kHeads, class Sink, class Keys = ContiguousKeys, int kCols = kTileCols>
Status launch_scoring(const IndexerInputs& in, const std::uint32_t* row_mask, const Sink& sink, CUstream_st* stream,
                      const Keys& source = {}, bool programmatic = false) {
  if (!scoring_launches(in)) return Status::Ok();
  CUtensorMap q_map, k_map, scale_map;
  Status st = sm90::make_tensor_map_rows_sw128(&q_map, in.q, static_cast<std::uint64_t>(source.q_rows(in.num_queries)) * kHeads,
                                               kHeadDim, kHeadDim, kCols);
  if (st.ok()) st = source.make_maps(in, &k_map, &scale_map);
  if (!st.ok()) return st;

  constexpr int kSmemBytes = scoring_smem_bytes<Sink>();
  static_assert(kSmemBytes <= kMaxSmemBytes, "scoring kernel shared memory exceeds the H100/H200 limit");
  auto kernel = indexer_scores_kernel<kHeads, kCols, Sink, Keys>;
  // Persistent: as many CTAs as fit at once (one per SM); schedule.cuh
  // splits the work evenly among them on the device. The shared-memory
  // attribute and the occupancy are set and read once per device
  // (LaunchCache).
  int device = 0, per_sm = 0;
  DeviceLimits limits;
  st = LaunchCache::get().current(&device, &limits);
  if (st.ok()) {
    st = LaunchCache::get().once(
        reinterpret_cast<const void*>(kernel), device,
        [&](int* ctas) -> Status {
          cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
          if (e != cudaSuccess) return scoring_cuda_error(e, "scoring kernel shared memory");
          e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas, kernel, kThreads, kSmemBytes);
          return e == cudaSuccess ? Status::Ok() : scoring_cuda_error(e, "scoring kernel occupancy");
        },
        &per_sm);
  }
  if (!st.ok()) return st;
  if (per_sm < 1) return {StatusCode::kCudaError, "scoring kernel: no CTA fits on an SM"};
  const int sm_count = limits.sm_count;
  const ScoresArgs args{in.w, in.ks, in.ke, row_mask, in.num_queries, in.num_keys};
  const auto grid = static_cast<unsigned>(sm_count * per_sm - (programmatic && sm_count * per_sm > 1 ? 1 : 0));
  cudaError_t err = cudaSuccess;
  if (programmatic) {
    cudaLaunchAttribute attr = sm90::programmatic_serialization();
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmemBytes;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, kernel, q_map, k_map, scale_map, args, sink, source);
  } else {
    kernel<<<grid, kThreads, kSmemBytes, stream>>>(q_map, k_map, scale_map, args, sink, source);
    err = cudaGetLastError();
  }
  return err == cudaSuccess ? Status::Ok() : scoring_cuda_error(err, "scoring kernel launch");
}

template <class Sink, class Keys = ContiguousKeys>
Status launch_scoring(const IndexerInputs& in, const std::uint32_t* row_mask, const Sink& sink, CUstream_st* stream,
                      const Keys& source = {}) {
  return in.num_heads == 64 ? launch_scoring<64>(in, row_mask, sink, stream, source)
                            : launch_scoring<32>(in, row_mask, sink, stream, source);
}

}  // namespace dsa::scoring
