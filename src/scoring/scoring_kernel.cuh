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
  const float* w;                 // [T, H]
  const std::int32_t* ks;         // [T]
  const std::int32_t* ke;         // [T]
  const std::uint32_t* row_mask;  // [T] or null: rows with 0 score nothing
  std::int64_t num_queries;       // T
  std::int64_t num_keys;          // N
  std::int64_t chunk_keys;        // keys per blockIdx.y chunk, a multiple of kTileKeys
};

// Where the scores of a tile go. A sink is a kernel argument with
//   Shared                        shared memory it needs after SharedStorage;
//   init(Shared&)                 thread 0, before the CTA's first barrier;
//   begin<R>(t0, lane, rows)      per-lane state for the lane's R rows
//                                 (queries lane % 4 + 4r, ranges `rows`);
//   put(state, Shared&, t0, key, score, valid)
//                                 every math thread, converged, once per tile
//                                 (while the warpgroup's next product runs):
//                                 score[r][half] of key index key[half],
//                                 valid[r][half] when inside row r's range;
//   finish(state, Shared&, t0)    every math thread once after its last tile.
// StoreSink writes the scores matrix (the indexer_scores operator); the fused
// operator's sinks live in src/fused/sinks.cuh.
struct StoreSink {
  float* scores;  // [T, stride]
  std::int64_t stride;
  struct Shared {};
  template <int R>
  struct Lane {};
  __device__ void init(Shared&) const {}
  template <int R>
  __device__ Lane<R> begin(std::int64_t, int, const RowRange (&)[R]) const {
    return {};
  }
  template <int R>
  __device__ __forceinline__ void put(Lane<R>&, Shared&, std::int64_t t0, int lane, const std::int64_t (&key)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float* out_row = scores + (t0 + lane % 4 + 4 * r) * stride;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (valid[r][half]) out_row[key[half]] = score[r][half];
      }
    }
  }
  template <int R>
  __device__ void finish(Lane<R>&, Shared&, std::int64_t, int) const {}
};

// The 1 KiB-aligned storage inside the dynamic shared memory. The pointer is
// derived from `raw` by an offset (not rebuilt from an integer), so the
// compiler keeps knowing it is shared memory and emits LDS/STS rather than
// generic loads and stores.
__device__ __forceinline__ SharedStorage& shared_storage(std::uint8_t* raw) {
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(raw));
  return *reinterpret_cast<SharedStorage*>(raw + ((1024u - addr % 1024u) % 1024u));
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

// A 64-key tile times the block's 256 (query, head) columns: 4 k-steps of 32,
// issued asynchronously; the warpgroup may work on other registers until
// wait_tile.
__device__ __forceinline__ void issue_tile(float (&acc)[128], const std::uint8_t* keys, const std::uint8_t* q) {
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kHeadDim / 32; ++k) {
    sm90::wgmma_m64n256k32_e4m3(acc, sm90::smem_desc_k128_sw128(keys, 32 * k), sm90::smem_desc_k128_sw128(q, 32 * k),
                                k > 0);
  }
  sm90::wgmma_commit();
  sm90::fence_registers(acc);  // acc stays in place while the product runs
}

__device__ __forceinline__ void wait_tile(float (&acc)[128]) {
  sm90::wgmma_wait<0>();
  sm90::fence_registers(acc);
}

// The scores of one tile, as the sink takes them; the consumer holds a tile's
// scores until its next tile's product is issued, so the sink's work runs in
// the shadow of the tensor cores instead of between two products.
// Only the tile's first key and the scores are held (registers are
// tight with 8 queries per block): keys and range tests are recomputed at put.
template <int R>
struct TileScores {
  std::int64_t key0;  // -1: nothing held
  float score[R][2];
};

// Picks out[q][half] for the query this lane stores, q = kLaneQuery + 4r,
// with compile-time indices only (no local memory).
template <int kQueries>
__device__ __forceinline__ float lane_value(const float (&out)[kQueries][2], int q, int half) {
  float v = out[0][half];
#pragma unroll
  for (int i = 1; i < kQueries; ++i) v = (q == i) ? out[i][half] : v;
  return v;
}

template <int kHeads, class Sink>
__device__ __forceinline__ void consume(SharedStorage& smem, typename Sink::Shared& sink_smem, const ScoresArgs& args,
                                        const Sink& sink, std::int64_t t0, const KeyRange& range, int math_wg) {
  using S = Shape<kHeads>;
  constexpr int kStoresPerLane = S::kQueries / 4;  // queries q = lane%4 + 4r
  const int lane = threadIdx.x % 32;
  const int row = 16 * ((threadIdx.x / 32) % 4) + lane / 4;  // key row in the tile (and row + 8)

  HeadWeights<kHeads> weights;
  weights.load(args.w, t0, args.num_queries, lane);
  RowRange rows[kStoresPerLane];
#pragma unroll
  for (int r = 0; r < kStoresPerLane; ++r) {
    const std::int64_t t = t0 + lane % 4 + 4 * r;
    // Rows past T get an empty range: they store nothing.
    rows[r] = t < args.num_queries ? row_range(args.ks, args.ke, args.row_mask, t, args.num_keys) : RowRange{};
  }
  auto lane_state = sink.template begin<kStoresPerLane>(t0, lane, rows);

  sm90::barrier_wait(&smem.q_full, 0);
  sm90::PipelineState<kStages> st;
  st.advance(math_wg);
  // With 8 queries per block (H = 32) holding a tile's scores spills: the
  // sink runs right after the epilogue there.
  constexpr bool kDeferPut = kStoresPerLane == 1;
  TileScores<kStoresPerLane> held;
  held.key0 = -1;
  const auto put_held = [&] {
    const std::int64_t key[2] = {held.key0 + row, held.key0 + row + 8};
    bool valid[kStoresPerLane][2];
#pragma unroll
    for (int r = 0; r < kStoresPerLane; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) valid[r][half] = key[half] >= rows[r].begin && key[half] < rows[r].end;
    }
    sink.put(lane_state, sink_smem, t0, lane, key, held.score, valid);
  };
  for (int i = math_wg; i < range.tiles; i += kMathWarpgroups) {
    smem.pipeline.consumer_wait(st);
    float acc[128];
    issue_tile(acc, smem.keys[st.stage], smem.q);
    if (kDeferPut && held.key0 >= 0) put_held();
    wait_tile(acc);
    const float scale_lo = smem.key_scale[st.stage][row];
    const float scale_hi = smem.key_scale[st.stage][row + 8];
    __syncwarp();
    if (lane == 0) smem.pipeline.consumer_release(st);  // 4 warps release a stage

    float head_sums[S::kQueries][2];
    reduce_heads<kHeads>(acc, weights, head_sums);
    held.key0 = range.begin + static_cast<std::int64_t>(i) * kTileKeys;
#pragma unroll
    for (int r = 0; r < kStoresPerLane; ++r) {
      const int q = lane % 4 + 4 * r;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        held.score[r][half] = apply_key_scale(lane_value(head_sums, q, half), half == 0 ? scale_lo : scale_hi);
      }
    }
    if (!kDeferPut) put_held();
    st.advance(kMathWarpgroups);
  }
  if (kDeferPut && held.key0 >= 0) put_held();
  sink.finish(lane_state, sink_smem, t0, lane);
}

// The sink's shared memory, after SharedStorage.
template <class Sink>
__device__ __forceinline__ typename Sink::Shared& sink_storage(SharedStorage& smem) {
  return *reinterpret_cast<typename Sink::Shared*>(reinterpret_cast<std::uint8_t*>(&smem) + sizeof(SharedStorage));
}

template <int kHeads, class Sink>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_scores_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap scale_map, const ScoresArgs args, const Sink sink) {
  using S = Shape<kHeads>;
  extern __shared__ std::uint8_t smem_raw[];
  SharedStorage& smem = shared_storage(smem_raw);
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * S::kQueries;
  const KeyRange range = block_key_range<S::kQueries, kTileKeys>(args.ks, args.ke, args.row_mask, t0, args.num_queries,
                                                                 args.num_keys, blockIdx.y, args.chunk_keys);
  if (range.tiles == 0) return;  // the same for every thread of the CTA

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    smem.pipeline.init(4);
    sm90::barrier_init(&smem.q_full, 1);
    sink.init(sink_storage<Sink>(smem));
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
    consume<kHeads>(smem, sink_storage<Sink>(smem), args, sink, t0, range, warpgroup - 1);
  }
}

}  // namespace dsa::scoring
