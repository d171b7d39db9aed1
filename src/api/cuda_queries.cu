#include "api/cuda_queries.h"

#include <cuda_runtime.h>

#include "common/cuda_status.h"

namespace dsa::detail {

MemoryKind memory_kind(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // no device or driver: every pointer is a host pointer
    return MemoryKind::kHost;
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice: return MemoryKind::kDevice;
    case cudaMemoryTypeManaged: return MemoryKind::kManaged;
    default: return MemoryKind::kHost;
  }
}

bool cuda_device_present(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) {
      // Without a driver the runtime says "CUDA driver version is
      // insufficient for CUDA runtime version": its text follows, after what
      // it means here.
      *why = std::string("no usable GPU / CUDA driver found (CUDA runtime: ") +
             (err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device present") + ")";
    }
    cudaGetLastError();
    return false;
  }
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    if (why) {
      *why = "CUDA device " + std::to_string(device) + " has compute capability " +
             std::to_string(major) + "." + std::to_string(minor) +
             "; this build holds sm_90a code only (H100/H200)";
    }
    return false;
  }
  return true;
}

Status copy_to_host(void* dst, const void* src, std::size_t bytes, CUstream_st* stream) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    return cuda_status(err, "copying ranges to the host");
  }
  return Status::Ok();
}

}  // namespace dsa::detail
