// The paged indexer's streaming selection (PagedPlan::stream_select,
// plan.h): the top K of each row chosen inside the scoring kernel, with no
// score stored and no top-k pass after it.
//   * StreamSelectSink: each math warpgroup keeps, for the unit (a piece of
//     one row: blocks of one query) it is scoring, the scores above a
//     running bar in its shared memory, as (score bits, position) entries.
//     When the buffer is nearly full the warpgroup cuts it to the piece's
//     top K so far and raises the bar to the K-th key; at the unit's end it
//     cuts once more and appends the piece's top K to the row's list in
//     the workspace. The warpgroup that completes the row (its keys counted
//     in a per-row counter) reads the row's list back through the same
//     buffer and writes the row's output.
//   * stream_select_zero_kernel: the rows' counters zeroed and their
//     outputs filled with -1 (values -inf) before the scoring kernel, which
//     is launched programmatically and waits for these writes before its
//     first global one; rows of fewer than K keys keep the fill past them.
// Why: at large batches the unfused pipeline's score stores cost the
// scoring kernel ~7 % and the top-k pass after it another ~4 %
// (docs/perf-log.md D25, D28). The sink's work sits on the math
// warpgroups' chain a tile, though, which at one token a request already
// paces the tile, so the route is slower than the unfused one (D26, D27)
// and only taken when pinned.
//
// Exactness (any-tie): a warpgroup's buffer always holds at least K entries
// at or above the bar once it has one (a cut keeps exactly the K largest,
// ties with the K-th taken in any order), and a key enters only above the
// bar, so every key left out ranks at or below the K-th key kept; the
// piece's final cut, the list and the row's merge keep the same property.
#pragma once

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/sm90/barrier.cuh"
#include "common/sm90/grid_dependency.cuh"
#include "common/warp.h"
#include "decode/plan.h"
#include "scoring/config.h"
#include "selection/device/radix.cuh"

namespace dsa::decode {

// Entries a math warpgroup holds, and the tiles between two looks at its
// count: a tile adds at most kTileKeys entries (one query a block), so a cut
// at more than kStreamCapacity - kStreamSlack entries leaves room for the
// tiles until the next look.
inline constexpr int kStreamCapacity = 4096;
inline constexpr int kStreamCheckTiles = 8;
inline constexpr int kStreamSlack = kStreamCheckTiles * scoring::kTileKeys;
static_assert(kStreamCapacity - kStreamSlack > kStreamMaxK, "a cut must have more than K entries to cut");
inline constexpr int kStreamPerThread = kStreamCapacity / scoring::kWarpgroupThreads;

struct StreamSelectSink {
  std::uint32_t* state;         // [rows, kStreamStateWords]: zero at launch
  std::uint64_t* list;          // [rows, list_capacity]: the pieces' entries
  std::int64_t list_capacity;   // a row's keys at most (no piece holds more than its keys)
  std::int32_t k;               // K <= kStreamMaxK
  std::int32_t* indices;        // [rows, k]: -1 at launch
  float* values;                // [rows, k] or null: -inf at launch

  struct Group {
    std::uint64_t entries[kStreamCapacity];  // (score bits << 32) | position
    std::uint32_t count;
    std::uint32_t word;  // a value thread 0 of the warpgroup broadcasts
    std::uint32_t sums[2][scoring::kWarpgroupWarps];
    std::uint32_t counts[2][scoring::kWarpgroupWarps][3];  // the cut's three counts a round
  };
  struct Shared {
    Group group[scoring::kMathWarpgroups];
  };
  template <int R>
  struct Lane {
    std::uint32_t tiles;  // the warpgroup's tiles of the unit so far (the same in all its threads)
    std::uint32_t keys;   // this thread's scored keys of the unit
    float bar;            // once closed, a new entry's score must exceed it: score > key_score(k-th key)
                          // is key > the k-th key for every score (NaN and -0 included)
    bool open;            // no bar yet: every key enters (NaN and -inf too: a row may need them)
    std::int32_t length;  // the row's keys (thread 0 of each warp: the lane holding the row's range)
  };

  __device__ static int group_index() { return static_cast<int>(threadIdx.x) / scoring::kWarpgroupThreads - 1; }
  __device__ static int group_thread() { return static_cast<int>(threadIdx.x) % scoring::kWarpgroupThreads; }
  __device__ static void group_sync() { sm90::named_barrier_sync(1 + group_index(), scoring::kWarpgroupThreads); }

  __device__ void init(Shared& sh) const {
    if (threadIdx.x == 0) {
      for (Group& g : sh.group) g.count = 0;
    }
  }
  template <int R>
  __device__ Lane<R> begin(std::uint32_t, std::int64_t, int, const RowRange (&rows)[R], int) const {
    static_assert(R == 1, "one query a block");
    return {0u, 0u, 0.0f, true, rows[0].end - rows[0].begin};
  }

  // The warpgroup's sum of x (every thread gets it); slot: 0 or 1, the
  // other of the previous call's (a barrier lies between a slot's reads
  // and its next writes).
  __device__ static std::uint32_t group_sum(Group& g, std::uint32_t x, int slot) {
    const std::uint32_t w = __reduce_add_sync(kFullWarp, x);
    const int warp = group_thread() / kWarpSize;
    if (threadIdx.x % kWarpSize == 0) g.sums[slot][warp] = w;
    group_sync();
    std::uint32_t total = 0;
#pragma unroll
    for (int i = 0; i < scoring::kWarpgroupWarps; ++i) total += g.sums[slot][i];
    return total;
  }
  // The warpgroup's exclusive prefix sum of x in thread order.
  __device__ static std::uint32_t group_scan(Group& g, std::uint32_t x, int slot) {
    const int lane = group_thread() % kWarpSize, warp = group_thread() / kWarpSize;
    const std::uint32_t inclusive = selection::device::warp_inclusive_sum(x);
    if (lane == kWarpSize - 1) g.sums[slot][warp] = inclusive;
    group_sync();
    std::uint32_t before = 0;
#pragma unroll
    for (int i = 0; i < scoring::kWarpgroupWarps; ++i) before += i < warp ? g.sums[slot][i] : 0u;
    return before + inclusive - x;
  }

  // Appends each lane's entries with `take`, two a lane, one shared atomic
  // a warp (warp_append); the warpgroup's count must leave room for them.
  __device__ static void append(Group& g, bool take0, std::uint64_t entry0, bool take1, std::uint64_t entry1) {
    const std::uint32_t n = (take0 ? 1u : 0u) + (take1 ? 1u : 0u);
    if (!__any_sync(kFullWarp, n != 0)) return;
    const std::uint32_t at = selection::device::warp_append<2>(n, &g.count);
    if (take0) g.entries[at] = entry0;
    if (take1) g.entries[at + (take0 ? 1u : 0u)] = entry1;
  }
  __device__ static std::uint32_t entry_key(std::uint64_t e) {
    return score_key_fast(__uint_as_float(static_cast<std::uint32_t>(e >> 32)));
  }

  // Cuts the warpgroup's n > k entries to their k largest (ties with the
  // k-th in any order) and returns the k-th key; collective over the
  // warpgroup, n the same in all its threads.
  __device__ std::uint32_t cut(Group& g, std::uint32_t n) const {
    const int tid = group_thread();
    std::uint64_t e[kStreamPerThread];
    std::uint32_t key[kStreamPerThread];  // 0 for no entry: every score key exceeds it
#pragma unroll
    for (int j = 0; j < kStreamPerThread; ++j) {
      const std::uint32_t i = static_cast<std::uint32_t>(tid + j * scoring::kWarpgroupThreads);
      e[j] = i < n ? g.entries[i] : 0;
      key[j] = i < n ? entry_key(e[j]) : 0u;
    }
    const auto kk = static_cast<std::uint32_t>(k);
    // The k-th key: the largest v with at least k keys >= v, two bits a
    // round (three counts, one barrier).
    std::uint32_t v = 0;
    int slot = 0;
    const int warp = tid / kWarpSize;
    for (int b = 30; b >= 0; b -= 2) {
      std::uint32_t c[3] = {0u, 0u, 0u};
#pragma unroll
      for (int j = 0; j < kStreamPerThread; ++j) {
#pragma unroll
        for (int d = 0; d < 3; ++d) c[d] += key[j] >= (v | (static_cast<std::uint32_t>(d + 1) << b)) ? 1u : 0u;
      }
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        const std::uint32_t w = __reduce_add_sync(kFullWarp, c[d]);
        if (threadIdx.x % kWarpSize == 0) g.counts[slot][warp][d] = w;
      }
      group_sync();
      std::uint32_t step = 0;
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        std::uint32_t total = 0;
#pragma unroll
        for (int i = 0; i < scoring::kWarpgroupWarps; ++i) total += g.counts[slot][i][d];
        if (total >= kk) step = static_cast<std::uint32_t>(d + 1);
      }
      v |= step << b;
      slot ^= 1;
    }
    std::uint32_t above = 0, ties = 0;
#pragma unroll
    for (int j = 0; j < kStreamPerThread; ++j) {
      above += key[j] > v ? 1u : 0u;
      ties += key[j] == v ? 1u : 0u;
    }
    const std::uint32_t above_total = group_sum(g, above, slot);
    slot ^= 1;
    const std::uint32_t tie_rank = group_scan(g, ties, slot);
    slot ^= 1;
    const std::uint32_t tie_quota = kk - above_total;  // 1..all_ties
    const std::uint32_t tie_kept =
        tie_rank >= tie_quota ? 0u : (tie_quota - tie_rank < ties ? tie_quota - tie_rank : ties);
    const std::uint32_t at = group_scan(g, above + tie_kept, slot);
    // Every thread holds its entries in registers: the front may be rewritten.
    group_sync();
    std::uint32_t out = at, tied = 0;
#pragma unroll
    for (int j = 0; j < kStreamPerThread; ++j) {
      bool keep = key[j] > v;
      if (key[j] == v) keep = tied++ < tie_kept;
      if (keep) g.entries[out++] = e[j];
    }
    if (tid == 0) g.count = kk;
    group_sync();
    return v;
  }

  // The warpgroup's count, read by all its threads between two barriers
  // (no thread appends before every thread has read it).
  __device__ static std::uint32_t group_count(Group& g) {
    group_sync();
    const std::uint32_t n = g.count;
    group_sync();
    return n;
  }

  template <int R>
  __device__ __forceinline__ void put(Lane<R>& st, Shared& sh, std::int64_t, int, const std::int32_t (&key)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
    Group& g = sh.group[group_index()];
    bool take[2];
    std::uint64_t entry[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      take[half] = valid[0][half] && (st.open || score[0][half] > st.bar);
      st.keys += valid[0][half] ? 1u : 0u;
      entry[half] =
          static_cast<std::uint64_t>(__float_as_uint(score[0][half])) << 32 | static_cast<std::uint32_t>(key[half]);
    }
    append(g, take[0], entry[0], take[1], entry[1]);
    if (++st.tiles % kStreamCheckTiles == 0) {
      const std::uint32_t n = group_count(g);
      if (n > static_cast<std::uint32_t>(kStreamCapacity - kStreamSlack)) close(st, cut(g, n));
    }
  }

  template <int R>
  __device__ static void close(Lane<R>& st, std::uint32_t kth_key) {
    st.open = false;
    st.bar = key_score(kth_key);
  }

  // The piece's top K into the row's list; the warpgroup that completes the
  // row merges the list into the output.
  template <int R>
  __device__ void finish(Lane<R>& st, Shared& sh, std::int64_t t0, int) const {
    sm90::wait_for_prerequisite_grids();  // the zero kernel's counters and fills
    Group& g = sh.group[group_index()];
    const int tid = group_thread();
    const std::uint32_t keys = group_sum(g, st.keys, 0);
    std::uint32_t n = group_count(g);
    if (keys == 0) return;  // no tile of the row's range here (nothing appended)
    const auto kk = static_cast<std::uint32_t>(k);
    if (n > kk) {
      cut(g, n);
      n = kk;
    }
    std::uint32_t* counters = state + t0 * kStreamStateWords;
    std::uint64_t* row_list = list + t0 * list_capacity;
    if (tid == 0) g.word = atomicAdd(counters + kListCount, n);
    group_sync();
    const std::uint32_t base = g.word;
    for (std::uint32_t i = static_cast<std::uint32_t>(tid); i < n; i += scoring::kWarpgroupThreads) {
      row_list[base + i] = g.entries[i];
    }
    __threadfence();  // the entries before the count that says the row is done
    group_sync();
    if (tid == 0) {
      const std::uint32_t before = atomicAdd(counters + kKeysDone, keys);
      g.word = before + keys == static_cast<std::uint32_t>(st.length) ? 1u : 0u;
      g.count = 0;
    }
    group_sync();
    if (g.word == 0) return;  // uniform: another piece completes the row
    __threadfence();          // every piece's entries, counted before its keys, are visible now
    const std::uint32_t total = __ldcg(counters + kListCount);
    Lane<R> merge{0u, 0u, 0.0f, true, st.length};
    // Chunks of the list, each loaded while the one before is appended.
    constexpr int kChunk = kStreamSlack;
    constexpr int kChunkPerThread = kChunk / scoring::kWarpgroupThreads;
    static_assert(kChunkPerThread % 2 == 0, "entries appended two at a time");
    std::uint64_t next[kChunkPerThread];
    const auto load = [&](std::uint32_t at) {
#pragma unroll
      for (int j = 0; j < kChunkPerThread; ++j) {
        const std::uint32_t i = at + static_cast<std::uint32_t>(tid + j * scoring::kWarpgroupThreads);
        next[j] = i < total ? __ldcg(row_list + i) : 0;
      }
    };
    load(0);
    for (std::uint32_t at = 0; at < total; at += kChunk) {
      std::uint64_t e[kChunkPerThread];
#pragma unroll
      for (int j = 0; j < kChunkPerThread; ++j) e[j] = next[j];
      if (at + kChunk < total) load(at + kChunk);
      const auto takes = [&](int j) {
        const std::uint32_t i = at + static_cast<std::uint32_t>(tid + j * scoring::kWarpgroupThreads);
        return i < total && (merge.open || __uint_as_float(static_cast<std::uint32_t>(e[j] >> 32)) > merge.bar);
      };
#pragma unroll
      for (int j = 0; j < kChunkPerThread; j += 2) append(g, takes(j), e[j], takes(j + 1), e[j + 1]);
      const std::uint32_t held = group_count(g);
      if (held > static_cast<std::uint32_t>(kStreamCapacity - kStreamSlack)) close(merge, cut(g, held));
    }
    std::uint32_t held = group_count(g);
    if (held > kk) {
      cut(g, held);
      held = kk;
    }
    std::int32_t* out = indices + t0 * k;
    float* vals = values != nullptr ? values + t0 * k : nullptr;
    for (std::uint32_t i = static_cast<std::uint32_t>(tid); i < held; i += scoring::kWarpgroupThreads) {
      const std::uint64_t e = g.entries[i];
      out[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(e));
      if (vals != nullptr) vals[i] = __uint_as_float(static_cast<std::uint32_t>(e >> 32));
    }
    group_sync();
    if (tid == 0) g.count = 0;
    group_sync();
  }
};

// The rows' counters zeroed and their outputs filled (-1, values -inf), a
// CTA a row; the scoring kernel after it is launched programmatically.
inline constexpr int kStreamZeroThreads = 256;
__global__ void __launch_bounds__(kStreamZeroThreads)
    stream_select_zero_kernel(std::uint32_t* state, std::int32_t k, std::int32_t* indices, float* values) {
  sm90::allow_dependent_launch();
  const std::int64_t r = blockIdx.x;
  if (threadIdx.x < kStreamStateWords) state[r * kStreamStateWords + threadIdx.x] = 0;
  for (int i = static_cast<int>(threadIdx.x); i < k; i += kStreamZeroThreads) {
    indices[r * k + i] = -1;
    if (values != nullptr) values[r * k + i] = -__int_as_float(0x7F800000);
  }
}

}  // namespace dsa::decode
