#include "l2_flush.h"

#include <cuda_runtime.h>

#include <string>

namespace dsa::cli {
namespace {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string("L2 flush: ") + what + ": " + cudaGetErrorString(err)};
}

// Reads every 16-byte word once. The buffer is zeroed, so the sink is never
// written; the compare keeps the loads.
__global__ void read_all_kernel(const uint4* data, std::size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = data[i];  // cached loads: they take the lines (an evict-first load would not)
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

bool g_cold_l2 = false;

}  // namespace

void set_cold_l2(bool cold) { g_cold_l2 = cold; }
bool cold_l2() { return g_cold_l2; }

L2Flush::~L2Flush() {
  cudaFree(buffer_);
  cudaFree(sink_);
}

Status L2Flush::init() {
  if (!g_cold_l2 || buffer_) return Status::Ok();
  int device = 0, l2_bytes = 0, sms = 0;
  Status st = cuda_status(cudaGetDevice(&device), "cudaGetDevice");
  if (st.ok()) st = cuda_status(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "L2 size");
  if (st.ok()) st = cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  if (!st.ok()) return st;
  const std::size_t bytes = 4 * static_cast<std::size_t>(l2_bytes > 0 ? l2_bytes : 64 << 20);
  void* buffer = nullptr;
  st = cuda_status(cudaMalloc(&buffer, bytes), "allocating the flush buffer");
  if (st.ok()) st = cuda_status(cudaMalloc(&sink_, sizeof(unsigned)), "allocating the sink");
  if (st.ok()) st = cuda_status(cudaMemset(buffer, 0, bytes), "zeroing the flush buffer");
  if (!st.ok()) {
    cudaFree(buffer);
    return st;
  }
  buffer_ = buffer;
  vectors_ = bytes / sizeof(uint4);
  blocks_ = 4 * (sms > 0 ? sms : 132);
  return Status::Ok();
}

Status L2Flush::run(CUstream_st* stream) const {
  if (!buffer_) return Status::Ok();
  read_all_kernel<<<blocks_, 512, 0, stream>>>(static_cast<const uint4*>(buffer_), vectors_, sink_);
  return cuda_status(cudaGetLastError(), "read kernel");
}

}  // namespace dsa::cli
