// Launcher of the standalone top-k: picks the kernel instance for K and the
// row-length bound, and launches one CTA per row on the caller's stream.
#include "selection/topk/topk.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include "common/cuda_status.h"
#include "common/launch_cache.h"
#include "selection/topk/config.h"
#include "selection/topk/launch_plan.h"
#include "selection/topk/resident_kernel.cuh"
#include "selection/topk/topk_kernel.cuh"

namespace dsa::selection::topk {
namespace {

Status cuda_error(cudaError_t err, const char* what) { return cuda_status(err, std::string("topk: ") + what); }

// The kernel instance, its shared-memory size, and what the sampled
// kernel's row prefetch needs: how many CTAs run at once, and the L2 size.
struct Instance {
  const void* kernel;
  std::size_t smem_bytes;
  int threads;
  int ctas_on_device;  // SMs x CTAs an SM
  int l2_bytes;
  int cluster = 1;        // CTAs a row (topk_split_kernel when > 1)
  bool resident = false;  // topk_resident_kernel
};

// Sets the kernel's dynamic shared-memory size and the least carveout that
// keeps min_ctas_per_sm CTAs resident (the rest of the SM's 256 KB stays
// L1, which holds the filter's loads in flight: the largest carveout cost
// rows of N >= 64K 7-13 %, docs/perf-log.md, T5), once per kernel and device
// (LaunchCache). Host-side attributes, not stream operations: graph capture
// is unaffected.
Status prepare(const void* kernel, std::size_t smem_bytes, int threads, int min_ctas_per_sm, int device,
               const DeviceLimits& limits, Instance* out) {
  int unused = 0;
  const Status st = LaunchCache::get().once(
      kernel, device,
      [&](int*) -> Status {
        cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
        if (err != cudaSuccess) return cuda_error(err, "setting the shared-memory size");
        const std::size_t needed =
            min_ctas_per_sm * (smem_bytes + static_cast<std::size_t>(limits.reserved_per_block));
        const int percent = static_cast<int>(
            std::min<std::size_t>(100, (100 * needed + limits.smem_per_sm - 1) / limits.smem_per_sm));
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
        return err == cudaSuccess ? Status::Ok() : cuda_error(err, "setting the shared-memory carveout");
      },
      &unused);
  if (!st.ok()) return st;
  *out = {kernel, smem_bytes, threads, min_ctas_per_sm * limits.sm_count, limits.l2_bytes};
  return Status::Ok();
}

// Launch configuration of `cluster` CTAs a row, programmatic when asked
// (attrs: storage for two attributes the configuration points to).
cudaLaunchConfig_t launch_config(const Instance& inst, std::int64_t num_rows, CUstream_st* stream, bool programmatic,
                                 cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(num_rows * inst.cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(inst.threads));
  cfg.dynamicSmemBytes = inst.smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attrs;
  if (inst.cluster > 1) {
    cudaLaunchAttribute& a = attrs[cfg.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = static_cast<unsigned>(inst.cluster);
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
  }
  if (programmatic) {
    cudaLaunchAttribute& a = attrs[cfg.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  return cfg;
}

template <int K, class G>
Status prepare_sampled(int device, const DeviceLimits& limits, Instance* out) {
  return prepare(reinterpret_cast<const void*>(&topk_kernel<K, G>), sizeof(typename Config<K, G>::SharedStorage),
                 G::kThreads, G::kMinCtasPerSm, device, limits, out);
}

// The split kernel: prepare()'s set-up, and the cluster size for num_rows
// rows of up to num_cols keys (`forced`: 2, 4, 8 or 16; 0 picks
// split_cluster_size's, at least 2 when `at_least_two`). Sets out->cluster
// (1: the launch does not split).
static_assert(kMaxSplit == 2 << (kSplitSizes - 1), "the shared plan holds the largest cluster's counts");
template <int K, class G>
Status prepare_split(int device, const DeviceLimits& limits, std::int64_t num_rows, std::int64_t num_cols, int forced,
                     bool at_least_two, Instance* out) {
  const void* kernel = reinterpret_cast<const void*>(&topk_split_kernel<K, G>);
  Status st = prepare(kernel, sizeof(typename Config<K, G>::SharedStorage), G::kThreads, G::kMinCtasPerSm, device,
                      limits, out);
  if (!st.ok()) return st;
  // The clusters of each size the device holds at once (16 CTAs is past the
  // portable size, allowed per kernel; a device that places none gets 0).
  int clusters[kSplitSizes] = {};
  for (int i = 0; i < kSplitSizes && st.ok(); ++i) {
    st = LaunchCache::get().once(
        kernel, device,
        [&](int* value) -> Status {
          cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
          if (err != cudaSuccess) return cuda_error(err, "allowing the split kernel's largest clusters");
          Instance probe = *out;
          probe.cluster = 2 << i;
          cudaLaunchAttribute attrs[2] = {};
          const cudaLaunchConfig_t cfg = launch_config(probe, 1, nullptr, false, attrs);
          err = cudaOccupancyMaxActiveClusters(value, kernel, &cfg);
          return err == cudaSuccess ? Status::Ok() : cuda_error(err, "reading the split kernel's cluster occupancy");
        },
        &clusters[i], /*tag=*/1 + i);
  }
  if (!st.ok()) return st;
  out->cluster = forced != 0 ? forced : split_cluster_size(num_rows, num_cols, clusters);
  if (at_least_two && out->cluster < 2) out->cluster = 2;
  return Status::Ok();
}

template <int K, class R>
Status prepare_resident(int device, const DeviceLimits& limits, Instance* out) {
  const Status st = prepare(reinterpret_cast<const void*>(&topk_resident_kernel<K, R>),
                            sizeof(typename ResidentConfig<K, R>::SharedStorage), R::kThreads, R::kMinCtasPerSm,
                            device, limits, out);
  if (st.ok()) out->resident = true;
  return st;
}

// Rows are at most num_cols long (known on the host without reading
// ks/ke). Up to kResidentMaxLen the row fits shared memory: the resident
// kernel, the geometry with the most rows per SM that holds it; longer rows
// (or a pinned sampled engine) take the sampled kernel, at 1024 threads a
// row when the launch has at most one row per SM (then each CTA is alone on
// its SM and more threads keep more of the row in flight), each row split
// over a cluster of such CTAs when the rows are few and long enough
// (split_cluster_size), else with LongRows64K's smaller buffers up to 64K
// (more of the SM left to L1) and LongRows beyond.
template <int K>
Status prepare_for(std::int64_t num_rows, std::int64_t num_cols, TopkEngine engine, int split_ctas, Instance* out) {
  constexpr bool kWideFits = K % WideRows::kThreads == 0;
  // A pinned engine whose rows are shorter than num_cols.
  const auto too_long = [num_cols](const char* what, std::int64_t max_len) -> Status {
    return {StatusCode::kInvalidArgument, std::string("topk: the ") + what + " takes rows of at most " +
                                              std::to_string(max_len) + " keys (num_cols " +
                                              std::to_string(num_cols) + ")"};
  };
  if (engine == TopkEngine::kResident && num_cols > kResidentMaxLen) {
    return too_long("resident kernel", kResidentMaxLen);
  }
  if (engine == TopkEngine::kSampled64K && num_cols > LongRows64K::kMaxLen) {
    return too_long("64K sampled geometry", LongRows64K::kMaxLen);
  }
  if (split_ctas != 0 && (split_ctas < 2 || split_ctas > kMaxSplit || (split_ctas & (split_ctas - 1)) != 0)) {
    return {StatusCode::kInvalidArgument, "topk: a row splits over 2, 4, 8 or 16 CTAs (split_ctas " +
                                              std::to_string(split_ctas) + ")"};
  }
  if ((engine == TopkEngine::kSampledWide || engine == TopkEngine::kSampledSplit) && !kWideFits) {
    return {StatusCode::kInvalidArgument, "topk: the wide sampled geometry needs K >= " +
                                              std::to_string(WideRows::kThreads) + " (K " + std::to_string(K) + ")"};
  }
  int device = 0;
  DeviceLimits limits;
  const Status st = LaunchCache::get().current(&device, &limits);
  if (!st.ok()) return st;
  const bool sampled = engine == TopkEngine::kSampled || engine == TopkEngine::kSampledWide ||
                       engine == TopkEngine::kSampled64K || engine == TopkEngine::kSampledSplit;
  if (!sampled && num_cols <= kResidentMaxLen) {
    return num_cols <= ResidentRows8K::kMaxLen ? prepare_resident<K, ResidentRows8K>(device, limits, out)
                                               : prepare_resident<K, ResidentRows16K>(device, limits, out);
  }
  if constexpr (kWideFits) {
    const bool few_rows = engine == TopkEngine::kAuto && num_rows <= limits.sm_count;
    if (engine == TopkEngine::kSampledSplit || (few_rows && rows_may_split(num_cols))) {
      const bool pinned = engine == TopkEngine::kSampledSplit;
      const Status split =
          prepare_split<K, WideRows>(device, limits, num_rows, num_cols, pinned ? split_ctas : 0, pinned, out);
      if (!split.ok() || out->cluster > 1) return split;
    }
    if (engine == TopkEngine::kSampledWide || few_rows) return prepare_sampled<K, WideRows>(device, limits, out);
  }
  if (engine == TopkEngine::kSampled64K || (engine == TopkEngine::kAuto && num_cols <= LongRows64K::kMaxLen)) {
    return prepare_sampled<K, LongRows64K>(device, limits, out);
  }
  return prepare_sampled<K, LongRows>(device, limits, out);
}

Status prepare_for(int k, std::int64_t num_rows, std::int64_t num_cols, TopkEngine engine, int split_ctas,
                   Instance* out) {
  switch (k) {
    case 512: return prepare_for<512>(num_rows, num_cols, engine, split_ctas, out);
    case 1024: return prepare_for<1024>(num_rows, num_cols, engine, split_ctas, out);
    case 2048: return prepare_for<2048>(num_rows, num_cols, engine, split_ctas, out);
    default: return {StatusCode::kInternal, "topk: K " + std::to_string(k) + " has no kernel"};
  }
}

}  // namespace

Status launch_topk(const TopkParams& params, CUstream_st* stream, const TopkHooks& hooks) {
  if (params.num_rows == 0) return Status::Ok();
  Instance inst{};
  TopkEngine engine = hooks.engine;
  if (hooks.force_threshold && engine != TopkEngine::kSampledWide && engine != TopkEngine::kSampled64K &&
      engine != TopkEngine::kSampledSplit) {
    engine = TopkEngine::kSampled;
  }
  const Status st = prepare_for(params.options.k, params.num_rows, params.num_cols, engine, hooks.split_ctas, &inst);
  if (!st.ok()) return st;
  const bool programmatic = launch_programmatic(hooks.after_producer, inst.resident, params.num_rows, inst.ctas_on_device);
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
                        hooks.forced_tau_tie_free,
                        hooks.trace,
                        hooks.row_mask,
                        row_prefetch_bytes(params.num_rows * inst.cluster, inst.ctas_on_device, inst.l2_bytes),
                        programmatic};
  void* args[] = {const_cast<KernelParams*>(&kp)};
  cudaLaunchAttribute attrs[2] = {};
  const cudaLaunchConfig_t cfg = launch_config(inst, params.num_rows, stream, programmatic, attrs);
  const cudaError_t err = cfg.numAttrs > 0 ? cudaLaunchKernelExC(&cfg, inst.kernel, args)
                                           : cudaLaunchKernel(inst.kernel, cfg.gridDim, cfg.blockDim, args,
                                                              cfg.dynamicSmemBytes, stream);
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "kernel launch");
}

int topk_ctas_per_sm(int k, std::int64_t num_cols, TopkEngine engine) {
  Instance inst{};
  // kAuto: as for a launch of more rows than SMs.
  if (!prepare_for(k, std::numeric_limits<std::int64_t>::max(), num_cols, engine, 0, &inst).ok()) return -1;
  int ctas = 0;
  const cudaError_t err =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, inst.kernel, inst.threads, inst.smem_bytes);
  return err == cudaSuccess ? ctas : -1;
}

}  // namespace dsa::selection::topk
