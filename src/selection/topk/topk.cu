// Launcher of the standalone top-k: picks the kernel instance for K and
// launches one CTA per row on the caller's stream.
#include "selection/topk/topk.h"

#include <cuda_runtime.h>

#include <string>

#include "selection/topk/config.h"
#include "selection/topk/topk_kernel.cuh"

namespace dsa::selection::topk {
namespace {

Status cuda_error(cudaError_t err, const char* what) {
  return {StatusCode::kCudaError, std::string("topk: ") + what + ": " + cudaGetErrorString(err)};
}

template <int K>
Status launch(const KernelParams& kp, std::int64_t rows, cudaStream_t stream) {
  constexpr std::size_t kSmemBytes = sizeof(typename Config<K>::SharedStorage);
  // Above the 48 KB default: opt in (a host-side attribute, not a stream
  // operation, so graph capture is unaffected).
  cudaError_t err = cudaFuncSetAttribute(topk_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmemBytes));
  if (err != cudaSuccess) return cuda_error(err, "setting the shared-memory size");
  topk_kernel<K><<<static_cast<unsigned>(rows), kThreads, kSmemBytes, stream>>>(kp);
  err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "kernel launch");
}

}  // namespace

Status launch_topk(const TopkParams& params, CUstream_st* stream, const TopkHooks& hooks) {
  if (params.num_rows == 0) return Status::Ok();
  const KernelParams kp{params.scores,
                        params.score_stride,
                        params.ks,
                        params.ke,
                        params.indices,
                        params.values,
                        params.options.index_base == IndexBase::kRelative,
                        params.options.ties == TieBreak::kSmallestIndex,
                        params.options.sorted,
                        hooks.force_threshold,
                        hooks.forced_threshold_key,
                        hooks.trace};
  switch (params.options.k) {
    case 512: return launch<512>(kp, params.num_rows, stream);
    case 1024: return launch<1024>(kp, params.num_rows, stream);
    case 2048: return launch<2048>(kp, params.num_rows, stream);
    default: return {StatusCode::kInternal, "topk: K " + std::to_string(params.options.k) + " has no kernel"};
  }
}

}  // namespace dsa::selection::topk
