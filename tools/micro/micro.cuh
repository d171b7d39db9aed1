// What the micro benchmarks in tools/micro share: the CUDA error check and
// the scoring epilogue's FP32 pattern on a thread's own registers.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "scoring/epilogue.cuh"

#define MICRO_CHECK(call)                                                                        \
  do {                                                                                           \
    const cudaError_t e = (call);                                                                \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace micro {

// A thread's 128 accumulator values and 16 head weights: small, finite,
// both signs, different per thread.
struct EpilogueRegisters {
  float acc[128];
  float w[8][2];
  __device__ __forceinline__ explicit EpilogueRegisters(float seed) {
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = seed * static_cast<float>(i - 64 + static_cast<int>(threadIdx.x % 7));
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      w[g][0] = seed * static_cast<float>(g + 1);
      w[g][1] = -seed * static_cast<float>(g + 2);
    }
  }
};

// Calls fn(q, half, g, e, i) for the 128 values of src/scoring/epilogue.cuh's
// accumulator fragment (i = 4 (8q + g) + 2 half + e), in the kernel's order
// (q, half, g, e) or, with kWeightPairs, in (q, g, e, half), where
// consecutive values share a weight. Compile-time indices only.
template <bool kWeightPairs, class Fn>
__device__ __forceinline__ void for_each_value(Fn&& fn) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int half = kWeightPairs ? j % 2 : j / 16;
      const int g = kWeightPairs ? j / 4 : (j / 2) % 8;
      const int e = kWeightPairs ? (j / 2) % 2 : j % 2;
      fn(q, half, g, e, 4 * (q * 8 + g) + 2 * half + e);
    }
  }
}

// The relu forms the benchmarks compare: x + |x| (FADD, the kernel's, 2
// relu(x)), FMNMX x, 0, and an integer max on the float's bits (IMNMX, the
// integer pipe).
enum class Relu { kFaddAbs, kFmnmx, kImnmx };

template <Relu kRelu>
__device__ __forceinline__ float relu_form(float x) {
  if constexpr (kRelu == Relu::kFmnmx) return fmaxf(x, 0.0f);
  if constexpr (kRelu == Relu::kImnmx) return dsa::scoring::relu_imnmx(x);
  return dsa::scoring::twice_relu_fadd(x);
}

// One pass of the head reduction's pattern: t = relu_form(x), x = t
// (writing t back keeps ptxas from hoisting the relus out of a loop of
// passes), sum[q][half] += w * t. 128 relus + 128 FFMA per thread.
template <bool kWeightPairs = false, Relu kRelu = Relu::kFaddAbs>
__device__ __forceinline__ void reduction_pass(EpilogueRegisters& r, float (&sum)[8]) {
  for_each_value<kWeightPairs>([&](int q, int half, int g, int e, int i) {
    const float t = relu_form<kRelu>(r.acc[i]);
    r.acc[i] = t;
    sum[q * 2 + half] = __fmaf_rn(r.w[g][e], t, sum[q * 2 + half]);
  });
}

}  // namespace micro
