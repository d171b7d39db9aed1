// Device side of the shared primitives and of the API's device-pointer rules.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/fp8.h"
#include "common/keys.h"
#include "dsa_topk/dsa_topk.h"
#include "selection/device/radix.cuh"

namespace dsa {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

__global__ void decode_all(float* out) { out[threadIdx.x] = fp8_e4m3_to_float(static_cast<std::uint8_t>(threadIdx.x)); }

__global__ void keys_of(const float* in, std::uint32_t* out, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = score_key(in[i]);
    back[i] = key_score(out[i]);
  }
}

// Counts the 32-bit patterns where score_key_fast differs from score_key
// (the first one found lands in first_bad).
__global__ void compare_fast_keys(unsigned long long* mismatches, std::uint32_t* first_bad) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t b = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; b < (1ull << 32);
       b += stride) {
    const float f = __uint_as_float(static_cast<std::uint32_t>(b));
    if (score_key_fast(f) != score_key(f)) {
      if (bad == 0) atomicCAS(first_bad, 0xFFFFFFFFu, static_cast<std::uint32_t>(b));
      ++bad;
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

// One warp adds to a 4096-bin histogram: lane 0 uncounted, lanes 1..31
// counted in bin `bin`.
__global__ void add_one_warp(std::uint32_t* histogram, std::uint32_t bin) {
  selection::device::warp_histogram_add(histogram, threadIdx.x != 0, bin);
}

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(std::size_t n) { cudaMalloc(&ptr, n * sizeof(T)); }
  ~DeviceArray() { cudaFree(ptr); }
};

TEST(DevicePrimitives, Fp8DecodeMatchesHostBitForBit) {
  DeviceArray<float> d(256);
  decode_all<<<1, 256>>>(d.ptr);
  CUDA_OK(cudaGetLastError());
  std::vector<float> got(256);
  CUDA_OK(cudaMemcpy(got.data(), d.ptr, 256 * sizeof(float), cudaMemcpyDeviceToHost));
  for (int b = 0; b < 256; ++b) {
    const float want = fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
    std::uint32_t gb, wb;
    std::memcpy(&gb, &got[b], 4);
    std::memcpy(&wb, &want, 4);
    EXPECT_EQ(gb, wb) << "byte " << b;
  }
}

TEST(DevicePrimitives, KeyMapMatchesHost) {
  std::vector<float> in;
  for (std::uint32_t bits = 0; bits < 0xFFFFFFFFu - 0x00FFFFFFu; bits += 0x00FFFFFFu) {
    float f;
    std::memcpy(&f, &bits, 4);
    in.push_back(f);
  }
  in.push_back(-0.0f);
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  in.push_back(-std::numeric_limits<float>::infinity());
  const int n = static_cast<int>(in.size());
  DeviceArray<float> d_in(n), d_back(n);
  DeviceArray<std::uint32_t> d_out(n);
  CUDA_OK(cudaMemcpy(d_in.ptr, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  keys_of<<<(n + 127) / 128, 128>>>(d_in.ptr, d_out.ptr, d_back.ptr, n);
  CUDA_OK(cudaGetLastError());
  std::vector<std::uint32_t> keys(n);
  std::vector<float> back(n);
  CUDA_OK(cudaMemcpy(keys.data(), d_out.ptr, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(back.data(), d_back.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(keys[i], score_key(in[i])) << i;
    EXPECT_EQ(score_key(back[i]), keys[i]) << i;
  }
}

// Merged histogram adds count every counted lane, whatever its bin: the
// minimal reproducer of a dropped count, when uncounted lanes matched on
// 256 (a real bin of the sampled top-k's 4096-bin threshold histogram) and
// the lowest, uncounted, lane led the counted lanes of bin 256.
TEST(DevicePrimitives, MergedHistogramAddCountsEveryCountedLane) {
  for (std::uint32_t bin : {0u, 5u, 255u, 256u, 257u, 4094u}) {
    DeviceArray<std::uint32_t> histogram(4096);
    CUDA_OK(cudaMemset(histogram.ptr, 0, 4096 * sizeof(std::uint32_t)));
    add_one_warp<<<1, 32>>>(histogram.ptr, bin);
    CUDA_OK(cudaGetLastError());
    std::vector<std::uint32_t> h(4096);
    CUDA_OK(cudaMemcpy(h.data(), histogram.ptr, h.size() * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
    EXPECT_EQ(h[bin], 31u) << "bin " << bin;
    std::uint64_t total = 0;
    for (std::uint32_t c : h) total += c;
    EXPECT_EQ(total, 31u) << "bin " << bin;
  }
}

// The hot loops' key map against the definition, on every float bit pattern.
TEST(DevicePrimitives, FastKeyMapEqualsKeyMapOnAllInputs) {
  DeviceArray<unsigned long long> mismatches(1);
  DeviceArray<std::uint32_t> first_bad(1);
  CUDA_OK(cudaMemset(mismatches.ptr, 0, sizeof(unsigned long long)));
  CUDA_OK(cudaMemset(first_bad.ptr, 0xFF, sizeof(std::uint32_t)));
  compare_fast_keys<<<1024, 256>>>(mismatches.ptr, first_bad.ptr);
  CUDA_OK(cudaGetLastError());
  unsigned long long count = 0;
  std::uint32_t first = 0;
  CUDA_OK(cudaMemcpy(&count, mismatches.ptr, sizeof(count), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&first, first_bad.ptr, sizeof(first), cudaMemcpyDeviceToHost));
  EXPECT_EQ(count, 0ull) << "first differing bit pattern 0x" << std::hex << first;
}

// Device memory handed to the CPU backend is refused, and so are device
// ranges that break the rules on the CUDA backend (copied to the host to check).
TEST(DeviceValidation, PointerKindsAndDeviceRanges) {
  constexpr int T = 2, N = 100, K = 512;
  DeviceArray<float> scores(T * N);
  DeviceArray<std::int32_t> ks(T), ke(T), indices(T * K);
  const std::int32_t h_ks[T] = {0, 10}, h_ke[T] = {100, 5};  // row 1: ks > ke
  CUDA_OK(cudaMemcpy(ks.ptr, h_ks, sizeof(h_ks), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ke.ptr, h_ke, sizeof(h_ke), cudaMemcpyHostToDevice));
  TopkParams p;
  p.scores = scores.ptr;
  p.ks = ks.ptr;
  p.ke = ke.ptr;
  p.num_rows = T;
  p.num_cols = N;
  p.score_stride = N;
  p.indices = indices.ptr;
  p.options.k = K;
  const Status on_cpu = validate(p, Backend::kCpu);
  EXPECT_EQ(on_cpu.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(on_cpu.message(), "scores: is device memory; the CPU backend needs host memory");
  const Status ranges = validate(p, Backend::kCuda);
  EXPECT_EQ(ranges.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ranges.message().rfind("ks[1]: must be <= ke[1]", 0), 0u) << ranges.message();
  std::vector<float> host_scores(T * N, 1.0f);
  p.scores = host_scores.data();
  const Status host_on_cuda = validate(p, Backend::kCuda);
  EXPECT_EQ(host_on_cuda.message(), "scores: is host memory; the CUDA backend needs device memory");
}

}  // namespace
}  // namespace dsa
