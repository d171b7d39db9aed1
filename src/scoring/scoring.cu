#include "scoring/scoring.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/sm90/tma.h"
#include "scoring/scoring_kernel.cuh"

namespace dsa::scoring {
namespace {

constexpr int kCtasPerSmTarget = 8;          // enough waves that the tail wave costs little
constexpr std::int64_t kMinChunkKeys = 1024;  // below this the prologue dominates a CTA
constexpr std::int64_t kMaxChunkKeys = 16384;

Status cuda_error(cudaError_t err, const char* what) {
  return {StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(err)};
}

template <int kHeads>
Status launch(const IndexerScoresParams& p, CUstream_st* stream) {
  using S = Shape<kHeads>;
  CUtensorMap q_map, k_map, scale_map;
  Status st = sm90::make_tensor_map_rows_sw128(&q_map, p.q, static_cast<std::uint64_t>(p.num_queries) * kHeads,
                                               kHeadDim, kHeadDim, kTileCols);
  if (st.ok()) {
    st = sm90::make_tensor_map_rows_sw128(&k_map, p.k, static_cast<std::uint64_t>(p.num_keys), kHeadDim,
                                          static_cast<std::uint64_t>(p.k_row_stride), kTileKeys);
  }
  if (st.ok()) st = sm90::make_tensor_map_f32_1d(&scale_map, p.k_scale, static_cast<std::uint64_t>(p.num_keys), kTileKeys);
  if (!st.ok()) return st;

  int device = 0, sm_count = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  const std::int64_t chunk = choose_chunk_keys(p.num_queries, p.num_keys, kHeads, sm_count);
  const ScoresArgs args{p.w, p.ks, p.ke, p.num_queries, p.num_keys, chunk, p.scores, p.score_stride};
  const dim3 grid(static_cast<unsigned>((p.num_queries + S::kQueries - 1) / S::kQueries),
                  static_cast<unsigned>((p.num_keys + chunk - 1) / chunk));
  const int smem_bytes = static_cast<int>(sizeof(SharedStorage)) + 1024;
  auto kernel = indexer_scores_kernel<kHeads>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) return cuda_error(err, "scoring kernel shared memory");
  kernel<<<grid, kThreads, smem_bytes, stream>>>(q_map, k_map, scale_map, args);
  err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "scoring kernel launch");
}

}  // namespace

std::int64_t choose_chunk_keys(std::int64_t num_queries, std::int64_t num_keys, int num_heads, int sm_count) {
  const std::int64_t queries_per_block = kTileCols / num_heads;
  const std::int64_t blocks = (num_queries + queries_per_block - 1) / queries_per_block;
  const std::int64_t target_ctas = static_cast<std::int64_t>(std::max(sm_count, 1)) * kCtasPerSmTarget;
  // Split each block's keys into equal chunks only as far as the grid needs:
  // a large T keeps whole rows (no small trailing chunk with a full prologue).
  const std::int64_t splits = std::max<std::int64_t>(1, (target_ctas + blocks / 2) / blocks);
  std::int64_t chunk = std::clamp((num_keys + splits - 1) / splits, kMinChunkKeys, kMaxChunkKeys);
  // grid.y is at most 65535 chunks.
  chunk = std::max(chunk, (num_keys + 65534) / 65535);
  return (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
}

Status launch_indexer_scores(const IndexerScoresParams& p, CUstream_st* stream) {
  if (p.num_queries == 0 || p.num_keys == 0) return Status::Ok();
  return p.num_heads == 64 ? launch<64>(p, stream) : launch<32>(p, stream);
}

}  // namespace dsa::scoring
