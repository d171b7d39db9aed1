// The fused operator's sinks for the scoring kernel's main loop
// (scoring/scoring_kernel.cuh describes the interface):
//   * CandidateSink: stage 2, the filter. Each score >= its row's tau becomes
//     a candidate (order key of (score key, position in the row)), staged in
//     shared memory per query and copied to the row's candidate area in the
//     workspace when the CTA ends; the row's counter counts every one.
//   * ChecksumSink: the math-only control build: every valid score is folded
//     into an xor checksum, so the matrix work and score arithmetic stay.
#pragma once

#include <cstdint>

#include "common/keys.h"
#include "scoring/config.h"
#include "scoring/schedule.cuh"
#include "selection/device/candidates.cuh"

namespace dsa::fused {

inline constexpr int kMathThreads = 128 * scoring::kMathWarpgroups;
inline constexpr int kMathWarps = kMathThreads / 32;
inline constexpr int kStagedEntries = 12288;  // 96 KiB of staged candidates per CTA

// Staging is private to each math warp (no shared atomics, no barriers): a
// warp's lanes with the same lane % 4 hold one query of the tile (group g),
// 16 keys of it per tile. Each lane keeps its group's staged count in a
// register; slots come from two ballots. When a group's area could not take
// another tile, the warp flushes it to the row's area in the workspace (one
// global atomic reserves the slots).
template <int kQueries>
struct CandidateSink {
  static constexpr int kPerWarpQuery = kStagedEntries / (kMathWarps * kQueries);
  static constexpr int kMaxPerTile = 16;  // a warp's scores of one query in one tile
  static_assert(kPerWarpQuery > kMaxPerTile);
  const std::uint32_t* tau;      // [T] threshold keys
  std::uint32_t* count;          // [T] scores >= tau (zeroed by the threshold stage)
  std::uint64_t* candidates;     // [T, capacity] order keys
  std::uint32_t capacity;        // entries per row
  std::int64_t num_queries;

  struct Shared {
    std::uint64_t staged[kMathWarps][kQueries][kPerWarpQuery];
  };
  template <int R>
  struct Lane {
    float tau[R];          // pass: score >= tau (tau's key is above -inf's: NaN and -inf fail)
    bool all[R];           // tau's key <= -inf's: every score passes, NaN included
    std::int32_t ks[R];
    std::uint32_t staged[R];  // entries staged for this lane's group's query r
  };

  __device__ void init(Shared&) const {}

  template <int R>
  __device__ Lane<R> begin(std::int64_t t0, int lane, const scoring::RowRange (&rows)[R]) const {
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
    }
    return st;
  }

  __device__ __forceinline__ static std::uint64_t entry(float score, std::int64_t key, std::int32_t ks) {
    return selection::device::order_key(score_key(score), static_cast<std::int32_t>(key) - ks);
  }

  // Copies the staged entries of every group of query set r holding more
  // than `above` to their rows' areas (warp-collective).
  template <int R>
  __device__ __forceinline__ void flush(Lane<R>& st, Shared& sh, std::int64_t t0, int lane, int r,
                                        std::uint32_t above) const {
    const int warp = static_cast<int>(threadIdx.x) / 32 - 4;  // 0 .. kMathWarps-1
    __syncwarp();  // the staged entries of every lane are visible
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const std::uint32_t n = __shfl_sync(0xFFFFFFFFu, st.staged[r], g);
      if (n > above) {
        const int q = g + 4 * r;
        std::uint32_t base = 0;
        if (lane == 0) base = atomicAdd(count + t0 + q, n);
        base = __shfl_sync(0xFFFFFFFFu, base, 0);
        std::uint64_t* area = candidates + (t0 + q) * capacity;
        for (std::uint32_t i = lane; i < n; i += 32) {
          if (base + i < capacity) area[base + i] = sh.staged[warp][q][i];
        }
        if (lane % 4 == g) st.staged[r] = 0;
      }
    }
    __syncwarp();  // every copy is read before the area is staged into again
  }

  template <int R>
  __device__ __forceinline__ void put(Lane<R>& st, Shared& sh, std::int64_t t0, int lane,
                                      const std::int64_t (&key)[2], const float (&score)[R][2],
                                      const bool (&valid)[R][2]) const {
    const int warp = static_cast<int>(threadIdx.x) / 32 - 4;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int q = lane % 4 + 4 * r;
      bool pass[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) pass[half] = valid[r][half] && (st.all[r] || score[r][half] >= st.tau[r]);
      const std::uint32_t b0 = __ballot_sync(0xFFFFFFFFu, pass[0]);
      const std::uint32_t b1 = __ballot_sync(0xFFFFFFFFu, pass[1]);
      if ((b0 | b1) == 0) continue;
      const std::uint32_t group = 0x11111111u << (lane % 4);
      const std::uint32_t lower = (1u << lane) - 1u;
      std::uint32_t slot = st.staged[r] + __popc(b0 & group & lower) + __popc(b1 & group & lower);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (pass[half]) sh.staged[warp][q][slot++] = entry(score[r][half], key[half], st.ks[r]);
      }
      st.staged[r] += __popc(b0 & group) + __popc(b1 & group);
      if (__any_sync(0xFFFFFFFFu, st.staged[r] > kPerWarpQuery - kMaxPerTile)) {
        flush(st, sh, t0, lane, r, kPerWarpQuery - kMaxPerTile);
      }
    }
  }

  template <int R>
  __device__ void finish(Lane<R>& st, Shared& sh, std::int64_t t0, int lane) const {
#pragma unroll
    for (int r = 0; r < R; ++r) flush(st, sh, t0, lane, r, 0);
  }
};

struct ChecksumSink {
  std::uint32_t* checksum;  // one word, or null
  struct Shared {};
  template <int R>
  struct Lane {
    std::uint32_t x;
  };
  __device__ void init(Shared&) const {}
  template <int R>
  __device__ Lane<R> begin(std::int64_t, int, const scoring::RowRange (&)[R]) const {
    return {0u};
  }
  template <int R>
  __device__ __forceinline__ void put(Lane<R>& st, Shared&, std::int64_t, int, const std::int64_t (&)[2],
                                      const float (&score)[R][2], const bool (&valid)[R][2]) const {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) st.x ^= valid[r][half] ? __float_as_uint(score[r][half]) : 0u;
    }
  }
  template <int R>
  __device__ void finish(Lane<R>& st, Shared&, std::int64_t, int) const {
    const std::uint32_t x = __reduce_xor_sync(0xFFFFFFFFu, st.x);
    if (threadIdx.x % 32 == 0 && checksum != nullptr) atomicXor(checksum, x);
  }
};

}  // namespace dsa::fused
