// The FP8 indexer scoring kernel: warpgroup 0 loads (TMA), warpgroups 1..2
// multiply (wgmma) and run the epilogue on alternate key tiles, so one
// warpgroup's epilogue overlaps the other's matrix product.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/sm90/barrier.cuh"
#include "common/sm90/tma.cuh"
#include "common/sm90/wgmma.cuh"
#include "scoring/config.h"
#include "scoring/epilogue.cuh"
#include "scoring/schedule.cuh"

namespace dsa::scoring {

struct ScoresArgs {
  const float* w;             // [T, H]
  const std::int32_t* ks;     // [T]
  const std::int32_t* ke;     // [T]
  std::int64_t num_queries;   // T
  std::int64_t num_keys;      // N
  std::int64_t chunk_keys;    // keys per blockIdx.y chunk, a multiple of kTileKeys
  float* scores;              // [T, score_stride]
  std::int64_t score_stride;
};

__device__ __forceinline__ SharedStorage& shared_storage(std::uint8_t* raw) {
  const std::uintptr_t base = (reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023};
  return *reinterpret_cast<SharedStorage*>(base);
}

// One thread: the Q block once, then every key tile of the range.
__device__ __forceinline__ void produce(SharedStorage& smem, const CUtensorMap* q_map, const CUtensorMap* k_map,
                                        const CUtensorMap* scale_map, std::int64_t first_q_row,
                                        const KeyRange& range) {
  sm90::barrier_arrive_expect_tx(&smem.q_full, kQBytes);
  sm90::tma_load_2d(smem.q, q_map, 0, static_cast<std::int32_t>(first_q_row), &smem.q_full);
  sm90::PipelineState<kStages> st;
  for (int i = 0; i < range.tiles; ++i) {
    const std::int32_t key0 = static_cast<std::int32_t>(range.begin + static_cast<std::int64_t>(i) * kTileKeys);
    smem.pipeline.producer_acquire(st);
    std::uint64_t* full = smem.pipeline.producer_commit(st, kKeyTileBytes + kScaleTileBytes);
    sm90::tma_load_2d(smem.keys[st.stage], k_map, 0, key0, full);
    sm90::tma_load_1d(smem.key_scale[st.stage], scale_map, key0, full);
    st.advance();
  }
}

// A 64-key tile times the block's 256 (query, head) columns: 4 k-steps of 32.
__device__ __forceinline__ void multiply_tile(float (&acc)[128], const std::uint8_t* keys, const std::uint8_t* q) {
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kHeadDim / 32; ++k) {
    sm90::wgmma_m64n256k32_e4m3(acc, sm90::smem_desc_k128_sw128(keys, 32 * k), sm90::smem_desc_k128_sw128(q, 32 * k),
                                k > 0);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_registers(acc);
}

// Picks out[q][half] for the query this lane stores, q = kLaneQuery + 4r,
// with compile-time indices only (no local memory).
template <int kQueries>
__device__ __forceinline__ float lane_value(const float (&out)[kQueries][2], int q, int half) {
  float v = out[0][half];
#pragma unroll
  for (int i = 1; i < kQueries; ++i) v = (q == i) ? out[i][half] : v;
  return v;
}

template <int kHeads>
__device__ __forceinline__ void consume(SharedStorage& smem, const ScoresArgs& args, std::int64_t t0,
                                        const KeyRange& range, int math_wg) {
  using S = Shape<kHeads>;
  constexpr int kStoresPerLane = S::kQueries / 4;  // queries q = lane%4 + 4r
  const int lane = threadIdx.x % 32;
  const int row = 16 * ((threadIdx.x / 32) % 4) + lane / 4;  // key row in the tile (and row + 8)

  HeadWeights<kHeads> weights;
  weights.load(args.w, t0, args.num_queries, lane);
  std::int32_t row_ks[kStoresPerLane], row_ke[kStoresPerLane];
#pragma unroll
  for (int r = 0; r < kStoresPerLane; ++r) {
    const std::int64_t t = t0 + lane % 4 + 4 * r;
    const RowRange rr = t < args.num_queries ? row_range(args.ks, args.ke, t, args.num_keys) : RowRange{};
    row_ks[r] = rr.begin;  // rows past T get an empty range: they store nothing
    row_ke[r] = rr.end;
  }

  sm90::barrier_wait(&smem.q_full, 0);
  sm90::PipelineState<kStages> st;
  st.advance(math_wg);
  for (int i = math_wg; i < range.tiles; i += kMathWarpgroups) {
    smem.pipeline.consumer_wait(st);
    float acc[128];
    multiply_tile(acc, smem.keys[st.stage], smem.q);
    const float scale_lo = smem.key_scale[st.stage][row];
    const float scale_hi = smem.key_scale[st.stage][row + 8];
    __syncwarp();
    if (lane == 0) smem.pipeline.consumer_release(st);  // 4 warps release a stage

    float head_sums[S::kQueries][2];
    reduce_heads<kHeads>(acc, weights, head_sums);
    const std::int64_t key0 = range.begin + static_cast<std::int64_t>(i) * kTileKeys;
#pragma unroll
    for (int r = 0; r < kStoresPerLane; ++r) {
      const int q = lane % 4 + 4 * r;
      float* out_row = args.scores + (t0 + q) * args.score_stride;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::int64_t s = key0 + row + 8 * half;
        if (s >= row_ks[r] && s < row_ke[r]) {
          out_row[s] = apply_key_scale(lane_value(head_sums, q, half), half == 0 ? scale_lo : scale_hi);
        }
      }
    }
    st.advance(kMathWarpgroups);
  }
}

template <int kHeads>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_scores_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap scale_map, const ScoresArgs args) {
  using S = Shape<kHeads>;
  extern __shared__ std::uint8_t smem_raw[];
  SharedStorage& smem = shared_storage(smem_raw);
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * S::kQueries;
  const KeyRange range = block_key_range<S::kQueries, kTileKeys>(args.ks, args.ke, t0, args.num_queries,
                                                                 args.num_keys, blockIdx.y, args.chunk_keys);
  if (range.tiles == 0) return;  // the same for every thread of the CTA

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    smem.pipeline.init(4);
    sm90::barrier_init(&smem.q_full, 1);
    sm90::barrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      sm90::tma_prefetch_descriptor(&k_map);
      produce(smem, &q_map, &k_map, &scale_map, t0 * kHeads, range);
    }
  } else {
    sm90::setmaxnreg_inc<kMathRegs>();
    consume<kHeads>(smem, args, t0, range, warpgroup - 1);
  }
}

}  // namespace dsa::scoring
