// Microbenchmark: does a warpgroup's wgmma slow another warpgroup's FP32
// epilogue on the same SM, and the other way round (docs/perf-log.md,
// session 9)? One CTA per SM, 256 threads: warpgroup 0 runs the scoring
// kernel's product (4 x wgmma m64n256k32 e4m3 from shared memory, commit,
// wait) in a loop; warpgroup 1 runs the head reduction's FP32 pattern on
// its own registers (tools/micro/epilogue_issue.cu, 128 FADD |x| + 128 FFMA
// per iteration). Three cases: each alone, and both at once (the product
// loop runs until the epilogue warps finish). Reports cycles per product
// and per epilogue iteration (clock64).
//
// Built by CMake as micro_epilogue_vs_wgmma (DSA_BUILD_BENCH); run it on
// the device.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/sm90/wgmma.cuh"
#include "micro.cuh"

namespace {

constexpr int kTileA = 64 * 128;   // keys x D, FP8
constexpr int kTileB = 256 * 128;  // (query, head) x D, FP8
constexpr int kChain = 8;          // products per commit group

struct Result {
  long long mma_cycles;
  long long products;
  long long epi_cycles;
  float acc0;  // thread 0's first accumulator after the last product (a check
               // that products ran)
};

// kMma: warpgroup 0 multiplies; kEpi: warpgroup 1 reduces.
template <bool kMma, bool kEpi>
__global__ void __launch_bounds__(256, 1) concurrent_kernel(Result* out, int epi_iters, int mma_products, float seed) {
  extern __shared__ std::uint8_t raw[];
  const auto base = static_cast<std::uint32_t>(__cvta_generic_to_shared(raw));
  std::uint8_t* smem = raw + ((1024u - base % 1024u) % 1024u);
  std::uint8_t* a = smem;
  std::uint8_t* b = smem + kTileA;
  volatile int* done = reinterpret_cast<volatile int*>(smem + kTileA + kTileB);
  // Small finite FP8 values (0x30..0x37 are 0.5-0.94).
  for (int i = threadIdx.x; i < (kTileA + kTileB) / 4; i += blockDim.x) {
    reinterpret_cast<std::uint32_t*>(smem)[i] = 0x30313233u + (i & 3);
  }
  if (threadIdx.x == 0) *done = 0;
  __syncthreads();

  if (threadIdx.x < 128) {
    if (!kMma) return;
    float acc[128];
    long long products = 0;
    const long long start = clock64();
    for (int round = 0;; ++round) {
      // kChain products issued back to back, then one wait: the tensor core
      // stays busy however late the next issue is. The descriptors depend on
      // the round so ptxas cannot fold repeated products.
      const std::uint32_t shift = static_cast<std::uint32_t>(round & 1) * 1024;
      dsa::sm90::wgmma_fence();
#pragma unroll
      for (int p = 0; p < kChain; ++p) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          dsa::sm90::wgmma_m64n256k32_e4m3(acc, dsa::sm90::smem_desc_k128_sw128(a + shift, 32 * k),
                                           dsa::sm90::smem_desc_k128_sw128(b, 32 * k), p > 0 || k > 0);
        }
      }
      dsa::sm90::wgmma_commit();
      dsa::sm90::wgmma_wait<0>();
      dsa::sm90::fence_registers(acc);
      products += kChain;
      if (kEpi ? *done != 0 : products >= mma_products) break;
    }
    const long long stop = clock64();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) total += acc[i];
    if (threadIdx.x == 0) {
      out[blockIdx.x].mma_cycles = stop - start;
      out[blockIdx.x].products = products + (total == 12345.0f);
      out[blockIdx.x].acc0 = acc[0];
    }
    return;
  }
  if constexpr (!kEpi) {
    return;
  } else {
    micro::EpilogueRegisters r(seed);
    float sum[8] = {};
    const long long start = clock64();
    for (int it = 0; it < epi_iters; ++it) micro::reduction_pass(r, sum);
    const long long stop = clock64();
    __syncwarp();
    if (threadIdx.x == 128) *done = 1;
    float total = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) total += sum[s];
#pragma unroll
    for (int i = 0; i < 128; ++i) total += r.acc[i];
    if (threadIdx.x == 128) out[blockIdx.x].epi_cycles = (stop - start) + (total == 12345.0f);
  }
}

template <bool kMma, bool kEpi>
void run(const char* name, int sms, int epi_iters, int mma_products) {
  Result* out = nullptr;
  MICRO_CHECK(cudaMalloc(&out, sizeof(Result) * sms));
  MICRO_CHECK(cudaMemset(out, 0, sizeof(Result) * sms));
  const int smem = 120 * 1024;
  auto kernel = concurrent_kernel<kMma, kEpi>;
  MICRO_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<sms, 256, smem>>>(out, 8, 8, 1e-3f);  // warm-up
  MICRO_CHECK(cudaGetLastError());
  cudaEvent_t ev0, ev1;
  MICRO_CHECK(cudaEventCreate(&ev0));
  MICRO_CHECK(cudaEventCreate(&ev1));
  MICRO_CHECK(cudaEventRecord(ev0));
  kernel<<<sms, 256, smem>>>(out, epi_iters, mma_products, 1e-3f);
  MICRO_CHECK(cudaEventRecord(ev1));
  MICRO_CHECK(cudaDeviceSynchronize());
  float ms = 0.0f;
  MICRO_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
  std::vector<Result> host(sms);
  MICRO_CHECK(cudaMemcpy(host.data(), out, sizeof(Result) * sms, cudaMemcpyDeviceToHost));
  double mma = 0.0, epi = 0.0, products = 0.0;
  for (const Result& r : host) {
    if (kMma) mma += static_cast<double>(r.mma_cycles) / static_cast<double>(r.products);
    products += static_cast<double>(r.products);
    if (kEpi) epi += static_cast<double>(r.epi_cycles) / epi_iters;
  }
  mma /= sms;
  epi /= sms;
  // 4 x m64n256k32 = 4.19 MFLOP per product.
  std::printf("| %-28s | %s | %s | %.3f | %.0f | %g |\n", name,
              kMma ? std::to_string(static_cast<int>(mma)).c_str() : "-",
              kEpi ? std::to_string(static_cast<int>(epi)).c_str() : "-", ms, products * 4.194304e6 / (ms * 1e9),
              static_cast<double>(host[0].acc0));
  MICRO_CHECK(cudaFree(out));
}

}  // namespace

int main() {
  int sms = 0;
  MICRO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf(
      "%d SMs; one product = 4 x wgmma m64n256k32 e4m3 (4.19 MFLOP), "
      "%d products per commit group; one "
      "epilogue iteration = 128 FADD |x| + 128 FFMA per thread, one "
      "warp per scheduler\n\n",
      sms, kChain);
  std::printf(
      "| case | cycles per product | cycles per epilogue iteration | "
      "kernel ms | TFLOP/s | acc[0] |\n|---|---|---|---|---|---|\n");
  for (int rep = 0; rep < 2; ++rep) {
    run<true, false>("products alone", sms, 0, 4000);
    run<false, true>("epilogue alone", sms, 4000, 0);
    run<true, true>("both at once", sms, 4000, 0);
  }
  return 0;
}
