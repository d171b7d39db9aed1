// A CUDA runtime error as the library's Status (host code): one wording for
// every launcher, "<context>: <runtime's message>".
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "dsa_topk/dsa_topk.h"

namespace dsa {

inline Status cuda_status(cudaError_t err, const std::string& context) {
  return {StatusCode::kCudaError, context + ": " + cudaGetErrorString(err)};
}

}  // namespace dsa
