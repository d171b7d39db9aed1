// Microbenchmark: does a warpgroup's wgmma slow another warpgroup's FP32
// epilogue on the same SM, and the other way round (docs/perf-log.md,
// session 9)? One CTA per SM, 256 threads: warpgroup 0 runs the scoring
// kernel's product (4 x wgmma m64n256k32 e4m3 from shared memory, commit,
// wait) in a loop; warpgroup 1 runs one instruction pattern on its own
// registers (Pattern, below), the head reduction's 128 values a thread per
// iteration (256 instructions, 128 for the packed patterns). The
// products alone, each pattern alone, and each pattern beside the products
// (the product loop runs until the pattern's warps finish). Reports cycles
// per product and per pattern iteration (clock64).
//
// Session 9 measured the products 5.7x slower beside the kernel's FP32
// pattern. The other patterns say why: one register read an instruction
// instead of three (register-file bandwidth?), the integer pipe instead of
// the FMA pipe (the pipe?), the FP32 pattern at a lower issue rate
// (issue slots: does the slowdown scale with the rate?), and a resident
// warpgroup that issues almost nothing (the control), and the relu as
// FMNMX.
//
// Session 19 (docs/perf-log.md): each FP32-pipe instruction (FADD, FFMA,
// FMNMX; one register read or three) costs the products about one cycle
// a scheduler; an IADD3 about 0.2, but the integer pattern itself runs 2x
// slower beside the products. A sleeping warpgroup costs nothing.
//
// The packed patterns ask whether the head reduction in packed 16-bit
// floats, one instruction a value instead of two (per pair of values one
// cvt.rn.relu.{f16,bf16}x2.f32 and one fma.rn.{f16,bf16}x2, where
// kReduction takes an FADD |x| and an FFMA a value), costs the products
// half as much as the FP32 one.
//
// Built by CMake as micro_epilogue_vs_wgmma (DSA_BUILD_BENCH); run it on
// the device (the CLI and tests off: their dependencies are not needed):
//   cmake -S . -B build -G Ninja -DDSA_BUILD_CLI=OFF -DDSA_BUILD_TESTS=OFF && cmake --build build --target micro_epilogue_vs_wgmma && build/micro_epilogue_vs_wgmma
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

// What warpgroup 1 runs on 128 values a thread per iteration.
enum class Pattern {
  kNone,        // nothing: warpgroup 1 exits at once
  kReduction,   // the kernel's head reduction: 128 FADD |x| + 128 FFMA (3 register reads)
  kOneRead,     // 256 FADD x + 1.0 (one register read, an immediate)
  kInteger,     // 256 IADD3 a + b + c (the integer pipe, 3 register reads)
  kMaxRelu,     // the reduction with relu as FMNMX x, 0 (128 FMNMX + 128 FFMA): one FP32-pipe instruction a value
  kHalfRate,    // kReduction, then __nanosleep(150) (a lower issue rate: its cycles say how much)
  kIdle,        // __nanosleep(300) only: resident, issuing almost nothing
  kHalfPacked,  // the reduction in fp16 pairs: 64 cvt.rn.relu.f16x2.f32 + 64 fma.rn.f16x2
  kBf16Packed,  // the same in bf16: 64 cvt.rn.relu.bf16x2.f32 + 64 fma.rn.bf16x2
};

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kNone: return "-";
    case Pattern::kReduction: return "FADD |x| + FFMA";
    case Pattern::kOneRead: return "FADD x + 1 (one read)";
    case Pattern::kInteger: return "IADD3 (integer)";
    case Pattern::kMaxRelu: return "FMNMX + FFMA";
    case Pattern::kHalfRate: return "FADD |x| + FFMA, sleep 150";
    case Pattern::kIdle: return "sleep 300";
    case Pattern::kHalfPacked: return "cvt.rn.relu.f16x2 + fma.f16x2";
    case Pattern::kBf16Packed: return "cvt.rn.relu.bf16x2 + fma.bf16x2";
  }
  return "?";
}

constexpr bool is_packed(Pattern p) { return p == Pattern::kHalfPacked || p == Pattern::kBf16Packed; }

// PTX ISA "Data Movement and Conversion Instructions: cvt": relu(lo) in the
// low 16 bits, relu(hi) in the high, rounded to nearest.
template <bool kBf16>
__device__ __forceinline__ std::uint32_t cvt_relu_x2(float lo, float hi) {
  std::uint32_t d;
  if constexpr (kBf16) {
    asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  }
  return d;
}

// PTX ISA "Half Precision Floating-Point Instructions: fma": a * b + c on
// both halves.
template <bool kBf16>
__device__ __forceinline__ std::uint32_t fma_x2(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t d;
  if constexpr (kBf16) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  }
  return d;
}

// x rounded to fp16 or bf16, in the low 16 bits.
template <bool kBf16>
__device__ __forceinline__ std::uint32_t to_bits16(float x) {
  if constexpr (kBf16) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return __half_as_ushort(__float2half_rn(x));
}

// The fp16 or bf16 value in the low 16 bits.
template <bool kBf16>
__device__ __forceinline__ float from_bits16(std::uint32_t bits) {
  const auto b = static_cast<unsigned short>(bits);
  if constexpr (kBf16) return __bfloat162float(__ushort_as_bfloat16(b));
  return __half2float(__ushort_as_half(b));
}

// The packed patterns' registers beside micro::EpilogueRegisters, fp16 or
// bf16 pairs: its 16 head weights as 8 pairs (w[g][0] low, w[g][1] high),
// and kReduction's 8 sums, each a pair of partial sums (of the values with
// e = 0 low, e = 1 high).
template <bool kBf16>
struct PackedSums {
  std::uint32_t w[8];
  std::uint32_t sum[8] = {};
  __device__ __forceinline__ explicit PackedSums(const micro::EpilogueRegisters& r) {
#pragma unroll
    for (int g = 0; g < 8; ++g) w[g] = to_bits16<kBf16>(r.w[g][0]) | to_bits16<kBf16>(r.w[g][1]) << 16;
  }
  __device__ __forceinline__ float total() const {
    float t = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) t += from_bits16<kBf16>(sum[s]) + from_bits16<kBf16>(sum[s] >> 16);
    return t;
  }
};

template <Pattern kPattern>
using PatternSums = PackedSums<kPattern == Pattern::kBf16Packed>;

// kReduction's pass on value pairs (acc[i - 1], acc[i]), which share q, half
// and g: t = relu of both, packed; acc[i - 1] = t (so the conversion's input
// changes every pass and ptxas cannot hoist it out of the loop);
// sum[q][half] += w[g] * t on both halves.
template <bool kBf16>
__device__ __forceinline__ void packed_reduction_pass(micro::EpilogueRegisters& r, PackedSums<kBf16>& p) {
  micro::for_each_value<false>([&](int q, int half, int g, int e, int i) {
    if (e == 0) return;
    const std::uint32_t t = cvt_relu_x2<kBf16>(r.acc[i - 1], r.acc[i]);
    r.acc[i - 1] = __uint_as_float(t);
    p.sum[q * 2 + half] = fma_x2<kBf16>(p.w[g], t, p.sum[q * 2 + half]);
  });
}

// One iteration of pattern p on the thread's registers (packed: the packed
// patterns' sums, unused by the others).
template <Pattern kPattern>
__device__ __forceinline__ void pattern_pass(micro::EpilogueRegisters& r, float (&sum)[8],
                                             PatternSums<kPattern>& packed) {
  if constexpr (kPattern == Pattern::kReduction || kPattern == Pattern::kHalfRate) {
    micro::reduction_pass(r, sum);
    if constexpr (kPattern == Pattern::kHalfRate) __nanosleep(150);
  } else if constexpr (kPattern == Pattern::kMaxRelu) {
    micro::reduction_pass<false, micro::Relu::kFmnmx>(r, sum);
  } else if constexpr (kPattern == Pattern::kOneRead) {
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
      for (int i = 0; i < 128; ++i) r.acc[i] = __fadd_rn(r.acc[i], 1.0f);
    }
  } else if constexpr (kPattern == Pattern::kInteger) {
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
      for (int i = 0; i < 128; ++i) {
        const std::uint32_t a = __float_as_uint(r.acc[i]);
        const std::uint32_t b = __float_as_uint(r.acc[(i + 1) % 128]);
        const std::uint32_t c = __float_as_uint(r.acc[(i + 2) % 128]);
        r.acc[i] = __uint_as_float(a + b + c);
      }
    }
  } else if constexpr (kPattern == Pattern::kIdle) {
    __nanosleep(300);
  } else if constexpr (is_packed(kPattern)) {
    packed_reduction_pass(r, packed);
  }
}

// kMma: warpgroup 0 multiplies; kPattern: what warpgroup 1 runs.
template <bool kMma, Pattern kPattern>
__global__ void __launch_bounds__(256, 1) concurrent_kernel(Result* out, int epi_iters, int mma_products, float seed) {
  constexpr bool kEpi = kPattern != Pattern::kNone;
  extern __shared__ std::uint8_t raw[];
  const auto base = static_cast<std::uint32_t>(__cvta_generic_to_shared(raw));
  std::uint8_t* smem = raw + ((1024u - base % 1024u) % 1024u);
  std::uint8_t* a = smem;
  std::uint8_t* b = smem + kTileA;
  volatile int* done = reinterpret_cast<volatile int*>(smem + kTileA + kTileB);
  // done as the product warpgroup saw it, one slot a round parity: its four
  // warps must leave the loop on the same round (a wgmma that some warps of
  // the warpgroup skip is an illegal instruction).
  volatile int* seen = done + 1;
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
      if constexpr (kEpi) {
        if (threadIdx.x == 0) seen[round & 1] = *done;
        asm volatile("bar.sync 1, 128;" ::: "memory");
        if (seen[round & 1] != 0) break;
      } else if (products >= mma_products) {
        break;
      }
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
    PatternSums<kPattern> packed(r);
    const long long start = clock64();
    for (int it = 0; it < epi_iters; ++it) pattern_pass<kPattern>(r, sum, packed);
    const long long stop = clock64();
    __syncwarp();
    if (threadIdx.x == 128) *done = 1;
    float total = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) total += sum[s];
#pragma unroll
    for (int i = 0; i < 128; ++i) total += r.acc[i];
    if constexpr (is_packed(kPattern)) total += packed.total();
    if (threadIdx.x == 128) out[blockIdx.x].epi_cycles = (stop - start) + (total == 12345.0f);
  }
}

template <bool kMma, Pattern kPattern>
void run(int sms, int epi_iters, int mma_products) {
  constexpr bool kEpi = kPattern != Pattern::kNone;
  const std::string name = std::string(kMma ? "products" : "") + (kMma && kEpi ? " + " : "") +
                           (kEpi ? pattern_name(kPattern) : "") + (kMma && !kEpi ? " alone" : "");
  Result* out = nullptr;
  MICRO_CHECK(cudaMalloc(&out, sizeof(Result) * sms));
  MICRO_CHECK(cudaMemset(out, 0, sizeof(Result) * sms));
  const int smem = 120 * 1024;
  auto kernel = concurrent_kernel<kMma, kPattern>;
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
  std::printf("| %-40s | %s | %s | %.3f | %.0f | %g |\n", name.c_str(),
              kMma ? std::to_string(static_cast<int>(mma)).c_str() : "-",
              kEpi ? std::to_string(static_cast<int>(epi)).c_str() : "-", ms, products * 4.194304e6 / (ms * 1e9),
              static_cast<double>(host[0].acc0));
  MICRO_CHECK(cudaFree(out));
}

// Pattern p alone, then beside the products (4000 iterations each).
template <Pattern kPattern>
void alone_and_beside_products(int sms) {
  run<false, kPattern>(sms, 4000, 0);
  run<true, kPattern>(sms, 4000, 0);
}

}  // namespace

int main() {
  int sms = 0;
  MICRO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf(
      "%d SMs; one product = 4 x wgmma m64n256k32 e4m3 (4.19 MFLOP), "
      "%d products per commit group; one "
      "pattern iteration = 128 values, 256 instructions a thread (128 packed; "
      "the sleeps aside), one warp per scheduler\n\n",
      sms, kChain);
  std::printf(
      "| case | cycles per product | cycles per pattern iteration | "
      "kernel ms | TFLOP/s | acc[0] |\n|---|---|---|---|---|---|\n");
  for (int rep = 0; rep < 2; ++rep) {
    run<true, Pattern::kNone>(sms, 0, 4000);
    alone_and_beside_products<Pattern::kReduction>(sms);
    alone_and_beside_products<Pattern::kOneRead>(sms);
    alone_and_beside_products<Pattern::kInteger>(sms);
    alone_and_beside_products<Pattern::kMaxRelu>(sms);
    alone_and_beside_products<Pattern::kHalfRate>(sms);
    run<true, Pattern::kIdle>(sms, 4000, 0);
    alone_and_beside_products<Pattern::kHalfPacked>(sms);
    alone_and_beside_products<Pattern::kBf16Packed>(sms);
  }
  return 0;
}
