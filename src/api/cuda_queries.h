// The few CUDA runtime queries the API layer needs, behind a plain C++ header
// so validation code compiles without CUDA headers.
#pragma once

#include <cstddef>
#include <string>

#include "dsa_topk/dsa_topk.h"

namespace dsa::detail {

enum class MemoryKind {
  kHost,     // ordinary or pinned host memory (also: any pointer when no GPU exists)
  kDevice,   // cudaMalloc'd device memory
  kManaged,  // cudaMallocManaged: usable by both backends
};
MemoryKind memory_kind(const void* ptr);

// True when a CUDA device of compute capability 9.0 is usable.
bool cuda_device_present(std::string* why);

// Synchronous device-to-host copy on `stream` (validation of device ranges).
Status copy_to_host(void* dst, const void* src, std::size_t bytes, CUstream_st* stream);

}  // namespace dsa::detail
