#include "scoring/scoring.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/row_range.cuh"
#include "scoring/launch.cuh"

namespace dsa::scoring {
namespace {

// A warp per row: a row's outside part is usually short (a causal suffix
// leaves T - 1 - t columns of row t), too short to busy a block.
constexpr int kFillRowsPerBlock = 8;
constexpr int kFillThreads = 32 * kFillRowsPerBlock;

// -inf into columns [0, begin) and [end, N) of each row, the range clamped
// as the scoring kernel clamps it, so the two kernels write disjoint entries
// and together every entry of [0, N). Coalesced 4-byte stores: a row's base
// is only 4-byte aligned for an arbitrary stride.
__global__ void __launch_bounds__(kFillThreads)
    fill_outside_kernel(float* __restrict__ scores, std::int64_t stride, const std::int32_t* __restrict__ ks,
                        const std::int32_t* __restrict__ ke, std::int64_t num_queries, std::int64_t num_keys) {
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kFillRowsPerBlock + threadIdx.x / 32;
  if (t >= num_queries) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const RowRange r = row_range(ks, ke, nullptr, t, num_keys);
  float* row = scores + t * stride;
  for (std::int64_t s = lane; s < r.begin; s += 32) row[s] = -INFINITY;
  for (std::int64_t s = r.end + lane; s < num_keys; s += 32) row[s] = -INFINITY;
}

Status fill_outside(const IndexerScoresParams& p, CUstream_st* stream) {
  if (p.num_queries <= 0 || p.num_keys <= 0) return Status::Ok();
  const std::int64_t blocks = (p.num_queries + kFillRowsPerBlock - 1) / kFillRowsPerBlock;
  fill_outside_kernel<<<static_cast<unsigned>(blocks), kFillThreads, 0, stream>>>(p.scores, p.score_stride, p.ks,
                                                                                   p.ke, p.num_queries, p.num_keys);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : scoring_cuda_error(err, "indexer_scores: fill outside the ranges");
}

}  // namespace

Status launch_indexer_scores(const IndexerScoresParams& p, CUstream_st* stream, const std::uint32_t* row_mask) {
  if (p.fill_outside) {
    const Status st = fill_outside(p, stream);
    if (!st.ok()) return st;
  }
  return launch_scoring(p, row_mask, StoreSink{p.scores, p.score_stride}, stream);
}

}  // namespace dsa::scoring
