// Microbenchmark: how fast can math warps issue the scoring epilogue's
// FP32 work (docs/perf-log.md, session 9)? No tensor cores, no memory in the
// timed loop: each thread holds 128 values in registers and runs the head
// reduction's pattern on them
//   t = x + |x|;  x = t;  sum[q][half] = fma(w, t, sum[q][half])
// (8 independent sums of 32 terms, as src/scoring/epilogue.cuh), or a
// variant, `iters` times. Writing t back keeps ptxas from hoisting the FADDs
// out of the loop. Per warp it reports cycles (clock64) per FP32 instruction,
// and per SM sub-partition (scheduler) FP32 instructions per cycle, for 1, 2
// and 3 warps per scheduler (128, 256, 384 threads, one CTA per SM).
//
// Built by CMake as micro_epilogue_issue (DSA_BUILD_BENCH); run it on the
// device.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "micro.cuh"

namespace {

enum Kind : int {
  kFaddAbs = 0,  // the epilogue: FADD x+|x| then FFMA, 8 sums
  kFaddAbs16,    // the same with 16 sums (two per (q, half))
  kFmnmx,        // relu as FMNMX then FFMA, 8 sums
  kFfmaOnly,     // FFMA only (no relu), 8 sums: the pure FMA-pipe rate
  kImnmx,        // relu as an integer max on the bits (ALU pipe) then FFMA, 8 sums
  kPairs,        // kFaddAbs with the loops ordered (q, g, e, half): consecutive FFMAs
                 // share a weight
};

constexpr const char* kKindNames[] = {"fadd|x|+ffma, 8 sums", "fadd|x|+ffma, 16 sums", "fmnmx+ffma, 8 sums",
                                      "ffma only, 8 sums",    "imnmx+ffma, 8 sums",    "fadd|x|+ffma, weight pairs"};

template <int kKind>
__global__ void epilogue_kernel(float* out, long long* cycles, int iters, float seed) {
  micro::EpilogueRegisters r(seed);
  constexpr int kSums = kKind == kFaddAbs16 ? 16 : 8;
  float sum[kSums];
#pragma unroll
  for (int s = 0; s < kSums; ++s) sum[s] = 0.0f;
  __syncthreads();
  const long long start = clock64();
  for (int it = 0; it < iters; ++it) {
    micro::for_each_value<kKind == kPairs>([&](int q, int half, int g, int e, int i) {
      const int s = kSums == 16 ? 2 * (q * 2 + half) + (g & 1) : q * 2 + half;
      if constexpr (kKind == kFfmaOnly) {
        sum[s] = __fmaf_rn(r.w[g][e], r.acc[i], sum[s]);
      } else {
        constexpr micro::Relu kRelu = kKind == kFmnmx   ? micro::Relu::kFmnmx
                                      : kKind == kImnmx ? micro::Relu::kImnmx
                                                        : micro::Relu::kFaddAbs;
        const float t = micro::relu_form<kRelu>(r.acc[i]);
        r.acc[i] = t;
        sum[s] = __fmaf_rn(r.w[g][e], t, sum[s]);
      }
    });
  }
  const long long stop = clock64();
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < kSums; ++s) total += sum[s];
#pragma unroll
  for (int i = 0; i < 128; ++i) total += r.acc[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = total;
  if (threadIdx.x % 32 == 0) cycles[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = stop - start;
}

template <int kKind>
void run(int sms, int threads, int iters) {
  const int warps = sms * threads / 32;
  float* out = nullptr;
  long long* cycles = nullptr;
  MICRO_CHECK(cudaMalloc(&out, sizeof(float) * sms * threads));
  MICRO_CHECK(cudaMalloc(&cycles, sizeof(long long) * warps));
  // One CTA per SM: ask for more than half the shared memory.
  const int smem = 120 * 1024;
  MICRO_CHECK(cudaFuncSetAttribute(epilogue_kernel<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  epilogue_kernel<kKind><<<sms, threads, smem>>>(out, cycles, 8, 1e-3f);  // warm-up
  MICRO_CHECK(cudaGetLastError());
  cudaEvent_t a, b;
  MICRO_CHECK(cudaEventCreate(&a));
  MICRO_CHECK(cudaEventCreate(&b));
  MICRO_CHECK(cudaEventRecord(a));
  epilogue_kernel<kKind><<<sms, threads, smem>>>(out, cycles, iters, 1e-3f);
  MICRO_CHECK(cudaEventRecord(b));
  MICRO_CHECK(cudaEventSynchronize(b));
  float ms = 0.0f;
  MICRO_CHECK(cudaEventElapsedTime(&ms, a, b));
  std::vector<long long> host(warps);
  MICRO_CHECK(cudaMemcpy(host.data(), cycles, sizeof(long long) * warps, cudaMemcpyDeviceToHost));
  double mean = 0.0;
  for (long long c : host) mean += static_cast<double>(c);
  mean /= warps;
  const int per_iter = kKind == kFfmaOnly ? 128 : 256;  // FP32 (or relu) instructions per thread per iteration
  const double fp32 = static_cast<double>(iters) * per_iter;
  const int warps_per_scheduler = threads / 128;
  std::printf("| %-22s | %d | %.2f | %.2f | %.3f |\n", kKindNames[kKind], warps_per_scheduler, mean / fp32,
              fp32 * warps_per_scheduler / mean, ms);
  MICRO_CHECK(cudaFree(out));
  MICRO_CHECK(cudaFree(cycles));
}

}  // namespace

int main() {
  int sms = 0;
  MICRO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int iters = 2000;
  std::printf("%d SMs, %d iterations of 128 values per thread\n\n", sms, iters);
  std::printf(
      "| pattern | warps per scheduler | cycles per FP32 instr (per "
      "warp) | FP32 instr per cycle per scheduler | ms |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int threads : {128, 256, 384}) {
    run<kFaddAbs>(sms, threads, iters);
    run<kFaddAbs16>(sms, threads, iters);
    run<kFmnmx>(sms, threads, iters);
    run<kFfmaOnly>(sms, threads, iters);
    run<kImnmx>(sms, threads, iters);
    run<kPairs>(sms, threads, iters);
  }
  return 0;
}
