#include "baselines.h"

#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/keys.h"
#include "timing.cuh"

namespace dsa::cli {
namespace {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(err)};
}

// Device allocations freed on scope exit.
struct Allocations {
  std::vector<void*> ptrs;
  ~Allocations() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <typename T>
  Status alloc(T** out, std::size_t count) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T));
    if (err == cudaSuccess) ptrs.push_back(p);
    *out = static_cast<T*>(p);
    return cuda_status(err, "cudaMalloc");
  }
};

// Median of `reps` calls timed by timed_calls (call() -> cudaError_t).
template <typename Before, typename Call>
Status median_timed(int reps, Before&& before, Call&& call, const char* what, double* median_ms) {
  std::vector<double> ms;
  const Status st = timed_calls(
      reps, before, [&](int) { return cuda_status(call(), what); }, what, &ms);
  if (!st.ok()) return st;
  if (ms.empty()) return {StatusCode::kInvalidArgument, std::string(what) + ": no timed repetitions"};
  std::sort(ms.begin(), ms.end());
  *median_ms = ms[ms.size() / 2];
  return Status::Ok();
}

constexpr int kReadThreads = 256;
constexpr int kReadVectors = 16;                                // float4 loads a thread
constexpr int kReadChunk = kReadThreads * kReadVectors * 4;     // keys a CTA

// CTA (x, t) reads keys [ks + x * kReadChunk, +kReadChunk) of row t (cut
// at ke): a scalar head up to the first 16-byte boundary, float4 loads,
// a scalar tail; its greatest key goes to row_max[t].
__global__ void __launch_bounds__(kReadThreads) read_once_kernel(const float* scores, std::int64_t stride,
                                                                 const std::int32_t* ks, const std::int32_t* ke,
                                                                 std::uint32_t* row_max) {
  const std::int64_t t = blockIdx.y;
  const std::int64_t begin = ks[t] + static_cast<std::int64_t>(blockIdx.x) * kReadChunk;
  const std::int64_t end = min(begin + kReadChunk, static_cast<std::int64_t>(ke[t]));
  if (begin >= end) return;
  const float* part = scores + t * stride + begin;
  const std::int64_t len = end - begin;
  const std::int64_t head = min(static_cast<std::int64_t>((16 - (reinterpret_cast<std::uintptr_t>(part) & 15)) / 4 % 4), len);
  const std::int64_t vectors = (len - head) / 4;
  const float4* body = reinterpret_cast<const float4*>(part + head);
  float4 v[kReadVectors];
#pragma unroll
  for (int j = 0; j < kReadVectors; ++j) {
    const std::int64_t i = threadIdx.x + j * kReadThreads;
    v[j] = i < vectors ? body[i] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  }
  float best = -INFINITY;
  if (threadIdx.x < head) best = part[threadIdx.x];
  const std::int64_t tail = head + 4 * vectors + threadIdx.x;
  if (tail < len) best = fmaxf(best, part[tail]);
#pragma unroll
  for (int j = 0; j < kReadVectors; ++j) best = fmaxf(best, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
  for (int offset = 16; offset > 0; offset /= 2) best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, offset));
  if (threadIdx.x % 32 == 0) atomicMax(row_max + t, score_key(best));
}

}  // namespace

Status time_read_once(const tools::ScoresProblem& prob, int reps, double* median_ms) {
  std::int64_t longest = 0;
  for (std::int64_t t = 0; t < prob.T; ++t) longest = std::max<std::int64_t>(longest, prob.ke[t] - prob.ks[t]);
  if (prob.T == 0 || longest == 0) return {StatusCode::kInvalidArgument, "read once: no keys to read"};
  if (prob.T > 65535) return {StatusCode::kUnsupported, "read once: at most 65535 rows"};
  Allocations mem;
  float* scores;
  std::int32_t *ks, *ke;
  std::uint32_t* row_max;
  const std::size_t items = static_cast<std::size_t>(prob.T * prob.stride);
  for (Status st : {mem.alloc(&scores, items), mem.alloc(&ks, prob.T), mem.alloc(&ke, prob.T),
                    mem.alloc(&row_max, prob.T)}) {
    if (!st.ok()) return st;
  }
  cudaMemcpy(scores, prob.scores.data(), items * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(ks, prob.ks.data(), prob.T * sizeof(std::int32_t), cudaMemcpyHostToDevice);
  cudaMemcpy(ke, prob.ke.data(), prob.T * sizeof(std::int32_t), cudaMemcpyHostToDevice);
  const dim3 grid(static_cast<unsigned>((longest + kReadChunk - 1) / kReadChunk), static_cast<unsigned>(prob.T));
  return median_timed(
      reps, [&] { cudaMemsetAsync(row_max, 0, prob.T * sizeof(std::uint32_t)); },
      [&] {
        read_once_kernel<<<grid, kReadThreads>>>(scores, prob.stride, ks, ke, row_max);
        return cudaGetLastError();
      },
      "read once", median_ms);
}

Status time_cub_segmented_sort(const tools::ScoresProblem& prob, int reps, double* median_ms) {
  const std::int64_t items = prob.T * prob.stride;
  if (items > std::numeric_limits<int>::max()) {
    return {StatusCode::kUnsupported, "CUB segmented sort takes at most 2^31-1 items"};
  }
  std::vector<int> positions(static_cast<std::size_t>(items)), begin(prob.T), end(prob.T);
  std::iota(positions.begin(), positions.end(), 0);
  for (std::int64_t t = 0; t < prob.T; ++t) {
    begin[t] = static_cast<int>(t * prob.stride + prob.ks[t]);
    end[t] = static_cast<int>(t * prob.stride + prob.ke[t]);
  }
  Allocations mem;
  float *keys_in, *keys_out;
  int *values_in, *values_out, *d_begin, *d_end;
  for (Status st : {mem.alloc(&keys_in, items), mem.alloc(&keys_out, items), mem.alloc(&values_in, items),
                    mem.alloc(&values_out, items), mem.alloc(&d_begin, prob.T), mem.alloc(&d_end, prob.T)}) {
    if (!st.ok()) return st;
  }
  cudaMemcpy(keys_in, prob.scores.data(), items * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(values_in, positions.data(), items * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemcpy(d_begin, begin.data(), prob.T * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemcpy(d_end, end.data(), prob.T * sizeof(int), cudaMemcpyHostToDevice);
  std::size_t temp_bytes = 0;
  auto sort = [&](void* temp) {
    return cub::DeviceSegmentedRadixSort::SortPairsDescending(temp, temp_bytes, keys_in, keys_out, values_in,
                                                              values_out, static_cast<int>(items),
                                                              static_cast<int>(prob.T), d_begin, d_end);
  };
  if (Status st = cuda_status(sort(nullptr), "CUB temp size"); !st.ok()) return st;
  std::uint8_t* temp = nullptr;
  if (Status st = mem.alloc(&temp, temp_bytes); !st.ok()) return st;
  return median_timed(reps, [] {}, [&] { return sort(temp); }, "CUB segmented sort", median_ms);
}

}  // namespace dsa::cli
