// Launcher of the standalone top-k: the kernel instance of K and make_plan's
// geometry (plan.h), launched on the caller's stream, one CTA (or one
// cluster) a row.
#include "selection/topk/topk.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include "common/cuda_status.h"
#include "common/launch_cache.h"
#include "common/sm90/grid_dependency.cuh"
#include "selection/topk/cluster_kernel.cuh"
#include "selection/topk/config.h"
#include "selection/topk/plan.h"
#include "selection/topk/resident_kernel.cuh"
#include "selection/topk/topk_kernel.cuh"

namespace dsa::selection::topk {
namespace {

Status cuda_error(cudaError_t err, const char* what) { return cuda_status(err, std::string("topk: ") + what); }

// The plan's kernel instance and its shared-memory size; cluster: CTAs a
// row (topk_split_kernel or topk_cluster_kernel when > 1).
struct Instance {
  const void* kernel;
  std::size_t smem_bytes;
  int cluster = 1;
};

// Sets the kernel's dynamic shared-memory size and the least carveout that
// keeps the plan's min_ctas_per_sm CTAs resident (the rest of the SM's 256
// KB stays L1, which holds the filter's loads in flight: the largest
// carveout cost rows of N >= 64K 7-13 %, docs/perf-log.md, T5), once per
// kernel and device (LaunchCache). Host-side attributes, not stream
// operations: graph capture is unaffected.
Status prepare(const void* kernel, std::size_t smem_bytes, const TopkPlan& plan, int device,
               const DeviceLimits& limits, Instance* out) {
  int unused = 0;
  const Status st = LaunchCache::get().once(
      kernel, device,
      [&](int*) -> Status {
        cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
        if (err != cudaSuccess) return cuda_error(err, "setting the shared-memory size");
        const std::size_t needed =
            plan.min_ctas_per_sm * (smem_bytes + static_cast<std::size_t>(limits.reserved_per_block));
        const int percent = static_cast<int>(
            std::min<std::size_t>(100, (100 * needed + limits.smem_per_sm - 1) / limits.smem_per_sm));
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
        return err == cudaSuccess ? Status::Ok() : cuda_error(err, "setting the shared-memory carveout");
      },
      &unused);
  if (!st.ok()) return st;
  *out = {kernel, smem_bytes};
  return Status::Ok();
}

// Launch configuration of `cluster` CTAs a row, programmatic when the plan
// says so (attrs: storage for two attributes the configuration points to).
cudaLaunchConfig_t launch_config(const TopkPlan& plan, const Instance& inst, std::int64_t num_rows,
                                 CUstream_st* stream, bool programmatic, cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(num_rows * inst.cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(plan.threads));
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
  if (programmatic) attrs[cfg.numAttrs++] = sm90::programmatic_serialization();
  return cfg;
}

template <int K, class G>
Status prepare_sampled(const TopkPlan& plan, int device, const DeviceLimits& limits, Instance* out) {
  const void* kernel = reinterpret_cast<const void*>(&topk_kernel<K, G, false>);
  if (plan.entry_rows) {  // entry_geometry never picks LongRows64K: no instance of it with entries
    if constexpr (std::is_same_v<G, LongRows64K>) {
      return {StatusCode::kInternal, "topk: entry rows have no LongRows64K instance"};
    } else {
      kernel = reinterpret_cast<const void*>(&topk_kernel<K, G, true>);
    }
  }
  return prepare(kernel, sizeof(typename Config<K, G>::SharedStorage), plan, device, limits, out);
}

// The clusters of each size (2 << i CTAs, i < kSplitSizes) the device holds
// at once of `kernel`, prepared as `inst` (16 CTAs is past the portable
// size, allowed per kernel; a device that places none gets 0), read once
// per kernel and device.
Status cluster_occupancy(const void* kernel, const TopkPlan& plan, const Instance& inst, int device,
                         int (&clusters)[kSplitSizes]) {
  for (int i = 0; i < kSplitSizes; ++i) {
    const Status st = LaunchCache::get().once(
        kernel, device,
        [&](int* value) -> Status {
          cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
          if (err != cudaSuccess) return cuda_error(err, "allowing clusters of 16 CTAs");
          Instance probe = inst;
          probe.cluster = 2 << i;
          cudaLaunchAttribute attrs[2] = {};
          const cudaLaunchConfig_t cfg = launch_config(plan, probe, 1, nullptr, false, attrs);
          err = cudaOccupancyMaxActiveClusters(value, kernel, &cfg);
          return err == cudaSuccess ? Status::Ok() : cuda_error(err, "reading the cluster occupancy");
        },
        &clusters[i], /*tag=*/1 + i);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// The split kernel: prepare()'s set-up, its cluster occupancy, and the
// plan's CTAs a row for num_rows rows of up to num_cols keys in
// out->cluster (1: the launch does not split).
template <int K, class G>
Status prepare_split(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols, int device,
                     const DeviceLimits& limits, Instance* out) {
  const void* kernel = reinterpret_cast<const void*>(&topk_split_kernel<K, G>);
  Status st = prepare(kernel, sizeof(typename Config<K, G>::SharedStorage), plan, device, limits, out);
  if (!st.ok()) return st;
  int clusters[kSplitSizes] = {};
  st = cluster_occupancy(kernel, plan, *out, device, clusters);
  if (!st.ok()) return st;
  out->cluster = split_ctas_for(plan, num_rows, num_cols, clusters);
  return Status::Ok();
}

// The cluster-resident kernel: prepare()'s set-up at its largest part, its
// cluster occupancy, the plan's CTAs a row in out->cluster (0: not this
// kernel) and the launch's shared memory for the parts of that size.
template <int K>
Status prepare_cluster(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols, int device,
                       const DeviceLimits& limits, Instance* out) {
  using Cfg = ClusterConfig<K>;
  const void* kernel = reinterpret_cast<const void*>(&topk_cluster_kernel<K>);
  Status st = prepare(kernel, Cfg::kMaxSmemBytes, plan, device, limits, out);
  if (!st.ok()) return st;
  int clusters[kSplitSizes] = {};
  st = cluster_occupancy(kernel, plan, *out, device, clusters);
  if (!st.ok()) return st;
  out->cluster = cluster_ctas_for(plan, num_rows, num_cols, clusters);
  if (out->cluster > 0) out->smem_bytes = Cfg::smem_bytes(num_cols, out->cluster);
  return Status::Ok();
}

template <int K, class R>
Status prepare_resident(const TopkPlan& plan, int device, const DeviceLimits& limits, Instance* out) {
  return prepare(reinterpret_cast<const void*>(&topk_resident_kernel<K, R>),
                 sizeof(typename ResidentConfig<K, R>::SharedStorage), plan, device, limits, out);
}

// The instance of K and the plan's geometry, its attributes set; a cluster
// plan whose pick is none runs the split kernel or the wide one as the
// automatic engine picks them without it, and a split plan whose pick is
// one CTA a row runs the wide kernel (the same threads and CTAs an SM).
template <int K>
Status prepare_for(const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols, int device,
                   const DeviceLimits& limits, Instance* out) {
  switch (plan.geometry) {
    case TopkGeometry::kResident8K: return prepare_resident<K, ResidentRows8K>(plan, device, limits, out);
    case TopkGeometry::kResident16K: return prepare_resident<K, ResidentRows16K>(plan, device, limits, out);
    case TopkGeometry::kClusterRows:
    case TopkGeometry::kSplitRows:
    case TopkGeometry::kWideRows:
      if constexpr (K % WideRows::kThreads == 0) {
        if (plan.geometry == TopkGeometry::kClusterRows) {
          const Status cluster = prepare_cluster<K>(plan, num_rows, num_cols, device, limits, out);
          if (!cluster.ok() || out->cluster > 0) return cluster;
        }
        if (plan.geometry == TopkGeometry::kSplitRows ||
            (plan.geometry == TopkGeometry::kClusterRows && rows_may_split(num_cols))) {
          const Status split = prepare_split<K, WideRows>(plan, num_rows, num_cols, device, limits, out);
          if (!split.ok() || out->cluster > 1) return split;
        }
        return prepare_sampled<K, WideRows>(plan, device, limits, out);
      }
      break;
    case TopkGeometry::kLongRows64K: return prepare_sampled<K, LongRows64K>(plan, device, limits, out);
    case TopkGeometry::kLongRows: return prepare_sampled<K, LongRows>(plan, device, limits, out);
  }
  return {StatusCode::kInternal, "topk: K " + std::to_string(K) + " has no instance of the plan's geometry"};
}

Status prepare_for(int k, const TopkPlan& plan, std::int64_t num_rows, std::int64_t num_cols, int device,
                   const DeviceLimits& limits, Instance* out) {
  switch (k) {
    case 512: return prepare_for<512>(plan, num_rows, num_cols, device, limits, out);
    case 1024: return prepare_for<1024>(plan, num_rows, num_cols, device, limits, out);
    case 2048: return prepare_for<2048>(plan, num_rows, num_cols, device, limits, out);
    default: return {StatusCode::kInternal, "topk: K " + std::to_string(k) + " has no kernel"};
  }
}

}  // namespace

Status launch_topk(const TopkParams& params, CUstream_st* stream, const TopkHooks& hooks) {
  if (params.num_rows == 0) return Status::Ok();
  int device = 0;
  DeviceLimits limits;
  Status st = LaunchCache::get().current(&device, &limits);
  if (!st.ok()) return st;
  TopkPlan plan;
  st = make_plan(params, limits, hooks, &plan);
  if (!st.ok()) return st;
  Instance inst{};
  st = prepare_for(params.options.k, plan, params.num_rows, params.num_cols, device, limits, &inst);
  if (!st.ok()) return st;
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
                        row_prefetch_bytes(params.num_rows * inst.cluster, plan.ctas_on_device, limits.l2_bytes),
                        plan.programmatic};
  // The sampled kernel's second parameter (the other kernels have one: the
  // launch reads as many arguments as the kernel takes).
  void* args[] = {const_cast<KernelParams*>(&kp), const_cast<EntryRows*>(&hooks.entries)};
  cudaLaunchAttribute attrs[2] = {};
  const cudaLaunchConfig_t cfg = launch_config(plan, inst, params.num_rows, stream, plan.programmatic, attrs);
  const cudaError_t err = cfg.numAttrs > 0 ? cudaLaunchKernelExC(&cfg, inst.kernel, args)
                                           : cudaLaunchKernel(inst.kernel, cfg.gridDim, cfg.blockDim, args,
                                                              cfg.dynamicSmemBytes, stream);
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "kernel launch");
}

int topk_ctas_per_sm(int k, std::int64_t num_cols, TopkEngine engine) {
  int device = 0;
  DeviceLimits limits;
  if (!LaunchCache::get().current(&device, &limits).ok()) return -1;
  // kAuto: as for a launch of more rows than SMs.
  TopkParams shape;
  shape.num_rows = std::numeric_limits<std::int64_t>::max();
  shape.num_cols = num_cols;
  shape.options.k = k;
  TopkHooks hooks;
  hooks.engine = engine;
  TopkPlan plan;
  Instance inst{};
  if (!make_plan(shape, limits, hooks, &plan).ok() ||
      !prepare_for(k, plan, shape.num_rows, num_cols, device, limits, &inst).ok()) {
    return -1;
  }
  int ctas = 0;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, inst.kernel, plan.threads,
                                                                        inst.smem_bytes);
  return err == cudaSuccess ? ctas : -1;
}

}  // namespace dsa::selection::topk
