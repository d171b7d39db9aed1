// Launcher of the standalone top-k: picks the kernel instance for K and the
// row-length bound, and launches one CTA per row on the caller's stream.
#include "selection/topk/topk.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "selection/topk/config.h"
#include "selection/topk/resident_kernel.cuh"
#include "selection/topk/topk_kernel.cuh"

namespace dsa::selection::topk {
namespace {

Status cuda_error(cudaError_t err, const char* what) {
  return {StatusCode::kCudaError, std::string("topk: ") + what + ": " + cudaGetErrorString(err)};
}

// The kernel instance and its shared-memory size; sets the attributes it
// needs above the defaults (host-side attributes, not stream operations, so
// graph capture is unaffected).
struct Instance {
  const void* kernel;
  std::size_t smem_bytes;
  int threads;
};

Status prepare(const void* kernel, std::size_t smem_bytes, int threads, int min_ctas_per_sm, Instance* out) {
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
  if (err != cudaSuccess) return cuda_error(err, "setting the shared-memory size");
  // The least carveout that keeps min_ctas_per_sm CTAs resident: the rest
  // of the SM's 256 KB stays L1, which holds the filter's loads in flight
  // (the largest carveout cost rows of N >= 64K 7-13 %, docs/perf-log.md).
  int device = 0, sm_bytes = 0, reserved = 0;
  err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
  if (err != cudaSuccess) return cuda_error(err, "reading the device's shared-memory size");
  const std::size_t needed = min_ctas_per_sm * (smem_bytes + static_cast<std::size_t>(reserved));
  const int percent = static_cast<int>(std::min<std::size_t>(100, (100 * needed + sm_bytes - 1) / sm_bytes));
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
  if (err != cudaSuccess) return cuda_error(err, "setting the shared-memory carveout");
  *out = {kernel, smem_bytes, threads};
  return Status::Ok();
}

template <int K, class G>
Status prepare_sampled(Instance* out) {
  return prepare(reinterpret_cast<const void*>(&topk_kernel<K, G>), sizeof(typename Config<K, G>::SharedStorage),
                 G::kThreads, G::kMinCtasPerSm, out);
}

template <int K, class R>
Status prepare_resident(Instance* out) {
  return prepare(reinterpret_cast<const void*>(&topk_resident_kernel<K, R>),
                 sizeof(typename ResidentConfig<K, R>::SharedStorage), R::kThreads, R::kMinCtasPerSm, out);
}

// Rows are at most num_cols long (known on the host without reading
// ks/ke). Up to kResidentMaxLen the row fits shared memory: the resident
// kernel, the geometry with the most rows per SM that holds it; longer rows
// (or a pinned kSampled) take the sampled kernel.
template <int K>
Status prepare_for(std::int64_t num_cols, TopkEngine engine, Instance* out) {
  if (engine == TopkEngine::kResident && num_cols > kResidentMaxLen) {
    return {StatusCode::kInvalidArgument, "topk: the resident kernel takes rows of at most " +
                                              std::to_string(kResidentMaxLen) + " keys (num_cols " +
                                              std::to_string(num_cols) + ")"};
  }
  if (engine != TopkEngine::kSampled && num_cols <= kResidentMaxLen) {
    return num_cols <= ResidentRows8K::kMaxLen ? prepare_resident<K, ResidentRows8K>(out)
                                               : prepare_resident<K, ResidentRows16K>(out);
  }
  return prepare_sampled<K, LongRows>(out);
}

Status prepare_for(int k, std::int64_t num_cols, TopkEngine engine, Instance* out) {
  switch (k) {
    case 512: return prepare_for<512>(num_cols, engine, out);
    case 1024: return prepare_for<1024>(num_cols, engine, out);
    case 2048: return prepare_for<2048>(num_cols, engine, out);
    default: return {StatusCode::kInternal, "topk: K " + std::to_string(k) + " has no kernel"};
  }
}

}  // namespace

Status launch_topk(const TopkParams& params, CUstream_st* stream, const TopkHooks& hooks) {
  if (params.num_rows == 0) return Status::Ok();
  const KernelParams kp{params.scores,
                        params.score_stride,
                        params.ks,
                        params.ke,
                        params.num_cols,
                        params.indices,
                        params.values,
                        params.options.index_base == IndexBase::kRelative,
                        params.options.ties == TieBreak::kSmallestIndex,
                        params.options.sorted,
                        hooks.force_threshold,
                        hooks.forced_threshold_key,
                        hooks.trace,
                        hooks.row_mask};
  Instance inst{};
  const TopkEngine engine = hooks.force_threshold ? TopkEngine::kSampled : hooks.engine;
  const Status st = prepare_for(params.options.k, params.num_cols, engine, &inst);
  if (!st.ok()) return st;
  void* args[] = {const_cast<KernelParams*>(&kp)};
  const cudaError_t err = cudaLaunchKernel(inst.kernel, dim3(static_cast<unsigned>(params.num_rows)),
                                           dim3(inst.threads), args, inst.smem_bytes, stream);
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "kernel launch");
}

int topk_ctas_per_sm(int k, std::int64_t num_cols, TopkEngine engine) {
  Instance inst{};
  if (!prepare_for(k, num_cols, engine, &inst).ok()) return -1;
  int ctas = 0;
  const cudaError_t err =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, inst.kernel, inst.threads, inst.smem_bytes);
  return err == cudaSuccess ? ctas : -1;
}

}  // namespace dsa::selection::topk
