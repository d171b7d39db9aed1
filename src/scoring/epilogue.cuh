// The score arithmetic after the matrix product, shared by the scoring kernel
// and the fused kernel so both produce bit-identical scores (contract
// section 2). Every rounding step is an explicit intrinsic: no compiler
// contraction can make the two kernels differ.
//
// For one key row and query, a thread holds the logits of 2 * kHeadGroups
// heads (columns 8g + 2*(lane%4) + e of the query's kHeads); the score is
//   partial = sum over g, e in order of  (0.5 w[h]) * (x + |x|)        (= w relu(x), exact)
//   total   = butterfly over the 4 lanes of the row: (p0 + p1) + (p2 + p3)
//   score   = total * k_scale
// x + |x| is 2x or 0 exactly and 0.5w is exact, so each term equals
// w * relu(x); the form runs on FADD/FFMA at full rate instead of FMNMX.
// One head in eight (alu_relu) takes relu(x) as an integer max on the
// float's bits instead (IMNMX: a set sign bit gives +0) with the weight
// 2 * (0.5 w): (2 * 0.5w) * x and 0.5w * 2x are the same exact product
// before the FFMA's one rounding, so finite logits keep the bits of the
// all-FADD form (a NaN logit with its sign bit set counts as 0 there).
// Why: every FP32-pipe instruction issued beside the tensor core costs its
// products about a cycle a scheduler, an integer one about 0.2
// (tools/micro/epilogue_vs_wgmma); but the integer pipe runs at half rate
// and slows 2x beside the products, so more integer relus make the
// epilogue the warpgroup's critical path: all of them measured 1.197x,
// half 1.013x, a quarter and an eighth 0.99x (docs/perf-log.md, S8, S24-S26).
#pragma once

#include <cstdint>

#include "scoring/config.h"

namespace dsa::scoring {

// Whether logit (g, e) of the fragment takes the integer relu (above).
__device__ __forceinline__ constexpr bool alu_relu(int g, int e) { return e == 1 && g % 4 == 0; }

// The two relu forms (tools/micro measures these same functions):
// 2 relu(x), exact, on the FP32 pipe (FADD) ...
__device__ __forceinline__ float twice_relu_fadd(float x) { return __fadd_rn(x, fabsf(x)); }
// ... and relu(x) on the integer pipe (IMNMX on the float's bits).
__device__ __forceinline__ float relu_imnmx(float x) { return __int_as_float(max(__float_as_int(x), 0)); }

template <int kHeads, int kCols = kTileCols>
struct HeadWeights {
  using S = Shape<kHeads, kCols>;
  // 0.5 * w[t0 + q][8g + 2*(lane%4) + e], doubled back to w where alu_relu(g, e)
  float half_w[S::kQueries][S::kHeadGroups][2];

  // From the unit's weights in shared memory ([query * H + head], already
  // halved and zero past T: the scheduler warp wrote them).
  __device__ __forceinline__ void load(const float* half_w_smem, int lane) {
#pragma unroll
    for (int q = 0; q < S::kQueries; ++q) {
#pragma unroll
      for (int g = 0; g < S::kHeadGroups; ++g) {
        const float2 pair = *reinterpret_cast<const float2*>(half_w_smem + q * kHeads + 8 * g + 2 * (lane % 4));
        half_w[q][g][0] = alu_relu(g, 0) ? __fmul_rn(2.0f, pair.x) : pair.x;
        half_w[q][g][1] = alu_relu(g, 1) ? __fmul_rn(2.0f, pair.y) : pair.y;
      }
    }
  }
};

// Head-reduced scores (before k_scale) of the thread's two key rows (half 0:
// row lane/4 of its warp's 16, half 1: that row + 8) for every query of the
// block, from the m64n(kCols) accumulator fragment. All 4 lanes of a row end with
// the same bits.
template <int kHeads, int kCols>
__device__ __forceinline__ void reduce_heads(const float (&acc)[kCols / 2], const HeadWeights<kHeads, kCols>& w,
                                             float (&out)[Shape<kHeads, kCols>::kQueries][2]) {
  using S = Shape<kHeads, kCols>;
#pragma unroll
  for (int q = 0; q < S::kQueries; ++q) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = 0.0f;
#pragma unroll
      for (int g = 0; g < S::kHeadGroups; ++g) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = acc[4 * (q * S::kHeadGroups + g) + 2 * half + e];
          // relu(x) against w, or 2 relu(x) against 0.5 w
          const float r = alu_relu(g, e) ? relu_imnmx(x) : twice_relu_fadd(x);
          sum = __fmaf_rn(w.half_w[q][g][e], r, sum);
        }
      }
      sum = __fadd_rn(sum, __shfl_xor_sync(0xFFFFFFFFu, sum, 1));
      sum = __fadd_rn(sum, __shfl_xor_sync(0xFFFFFFFFu, sum, 2));
      out[q][half] = sum;
    }
  }
}

__device__ __forceinline__ float apply_key_scale(float head_sum, float key_scale) {
  return __fmul_rn(head_sum, key_scale);
}

}  // namespace dsa::scoring
