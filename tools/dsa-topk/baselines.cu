#include "baselines.h"

#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

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

}  // namespace

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
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  Status st;
  for (int i = 0; i <= reps && st.ok(); ++i) {
    cudaEventRecord(start);
    st = cuda_status(sort(temp), "CUB segmented sort");
    cudaEventRecord(stop);
    if (st.ok()) st = cuda_status(cudaEventSynchronize(stop), "CUB segmented sort");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (i > 0) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!st.ok()) return st;
  std::sort(ms.begin(), ms.end());
  *median_ms = ms[ms.size() / 2];
  return Status::Ok();
}

}  // namespace dsa::cli
