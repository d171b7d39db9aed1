// The FP8 indexer scoring kernel, persistent (schedule.cuh): one CTA per SM
// walks its run of units. In warpgroup 0, warp 1 schedules (each unit's
// block, first key and tile count, and its head weights, into one of two
// slots) and thread 0 loads (TMA: the unit's Q block, then its key tiles;
// over a paged cache lane 0 of warp 2 loads every other key tile); warp 3
// runs the sink's helper, for a sink that has one;
// warpgroups 1..2 multiply (wgmma) and run the epilogue on alternate key
// tiles, so one warpgroup's epilogue overlaps the other's matrix product,
// across unit boundaries too.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/sm90/barrier.cuh"
#include "common/sm90/grid_dependency.cuh"
#include "common/sm90/prefetch.cuh"
#include "common/sm90/tma.cuh"
#include "common/sm90/tma.h"
#include "common/sm90/wgmma.cuh"
#include "dsa_topk/dsa_topk.h"
#include "scoring/config.h"
#include "scoring/epilogue.cuh"
#include "scoring/schedule.cuh"

namespace dsa::scoring {

struct ScoresArgs {
  const float* w;                 // [T, H]
  const std::int32_t* ks;         // [T]
  const std::int32_t* ke;         // [T]
  const std::uint32_t* row_mask;  // [T] or null: rows with bit 0 clear score nothing (row_range)
  std::int64_t num_queries;       // T
  std::int64_t num_keys;          // N
};

// Where the scores of a tile go. A sink is a kernel argument with
//   Shared                        shared memory it needs after SharedStorage;
//   init(Shared&)                 every thread, before the CTA's first barrier;
//   begin<R>(slot, t0, lane, rows, tiles)
//                                 per-lane state for the lane's R rows
//                                 (queries lane % 4 + 4r, ranges `rows`) at
//                                 the start of each unit (block t0, `tiles`
//                                 key tiles, in unit slot `slot`: the
//                                 kUnitSlots units in flight alternate);
//   put(state, Shared&, t0, key, score, valid)
//                                 every math thread, converged, once per tile
//                                 (while the warpgroup's next product runs):
//                                 score[r][half] of key index key[half],
//                                 valid[r][half] when inside row r's range;
//   finish(state, Shared&, t0)    every math thread after each unit's last tile
//                                 (a warpgroup may have no tile in a unit);
//   help(Shared&, SharedStorage&) optional (kHelper = true): warp kHelperWarp
//                                 of the producer warpgroup, beside the loop;
//                                 it walks the units as the math warps do
//                                 (unit_full) and every lane arrives on a
//                                 unit's unit_empty once done with it.
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
  __device__ Lane<R> begin(std::uint32_t, std::int64_t, int, const RowRange (&)[R], int) const {
    return {};
  }
  template <int R>
  __device__ __forceinline__ void put(Lane<R>&, Shared&, std::int64_t t0, int lane, const std::int32_t (&key)[2],
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

// ChecksumSink: the math-only control (the prefill operator's and the paged
// operator's): every valid score is folded into an xor checksum, so the
// matrix work and the score arithmetic stay and no score is stored.
struct ChecksumSink {
  std::uint32_t* checksum;  // one word, or null
  struct Shared {};
  template <int R>
  struct Lane {
    std::uint32_t x;
  };
  __device__ void init(Shared&) const {}
  template <int R>
  __device__ Lane<R> begin(std::uint32_t, std::int64_t, int, const RowRange (&)[R], int) const {
    return {0u};
  }
  template <int R>
  __device__ __forceinline__ void put(Lane<R>& st, Shared&, std::int64_t, int, const std::int32_t (&)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) st.x ^= valid[r][half] ? __float_as_uint(score[r][half]) : 0u;
    }
  }
  template <int R>
  __device__ void finish(Lane<R>& st, Shared&, std::int64_t, int) const {
    const std::uint32_t x = __reduce_xor_sync(kFullWarp, st.x);
    if (threadIdx.x % 32 == 0 && checksum != nullptr) atomicXor(checksum, x);
  }
};

// Where a launch's queries and key tiles are. A key source is a kernel
// argument with
//   q_rows(T)                     host: rows of q the launch reads (of H heads each);
//   make_maps(in, k_map, scale_map)
//                                 host: the tensor maps load_tile reads;
//   warm(args, lane)              each lane of one warp at the kernel's start:
//                                 touch what the loads after the run search
//                                 read (nothing for contiguous keys);
//   q_row(t0)                     the q row of query block t0's first query;
//   unit(t0)                      thread 0, once per unit: what load_tile needs
//                                 of block t0 (the producer has 24 registers);
//   load_tile(keys, scale, ..., unit, key0, full)
//                                 thread 0: the block's key tile from key0 (kTileKeys
//                                 rows and their scales, kKeyTileBytes +
//                                 kScaleTileBytes on `full`).
// ContiguousKeys: k [N, D] and k_scale [N], the rows' ranges index them.
struct ContiguousKeys {
  static constexpr int kProducerRegs = kContiguousProducerRegs;
  static constexpr int kProducers = 1;  // two TMA copies a tile: one thread keeps up
  std::int64_t q_rows(std::int64_t num_queries) const { return num_queries; }
  Status make_maps(const IndexerInputs& in, CUtensorMap* k_map, CUtensorMap* scale_map) const {
    Status st = sm90::make_tensor_map_rows_sw128(k_map, in.k, static_cast<std::uint64_t>(in.num_keys), kHeadDim,
                                                 static_cast<std::uint64_t>(in.k_row_stride), kTileKeys);
    if (!st.ok()) return st;
    return sm90::make_tensor_map_f32_1d(scale_map, in.k_scale, static_cast<std::uint64_t>(in.num_keys), kTileKeys);
  }
  struct Unit {};
  __device__ __forceinline__ void warm(const ScoresArgs&, int) const {}
  __device__ __forceinline__ std::int64_t q_row(std::int64_t t0) const { return t0; }
  __device__ __forceinline__ Unit unit(std::int64_t) const { return {}; }
  __device__ __forceinline__ void load_tile(std::uint8_t* keys, float* scale, const CUtensorMap* k_map,
                                            const CUtensorMap* scale_map, Unit&, std::int32_t key0,
                                            std::uint64_t* full) const {
    sm90::tma_load_2d(keys, k_map, 0, key0, full);
    sm90::tma_load_1d(scale, scale_map, key0, full);
  }
};

// PagedKeys: a paged cache (dsa_topk.h, PagedIndexerInputs). The launch's
// rows are requests' rows padded to rows_per_request (a multiple of the
// block's queries, so a query block never spans two requests: their keys
// differ); the padding rows have empty ranges. Ranges index positions
// within the request, read through its block-table row.
struct PagedKeys {
  // The table lookups need registers the contiguous producer does not; the
  // math warpgroups keep 232 (StoreSink's epilogue fits, the fused filter's
  // does not: it reads contiguous keys only).
  static constexpr int kProducerRegs = 40;
  // Producer threads, each loading every other tile of the run (the math
  // warpgroups' split): a tile's table lookup, box and bulk copies are a
  // chain of ~60 dependent instructions plus a table load every kEntries
  // entries, and one thread issuing them all was slower than the cache read
  // at large batches (its ring never filled; docs/perf-log.md D18).
  static constexpr int kProducers = 2;
  const std::uint8_t* kv_cache;     // [num_blocks, block_size * (D + 4)]
  const std::int32_t* block_table;  // the launch's first request's row
  std::int64_t table_stride;        // elements between table rows
  std::int32_t table_width;         // entries a request may use (max_blocks_per_seq)
  std::int32_t num_blocks;
  std::int32_t block_shift;         // log2(block_size)
  std::int32_t request_shift;       // log2(rows of the launch per request: 1, 2, 4 or 8)
  std::int32_t next_n;              // rows of q per request

  __host__ __device__ std::int32_t block_size() const { return 1 << block_shift; }
  // Keys a box loads: one block's, up to a tile.
  __host__ __device__ std::int32_t box_rows() const { return block_size() < kTileKeys ? block_size() : kTileKeys; }
  std::int64_t q_rows(std::int64_t num_queries) const { return (num_queries >> request_shift) * next_n; }
  __host__ __device__ std::uint32_t block_bytes() const { return static_cast<std::uint32_t>(block_size()) * (kHeadDim + sizeof(float)); }
  // Keys through a tensor map; scales by plain bulk copies (a block of 16
  // keys' 64 bytes of scales lands at a 64-byte offset, which a tensor copy's
  // destination may not have). scale_map is unused.
  Status make_maps(const IndexerInputs&, CUtensorMap* k_map, CUtensorMap* scale_map) const {
    const Status st = sm90::make_tensor_map_paged_rows_sw128(
        k_map, kv_cache, static_cast<std::uint64_t>(num_blocks), static_cast<std::uint32_t>(block_size()), kHeadDim,
        block_bytes(), static_cast<std::uint32_t>(box_rows()));
    *scale_map = *k_map;
    return st;
  }
  __device__ __forceinline__ std::int64_t q_row(std::int64_t t0) const {
    return (t0 >> request_shift) * next_n + (t0 & ((1 << request_shift) - 1));
  }
  // Lanes of one warp at the kernel's start, beside the run search: the
  // table, the cache and the weights, touched once so that their address
  // translations are done by the time the search's result lets the
  // scheduler and the producers read them (after the inputs' L2 is flushed,
  // each allocation's first access otherwise waits on a cold translation in
  // the search's wake).
  __device__ __forceinline__ void warm(const ScoresArgs& args, int lane) const {
    const void* p = lane == 0 ? static_cast<const void*>(block_table)
                    : lane == 1 ? static_cast<const void*>(kv_cache)
                    : lane == 2 ? static_cast<const void*>(args.w)
                                : nullptr;
    if (p != nullptr) sm90::prefetch_l2_line(p);
  }
  // The table entries in flight: one load's latency (~0.3 us from L2) a
  // tile, serialised in the one producer thread, would bound a CTA at ~0.3 us
  // a 64-key tile (about the cache-read time of a tile at the HBM ceiling on
  // 132 SMs is 0.25 us), so a unit reads kEntries consecutive entries at once.
  static constexpr int kEntries = 8;
  struct Unit {
    std::int32_t request;  // of the launch
    std::int32_t first;    // the first entry held (entries from first + kEntries on: not held)
    // block_table[request, first + i] (num_blocks past the width), as scalars:
    // an array here was placed in local memory.
    std::int32_t e0, e1, e2, e3, e4, e5, e6, e7;
  };
  __device__ __forceinline__ Unit unit(std::int64_t t0) const {
    Unit at{};
    at.request = static_cast<std::int32_t>(t0 >> request_shift);
    at.first = -kEntries;
    return at;
  }
  // Entry e of the unit's request, from the held ones (refilled when e is not
  // among them: kEntries independent loads, one latency).
  __device__ __forceinline__ std::int32_t table_entry(Unit& at, std::int32_t e) const {
    if (e < at.first || e >= at.first + kEntries) {
      at.first = e;
      const std::int32_t* row = block_table + static_cast<std::int64_t>(at.request) * table_stride + e;
      const auto load = [&](int i) { return e + i < table_width ? __ldg(row + i) : num_blocks; };
      at.e0 = load(0);
      at.e1 = load(1);
      at.e2 = load(2);
      at.e3 = load(3);
      at.e4 = load(4);
      at.e5 = load(5);
      at.e6 = load(6);
      at.e7 = load(7);
    }
    const std::int32_t i = e - at.first;
    const std::int32_t lo = i < 2 ? (i == 0 ? at.e0 : at.e1) : (i == 2 ? at.e2 : at.e3);
    const std::int32_t hi = i < 6 ? (i == 4 ? at.e4 : at.e5) : (i == 6 ? at.e6 : at.e7);
    return i < 4 ? lo : hi;
  }
  // One box per block the tile touches (kTileKeys / box_rows of them). An
  // entry outside [0, num_blocks), or past the table's width (only
  // unvalidated input or positions past every row's range get there), reads
  // as the block index num_blocks for the keys (out of the map: zeros) and
  // block 0 for the scales (a launch with rows to score has a block).
  __device__ __forceinline__ void load_tile(std::uint8_t* keys, float* scale, const CUtensorMap* k_map,
                                            const CUtensorMap* scale_map, Unit& at, std::int32_t key0,
                                            std::uint64_t* full) const {
    const std::int32_t box = box_rows();
    const std::int32_t mask = (1 << block_shift) - 1;
#pragma unroll
    for (int sub = 0; sub < kTileKeys / 16; ++sub) {  // a box of >= 16 keys (block sizes 16-128)
      const std::int32_t row = sub * box;
      if (row >= kTileKeys) break;
      const std::int32_t p = key0 + row;
      const std::int32_t entry = p >> block_shift;
      const std::int32_t block = table_entry(at, entry);
      const bool inside = block >= 0 && block < num_blocks;
      sm90::tma_load_3d(keys + row * kHeadDim, k_map, 0, p & mask, inside ? block : num_blocks, full);
      sm90::bulk_load(scale + row,
                      kv_cache + static_cast<std::int64_t>(inside ? block : 0) * block_bytes() +
                          (kHeadDim << block_shift) + (p & mask) * sizeof(float),
                      static_cast<std::uint32_t>(box * sizeof(float)), full);
    }
  }
};

// The 1 KiB-aligned storage inside the dynamic shared memory. The pointer is
// derived from `raw` by an offset (not rebuilt from an integer), so the
// compiler keeps knowing it is shared memory and emits LDS/STS rather than
// generic loads and stores.
__device__ __forceinline__ SharedStorage& shared_storage(std::uint8_t* raw) {
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(raw));
  return *reinterpret_cast<SharedStorage*>(raw + ((1024u - addr % 1024u) % 1024u));
}

// Warp kSchedulerWarp of warpgroup 0: walks the CTA's run from `run`,
// writing each unit and its head weights into slot u % 2 once every math
// warp is done with the slot's previous unit; a unit with no tiles ends the
// run.
template <int kHeads, int kCols>
__device__ __forceinline__ void schedule(SharedStorage& smem, const ScoresArgs& args) {
  const RunStart run = smem.run;  // from shared memory: registers are scarce here
  using S = Shape<kHeads, kCols>;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  // 32 bits suffice (24 registers): T / 4 blocks and a CTA's share of their
  // N / 64 tiles are far below 2^31 for any T, N whose inputs fit in memory.
  std::int32_t block = static_cast<std::int32_t>(run.block);
  std::int32_t skip = static_cast<std::int32_t>(run.skip), left = static_cast<std::int32_t>(run.tiles);
  std::int32_t odd = 0;
  for (std::uint32_t u = 0;; ++u) {
    const auto [slot, parity] = sm90::ring_slot<kUnitSlots>(u);
    sm90::barrier_wait(&smem.unit_empty[slot], parity ^ 1u);  // a fresh barrier: free
    Unit unit;
    while (left > 0) {
      const std::int64_t t0 = static_cast<std::int64_t>(block) * S::kQueries;
      const KeyRange r = block_key_range_warp<S::kQueries, kTileKeys>(args.ks, args.ke, args.row_mask, t0,
                                                                      args.num_queries, args.num_keys);
      const std::int32_t n = r.tiles - skip;
      if (n > 0) {
        unit.t0 = t0;
        unit.key_begin = static_cast<std::int32_t>(r.begin) + skip * kTileKeys;
        unit.tiles = min(n, left);
        unit.odd = odd;
        odd ^= unit.tiles & 1;
        left -= unit.tiles;
      }
      ++block;
      skip = 0;
      if (n > 0) break;
    }
    // The producers need the unit alone: they start its loads (Q, the table
    // entries, the first key tiles) while this warp loads the weights and
    // ranges, whose latency at a unit's start (a link of a short run's
    // start-up chain) they would otherwise wait behind. Lane 0 wrote the
    // unit, so its arrival alone releases it.
    if (lane == 0) {
      smem.unit[slot] = unit;
      sm90::barrier_arrive(&smem.unit_keys[slot]);
    }
    if (unit.tiles > 0) {
      // The math warps read the rows' ranges here rather than from global
      // memory at the start of the unit, where the loads' latency would
      // stall both warpgroups between two tiles.
      if (lane < S::kQueries) {
        const std::int64_t t = unit.t0 + lane;
        smem.rows[slot][lane] =
            t < args.num_queries ? row_range(args.ks, args.ke, args.row_mask, t, args.num_keys) : RowRange{};
      }
#pragma unroll 2  // 24 registers: more loads in flight spill
      for (int j = lane; j < kCols; j += kWarpSize) {
        const std::int64_t t = unit.t0 + j / kHeads;
        smem.half_w[slot][j] = t < args.num_queries ? 0.5f * __ldg(args.w + unit.t0 * kHeads + j) : 0.0f;
      }
    }
    __syncwarp();
    sm90::barrier_arrive(&smem.unit_full[slot]);  // every lane: its stores are released
    if (unit.tiles == 0) return;
  }
}

// Producer thread `producer` of Keys::kProducers: per unit, the Q block into
// the unit's slot (producer 0), then its key tiles through the stage ring
// (which runs on across units): all of them with one producer, else those
// whose index in the CTA's run is congruent to `producer` mod 2, the tiles
// math warpgroup `producer` takes, on the stages they use.
template <int kCols, class Keys>
__device__ __forceinline__ void produce(SharedStorage& smem, const CUtensorMap* q_map, const CUtensorMap* k_map,
                                        const CUtensorMap* scale_map, int heads, const Keys& source, int producer) {
  constexpr int kProducers = Keys::kProducers;
  static_assert(kProducers == 1 || kProducers == kMathWarpgroups, "one producer, or one per math warpgroup");
  sm90::PipelineState<kStages> st;
  st.advance(producer);
  for (std::uint32_t u = 0;; ++u) {
    const auto [slot, parity] = sm90::ring_slot<kUnitSlots>(u);
    sm90::barrier_wait(&smem.unit_keys[slot], parity);
    const Unit unit = smem.unit[slot];
    if (unit.tiles == 0) return;
    // With several producers, the scheduler must not rewrite the slot before
    // each has read it: one of them may have no tile in this unit, so the
    // math warps' arrivals alone would not wait for it.
    if (kProducers > 1) sm90::barrier_arrive(&smem.unit_empty[slot]);
    if (producer == 0) {
      // The slot's previous unit is done (the scheduler waited for it), so its
      // Q block may be overwritten.
      sm90::barrier_arrive_expect_tx(&smem.q_full[slot], kCols * kHeadDim);
      sm90::tma_load_2d(smem.q[slot], q_map, 0, static_cast<std::int32_t>(source.q_row(unit.t0) * heads),
                        &smem.q_full[slot]);
    }
    typename Keys::Unit at = source.unit(unit.t0);
    for (int i = kProducers == 1 ? 0 : (producer ^ unit.odd) & 1; i < unit.tiles; i += kProducers) {
      const std::int32_t key0 = unit.key_begin + i * kTileKeys;
      smem.pipeline.producer_acquire(st);
      std::uint64_t* full = smem.pipeline.producer_commit(st, kKeyTileBytes + kScaleTileBytes);
      source.load_tile(smem.keys[st.stage], smem.key_scale[st.stage], k_map, scale_map, at, key0, full);
      st.advance(kProducers);
    }
  }
}

// A 64-key tile times the block's kCols (query, head) columns: 4 k-steps of
// 32, issued asynchronously; the warpgroup may work on other registers until
// wait_tile.
template <int kN>
__device__ __forceinline__ void issue_tile(float (&acc)[kN], const std::uint8_t* keys, const std::uint8_t* q) {
  // Each k-step's descriptors by one add from the tile's (the address
  // arithmetic of a descriptor per k-step is integer work the warpgroup
  // issues beside the other's products).
  const std::uint64_t key_desc = sm90::smem_desc_k128_sw128(keys, 0);
  const std::uint64_t q_desc = sm90::smem_desc_k128_sw128(q, 0);
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kHeadDim / 32; ++k) {
    sm90::wgmma_m64k32_e4m3<2 * kN>(acc, sm90::smem_desc_advance(key_desc, 32 * k),
                                    sm90::smem_desc_advance(q_desc, 32 * k), k > 0);
  }
  sm90::wgmma_commit();
  sm90::fence_registers(acc);  // acc stays in place while the product runs
}

template <int kN>
__device__ __forceinline__ void wait_tile(float (&acc)[kN]) {
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
  std::int32_t key0;  // -1: nothing held
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

// One math warpgroup: per unit, the tiles whose index in the CTA's run is
// congruent to math_wg mod 2 (the stage ring's order), then the sink's finish.
template <int kHeads, int kCols, class Sink>
__device__ __forceinline__ void consume(SharedStorage& smem, typename Sink::Shared& sink_smem, const ScoresArgs& args,
                                        const Sink& sink, int math_wg) {
  using S = Shape<kHeads, kCols>;
  // Queries q = lane%4 + 4r; with fewer than 4 queries a block (decode's
  // narrow blocks) the lanes past them store nothing.
  constexpr int kStoresPerLane = S::kQueries >= 4 ? S::kQueries / 4 : 1;
  const int lane = threadIdx.x % kWarpSize;
  // Key row in the tile (and row + 8): wgmma gives each of the warpgroup's
  // warps 16 of its 64 rows.
  const int row = 16 * ((threadIdx.x / kWarpSize) % kWarpgroupWarps) + lane / 4;
  // With 8 queries per block (H = 32) holding a tile's scores spills: the
  // sink runs right after the epilogue there.
  constexpr bool kDeferPut = kStoresPerLane == 1;

  sm90::PipelineState<kStages> st;
  st.advance(math_wg);
  for (std::uint32_t u = 0;; ++u) {
    const auto [slot, parity] = sm90::ring_slot<kUnitSlots>(u);
    sm90::barrier_wait(&smem.unit_full[slot], parity);
    // Lane 0 reads the unit and broadcasts it (one shared load per warp);
    // every read of the slot is ordered before the scheduler's next write by
    // the reading thread's own arrival on unit_empty.
    Unit unit;
    if (lane == 0) unit = smem.unit[slot];
    unit.t0 = __shfl_sync(0xFFFFFFFFu, unit.t0, 0);
    unit.key_begin = __shfl_sync(0xFFFFFFFFu, unit.key_begin, 0);
    unit.tiles = __shfl_sync(0xFFFFFFFFu, unit.tiles, 0);
    unit.odd = __shfl_sync(0xFFFFFFFFu, unit.odd, 0);
    if (unit.tiles == 0) return;
    const std::int64_t t0 = unit.t0;
    HeadWeights<kHeads, kCols> weights;
    weights.load(smem.half_w[slot], lane);
    RowRange rows[kStoresPerLane];  // rows past T have an empty range: they store nothing
#pragma unroll
    for (int r = 0; r < kStoresPerLane; ++r) {
      rows[r] = lane % 4 + 4 * r < S::kQueries ? smem.rows[slot][lane % 4 + 4 * r] : RowRange{};
    }
    auto lane_state = sink.template begin<kStoresPerLane>(slot, t0, lane, rows, unit.tiles);
    sm90::barrier_wait(&smem.q_full[slot], parity);

    TileScores<kStoresPerLane> held;
    held.key0 = -1;
    const auto put_held = [&] {
      const std::int32_t key[2] = {held.key0 + row, held.key0 + row + 8};
      bool valid[kStoresPerLane][2];
#pragma unroll
      for (int r = 0; r < kStoresPerLane; ++r) {
#pragma unroll
        for (int half = 0; half < 2; ++half) valid[r][half] = key[half] >= rows[r].begin && key[half] < rows[r].end;
      }
      sink.put(lane_state, sink_smem, t0, lane, key, held.score, valid);
    };
    for (int i = (math_wg ^ unit.odd) & 1; i < unit.tiles; i += kMathWarpgroups) {
      smem.pipeline.consumer_wait(st);
      float acc[S::kAccumulators];
      issue_tile(acc, smem.keys[st.stage], smem.q[slot]);
      if (kDeferPut && held.key0 >= 0) put_held();
      wait_tile(acc);
      const float scale_lo = smem.key_scale[st.stage][row];
      const float scale_hi = smem.key_scale[st.stage][row + 8];
      // Every math thread releases the stage after its own reads of the
      // scales: one lane a warp after __syncwarp orders them too, but
      // racecheck does not see that order and reports the producer's next
      // copy into the stage as a race once a CTA reuses it.
      smem.pipeline.consumer_release(st);

      float head_sums[S::kQueries][2];
      reduce_heads<kHeads, kCols>(acc, weights, head_sums);
      held.key0 = unit.key_begin + i * kTileKeys;
#pragma unroll
      for (int r = 0; r < kStoresPerLane; ++r) {
        const int q_index = lane % 4 + 4 * r;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          held.score[r][half] =
              apply_key_scale(lane_value(head_sums, q_index, half), half == 0 ? scale_lo : scale_hi);
        }
      }
      if (!kDeferPut) put_held();
      st.advance(kMathWarpgroups);
    }
    if (kDeferPut && held.key0 >= 0) put_held();
    sink.finish(lane_state, sink_smem, t0, lane);
    // Every read of the slot (Q by the warpgroup's products, which have
    // completed, and this thread's half_w loads) is done. Every math thread
    // arrives: one lane's arrival after __syncwarp orders its warp's reads
    // too, but racecheck does not see that order and reported the
    // scheduler's next half_w write as a race once a CTA reused a slot.
    sm90::barrier_arrive(&smem.unit_empty[slot]);
  }
}

// Whether a sink has a helper warp (scoring/config.h, kHelperWarp): it
// declares `static constexpr bool kHelper = true` and help().
template <class Sink>
inline constexpr bool kSinkHasHelper = requires { requires Sink::kHelper; };

// The producer warpgroup's registers: the key source's, or more when the
// sink's helper warp (which runs in that warpgroup) declares it needs more
// (`static constexpr int kHelperRegs`); the math warpgroups get the rest.
template <class Sink, class Keys>
constexpr int producer_regs() {
  if constexpr (requires { Sink::kHelperRegs; }) {
    return Sink::kHelperRegs > Keys::kProducerRegs ? Sink::kHelperRegs : Keys::kProducerRegs;
  } else {
    return Keys::kProducerRegs;
  }
}

// The sink's shared memory, after SharedStorage.
template <class Sink>
__device__ __forceinline__ typename Sink::Shared& sink_storage(SharedStorage& smem) {
  return *reinterpret_cast<typename Sink::Shared*>(reinterpret_cast<std::uint8_t*>(&smem) + sizeof(SharedStorage));
}

template <int kHeads, int kCols, class Sink, class Keys>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_scores_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap scale_map, const ScoresArgs args, const Sink sink,
                          const Keys source) {
  using S = Shape<kHeads, kCols>;
  // A top-k launched after this kernel with after_producer (the unfused
  // route's) may take the SMs this grid's CTAs leave, and waits there for
  // this grid's end; a kernel launched the ordinary way still starts after it.
  sm90::allow_dependent_launch();
  if (threadIdx.x / kWarpSize == kSchedulerWarp) source.warm(args, static_cast<int>(threadIdx.x % kWarpSize));
  extern __shared__ std::uint8_t smem_raw[];
  SharedStorage& smem = shared_storage(smem_raw);
  if (threadIdx.x == 0) {
    smem.pipeline.init(kWarpgroupThreads);  // every thread of the tile's math warpgroup
    for (int s = 0; s < kUnitSlots; ++s) {
      sm90::barrier_init(&smem.unit_keys[s], 1);          // the scheduler warp's lane 0
      sm90::barrier_init(&smem.unit_full[s], kWarpSize);  // the scheduler warp's lanes
      sm90::barrier_init(&smem.q_full[s], 1);
      // every math thread, the producers when there are several, and the
      // sink's helper warp when it has one
      sm90::barrier_init(&smem.unit_empty[s], kMathThreads + (Keys::kProducers > 1 ? Keys::kProducers : 0) +
                                                  (kSinkHasHelper<Sink> ? kWarpSize : 0));
    }
    sm90::barrier_init_fence();
  }
  sink.init(sink_storage<Sink>(smem));
  // Every thread takes part in the search. Its barriers publish the
  // initialisation above, and it ends with one after which no thread writes
  // the shared memory it used (smem.run is only read from then on).
  const RunStart run = find_run<S::kQueries, kTileKeys, kThreads>(args.ks, args.ke, args.row_mask, args.num_queries,
                                                                  args.num_keys, smem.warp_sums, &smem.run);
  if (run.tiles == 0) return;  // the same for every thread of the CTA

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<producer_regs<Sink, Keys>()>();
    // Producer 0 is thread 0, producer 1 lane 0 of warp kSecondProducerWarp
    // (the scheduler's warp is busy, and lanes of one warp would serialise).
    constexpr int kSecondProducerWarp = 2;
    static_assert(kSecondProducerWarp != kSchedulerWarp && kSecondProducerWarp < kWarpgroupWarps);
    static_assert(kHelperWarp != 0 && kHelperWarp != kSchedulerWarp && kHelperWarp != kSecondProducerWarp &&
                  kHelperWarp < kWarpgroupWarps);
    if (threadIdx.x == 0) {
      sm90::tma_prefetch_descriptor(&q_map);
      sm90::tma_prefetch_descriptor(&k_map);
      produce<kCols>(smem, &q_map, &k_map, &scale_map, kHeads, source, 0);
    } else if (Keys::kProducers > 1 && threadIdx.x == kSecondProducerWarp * kWarpSize) {
      produce<kCols>(smem, &q_map, &k_map, &scale_map, kHeads, source, 1);
    } else if (threadIdx.x / kWarpSize == kSchedulerWarp) {
      schedule<kHeads, kCols>(smem, args);
    } else if (threadIdx.x / kWarpSize == kHelperWarp) {
      if constexpr (kSinkHasHelper<Sink>) sink.help(sink_storage<Sink>(smem), smem);
    }
  } else {
    sm90::setmaxnreg_inc<math_regs(producer_regs<Sink, Keys>())>();
    // The warpgroup index through a shuffle from lane 0: ptxas then knows it
    // is warp-uniform and keeps the stage ring's index and the products'
    // descriptors in uniform registers, without most of the moves into them
    // that a per-thread index costs on every tile (docs/perf-log.md S51).
    const int math_wg = __shfl_sync(0xFFFFFFFFu, warpgroup - 1, 0);
    consume<kHeads, kCols>(smem, sink_storage<Sink>(smem), args, sink, math_wg);
  }
}

}  // namespace dsa::scoring
