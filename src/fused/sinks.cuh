// The fused operator's sinks for the scoring kernel's main loop
// (scoring/scoring_kernel.cuh describes the interface):
//   * FilterSink: stage 2, the filter. Each score >= its row's tau becomes
//     a candidate (order key of (score key, position in the row)), staged in
//     shared memory by the lane that computed it and copied to the row's
//     candidate area in the workspace when the lane's slots fill and when
//     the CTA ends; the row's counter counts every one.
// (The math-only control's ChecksumSink is scoring::ChecksumSink, beside
// StoreSink: the paged operator's control uses it too.)
#pragma once

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "common/warp.h"
#include "scoring/config.h"
#include "selection/device/candidates.cuh"

namespace dsa::fused {

// Staging is private to each lane: a lane stores R queries' scores of two
// key rows per tile, so it appends its candidates to its own slots
// (staged[warp][r][slot][lane]: conflict-free, no ballots, no barriers; the
// count is a register). The sink's instructions are paid on every tile by
// the math warps, whose epilogue is the kernel's critical path, so the
// common path is two compares and a predicated store. When a lane could not
// take another tile, its warp flushes: the 8 lanes of each query sum their
// counts by shuffles, lanes 0..3 reserve the four queries' slots in their
// rows' areas with one global atomic each (one round trip), and the warp
// copies each query's entries coalesced, in lane order.
//
// Ties with tau are staged only up to a budget per lane and unit, so a row
// flooded by one value (all-equal rows, dead ReLU's zeros) does not overflow
// its area: the row's 64 lanes of a unit may stage about
// tie_target * (the unit's share of the row) ties in all; the ties past a
// lane's budget are only counted (`unstaged`). Every score above tau is
// staged. The select stage certifies such a row for any-index ties when it
// holds at least K entries (all above tau, and enough ties); smallest-index
// ties need every tie, so those rows are repaired. Continuous scores tie
// with tau about once (tau is a sampled score), so the budget never binds
// for them and the filter is the plain ">= tau" one.
template <int kQueries>
struct FilterSink {
  static constexpr int kR = kQueries / 4;  // queries per lane
  // The staging slots take the shared memory the scoring kernel leaves (its
  // storage and the 1 KiB alignment of the base); rows padded to 33 entries.
  static constexpr int kLaneSlots =
      (scoring::kMaxSmemBytes - 1024 - static_cast<int>(sizeof(scoring::SharedStorage))) /
      (scoring::kMathWarps * kR * 33 * static_cast<int>(sizeof(std::uint64_t)));
  static_assert(kLaneSlots > 2);
  const std::uint32_t* tau;      // [T] threshold keys
  std::uint32_t* count;          // [T] scores staged (zeroed by the threshold stage)
  std::uint64_t* candidates;     // [T, capacity] order keys
  std::uint32_t capacity;        // entries per row
  std::uint32_t* unstaged;       // [T] ties with tau past the lanes' budgets (zeroed likewise)
  std::uint32_t tie_target;      // ties a whole row may stage (over all its units)
  std::int64_t num_queries;

  struct Shared {
    // [slot][lane], rows padded to 33 entries: a lane's appends are
    // conflict-free and so are the flush's reads down one lane's slots.
    std::uint64_t staged[scoring::kMathWarps][kR][kLaneSlots][33];
  };
  template <int R>
  struct Lane {
    float tau[R];          // pass: score >= tau (tau's key is above -inf's: NaN and -inf fail)
    bool all[R];           // tau's key <= -inf's: every score passes, NaN included
    std::int32_t ks[R];
    std::uint32_t staged[R];  // entries staged by this lane for its query r
    std::int32_t budget[R];   // ties the lane may still stage for query r (< 0: -unstaged)
  };

  __device__ void init(Shared&) const {}

  template <int R>
  __device__ Lane<R> begin(std::uint32_t, std::int64_t t0, int lane, const RowRange (&rows)[R], int tiles) const {
    static_assert(R == kR);
    Lane<R> st;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t t = t0 + lane % 4 + 4 * r;
      const std::uint32_t key = t < num_queries ? __ldg(tau + t) : 0u;
      // key >= tau  <=>  score >= key_score(tau) for every score when tau is
      // the key of a float above -inf. The one gap between canonical keys
      // below +inf's (-0's key) is rounded up to +0's key; keys above +inf's
      // decode to NaN, which no score passes, as no key is above them.
      st.all[r] = key <= kNegInfKey;
      std::uint32_t canonical = key;
      if (!st.all[r] && score_key(key_score(canonical)) != canonical && canonical < 0xFF800000u) ++canonical;
      st.tau[r] = key_score(canonical);
      st.ks[r] = rows[r].begin;
      st.staged[r] = 0;
      // The unit covers at most tiles * 64 of the row's len keys, seen by 64
      // lanes (2 keys per tile each): this lane's share of tie_target.
      const std::int64_t len = rows[r].end - rows[r].begin;
      const std::int64_t covered = min(len, static_cast<std::int64_t>(tiles) * scoring::kTileKeys);
      st.budget[r] = len > 0 ? static_cast<std::int32_t>((tie_target * covered + 64 * len - 1) / (64 * len)) : 0;
    }
    return st;
  }

  __device__ __forceinline__ static std::uint64_t entry(float score, std::int32_t key, std::int32_t ks) {
    return selection::device::order_key(score_key(score), key - ks);
  }

  // Copies every lane's staged entries of query set r to the rows' areas
  // (warp-collective): one reservation per query, then coalesced stores of
  // each query's entries in lane order.
  template <int R>
  __device__ __forceinline__ void flush(Lane<R>& st, Shared& sh, std::int64_t t0, int lane, int r) const {
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize - scoring::kFirstMathWarp;  // among the math warps
    __syncwarp();  // every lane's staged entries are visible to the warp
    const std::uint32_t n = st.staged[r];
    // Inclusive scan over the 8 lanes of this lane's query (lane % 4 + 4j).
    std::uint32_t inclusive = n;
#pragma unroll
    for (int d = 4; d < 32; d *= 2) {
      const std::uint32_t v = __shfl_up_sync(kFullWarp, inclusive, d);
      if (lane >= d) inclusive += v;
    }
    const std::uint32_t exclusive = inclusive - n;
    const std::uint32_t total = __shfl_sync(kFullWarp, inclusive, 28 + lane % 4);
    std::uint32_t reserved = 0;
    if (lane < 4 && total != 0) reserved = atomicAdd(count + t0 + lane + 4 * r, total);
#pragma unroll 1
    for (int g = 0; g < 4; ++g) {
      const std::uint32_t group_total = __shfl_sync(kFullWarp, total, g);
      const std::uint32_t base = __shfl_sync(kFullWarp, reserved, g);
      std::uint32_t start[8];  // first entry of lane g + 4k in the query's run
#pragma unroll
      for (int k = 0; k < 8; ++k) start[k] = __shfl_sync(kFullWarp, exclusive, g + 4 * k);
      std::uint64_t* area = candidates + (t0 + g + 4 * r) * capacity;
      for (std::uint32_t j = lane; j < group_total; j += kWarpSize) {
        // The last lane whose run starts at or before j (lanes with nothing
        // staged share their successor's start and are passed over).
        int k = 0;
        std::uint32_t first = 0;
#pragma unroll
        for (int m = 1; m < 8; ++m) {
          if (start[m] <= j) {
            k = m;
            first = start[m];
          }
        }
        if (base + j < capacity) area[base + j] = sh.staged[warp][r][j - first][g + 4 * k];
      }
    }
    st.staged[r] = 0;
    __syncwarp();  // every entry is read before any lane stages again
  }

  template <int R>
  __device__ __forceinline__ void put(Lane<R>& st, Shared& sh, std::int64_t t0, int lane,
                                      const std::int32_t (&key)[2], const float (&score)[R][2],
                                      const bool (&valid)[R][2]) const {
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize - scoring::kFirstMathWarp;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float s = score[r][half];
        const bool tie = valid[r][half] && !st.all[r] && s == st.tau[r];
        if (valid[r][half] && (st.all[r] || s > st.tau[r] || (tie && st.budget[r] > 0))) {
          sh.staged[warp][r][st.staged[r]][lane] = entry(s, key[half], st.ks[r]);
          ++st.staged[r];
        }
        st.budget[r] -= tie ? 1 : 0;
      }
      if (__any_sync(kFullWarp, st.staged[r] > kLaneSlots - 2)) flush(st, sh, t0, lane, r);
    }
  }

  template <int R>
  __device__ void finish(Lane<R>& st, Shared& sh, std::int64_t t0, int lane) const {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      flush(st, sh, t0, lane, r);
      // Ties past the budgets: summed over the 8 lanes of each query.
      std::uint32_t extra = st.budget[r] < 0 ? static_cast<std::uint32_t>(-st.budget[r]) : 0u;
      if (__any_sync(kFullWarp, extra != 0)) {
#pragma unroll
        for (int d = 4; d < 32; d *= 2) extra += __shfl_xor_sync(kFullWarp, extra, d);
        if (lane < 4 && extra != 0) atomicAdd(unstaged + t0 + lane + 4 * r, extra);
      }
    }
  }
};

}  // namespace dsa::fused
