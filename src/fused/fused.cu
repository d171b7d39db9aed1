// The fused indexer top-k's launcher (fused.h): walks make_plan's stages
// (plan.h) on the caller's stream.
#include "fused/fused.h"

#include <cuda_runtime.h>

#include <string>

#include "common/cuda_status.h"
#include "common/keys.h"
#include "common/launch_cache.h"
#include "common/workspace.h"
#include "fused/plan.h"
#include "fused/select_kernel.cuh"
#include "fused/sinks.cuh"
#include "fused/threshold_kernel.cuh"
#include "scoring/launch.cuh"
#include "selection/topk/topk.h"

namespace dsa::fused {
namespace {

Status cuda_error(cudaError_t err, const char* what) { return cuda_status(err, std::string("indexer_topk: ") + what); }

// Whether the kernel launched last (`what`) was accepted.
Status last_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, what);
}

// Rows scored into the workspace's bounded buffer, batch by batch, and
// finished by the standalone top-k: the repair of the rows whose `flags`
// entry is set (the others get empty ranges and their CTAs exit at once),
// or with flags null every row (the unfused route). Exact by construction.
Status run_score_and_select(const IndexerTopkParams& p, const ScoreAndSelectStage& stage, float* scores,
                            const std::uint32_t* flags, CUstream_st* stream) {
  const int K = p.options.k;
  for (std::int64_t b = 0; b < stage.batches.count(); ++b) {
    const Batch batch = stage.batches[b];
    const std::int64_t first = batch.first;
    const std::uint32_t* mask = flags != nullptr ? flags + first : nullptr;
    IndexerInputs in = p;
    in.q = p.q + first * p.num_heads * kHeadDim;
    in.w = p.w + first * p.num_heads;
    in.ks = p.ks + first;
    in.ke = p.ke + first;
    in.num_queries = batch.size;
    Status st = scoring::launch_scoring(in, mask, scoring::StoreSink{scores, stage.score_stride}, stream);
    if (!st.ok()) return st;
    TopkParams tp;
    tp.scores = scores;
    tp.ks = in.ks;
    tp.ke = in.ke;
    tp.num_rows = batch.size;
    tp.num_cols = p.num_keys;
    tp.score_stride = stage.score_stride;
    tp.indices = p.indices + first * K;
    tp.values = p.values != nullptr ? p.values + first * K : nullptr;
    tp.options = p.options;
    selection::topk::TopkHooks th;
    th.row_mask = mask;
    // Right after this batch's scoring kernel (no other launch between):
    // its CTAs wait on the SMs the scoring leaves, not behind a launch.
    th.after_producer = scoring::scoring_launches(in);
    st = selection::topk::launch_topk(tp, stream, th);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// The unfused route's trace: every row kUnfused, no threshold or counts.
__global__ void mark_unfused_kernel(FusedRowTrace* trace, std::int64_t rows) {
  const std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (t < rows) trace[t] = FusedRowTrace{FusedPath::kUnfused, 0, 0, 0, 0};
}

Status run_unfused(const IndexerTopkParams& p, const FusedPlan& plan, void* workspace, const FusedHooks& hooks,
                   CUstream_st* stream) {
  if (hooks.trace != nullptr) {
    const LaunchGrid& g = plan.unfused_trace;
    mark_unfused_kernel<<<g.blocks, g.threads, g.smem_bytes, stream>>>(hooks.trace, p.num_queries);
    if (Status st = last_launch("trace kernel launch"); !st.ok()) return st;
  }
  return run_score_and_select(p, plan.score_and_select, workspace_piece<float>(workspace, plan.workspace.scores),
                              nullptr, stream);
}

// The control: stage 2's main loop with every score folded into a checksum.
Status run_math_only(const IndexerTopkParams& p, const FusedPlan& plan, void* workspace, const FusedHooks& hooks,
                     CUstream_st* stream) {
  std::uint32_t* checksum =
      hooks.checksum != nullptr ? hooks.checksum : workspace_piece<std::uint32_t>(workspace, plan.workspace.checksum);
  return scoring::launch_scoring(p, nullptr, scoring::ChecksumSink{checksum}, stream);
}

// Stage 1: samples, their scores, tau per row (and the counters zeroed).
Status run_sample_stage(const IndexerTopkParams& p, const FusedPlan& plan, void* workspace, const FusedHooks& hooks,
                        int device, CUstream_st* stream) {
  const SampleStage& stage = plan.sample;
  const SamplePlan& s = stage.samples;
  const FusedWorkspace& w = plan.workspace;
  auto* sample_keys = workspace_piece<std::uint8_t>(workspace, w.sample_keys);
  auto* sample_scale = workspace_piece<float>(workspace, w.sample_scale);
  auto* sample_ks = workspace_piece<std::int32_t>(workspace, w.sample_ks);
  auto* sample_ke = workspace_piece<std::int32_t>(workspace, w.sample_ke);
  auto* sample_scores = workspace_piece<float>(workspace, w.sample_scores);
  sample_prepare_kernel<<<stage.prepare.blocks, stage.prepare.threads, stage.prepare.smem_bytes, stream>>>(
      SamplePrepareArgs{p.k, p.k_scale, p.k_row_stride, p.ks, p.ke, p.num_queries, p.num_keys, s.step, s.offset,
                        s.count, sample_keys, sample_scale, sample_ks, sample_ke});
  if (Status st = last_launch("sample kernel launch"); !st.ok()) return st;
  if (s.count > 0) {
    IndexerInputs samples = p;
    samples.k = sample_keys;
    samples.k_scale = sample_scale;
    samples.k_row_stride = kHeadDim;
    samples.ks = sample_ks;
    samples.ke = sample_ke;
    samples.num_keys = s.count;
    const Status st = scoring::launch_scoring(samples, nullptr, scoring::StoreSink{sample_scores, s.count}, stream);
    if (!st.ok()) return st;
  }
  const ThresholdArgs args{p.ks,
                           p.ke,
                           sample_ks,
                           sample_ke,
                           sample_scores,
                           s.count,
                           p.num_queries,
                           p.num_keys,
                           p.options.k,
                           hooks.force_threshold,
                           hooks.forced_threshold_key,
                           workspace_piece<std::uint32_t>(workspace, w.tau),
                           workspace_piece<std::uint32_t>(workspace, w.count),
                           workspace_piece<std::uint32_t>(workspace, w.unstaged),
                           hooks.trace};
  const Status st = LaunchCache::get().allow_shared_memory(reinterpret_cast<const void*>(&threshold_kernel), device,
                                                           stage.threshold_smem_limit);
  if (!st.ok()) return st;
  const LaunchGrid& g = stage.threshold;
  threshold_kernel<<<g.blocks, g.threads, g.smem_bytes, stream>>>(args);
  return last_launch("threshold kernel launch");
}

// Stage 2: the fused filter, kHeads heads a query.
template <int kHeads>
Status run_filter_stage(const IndexerTopkParams& p, const FusedPlan& plan, void* workspace, CUstream_st* stream) {
  const FusedWorkspace& w = plan.workspace;
  const FilterSink<scoring::kTileCols / kHeads> sink{workspace_piece<std::uint32_t>(workspace, w.tau),
                                                        workspace_piece<std::uint32_t>(workspace, w.count),
                                                        workspace_piece<std::uint64_t>(workspace, w.candidates),
                                                        plan.filter.capacity,
                                                        workspace_piece<std::uint32_t>(workspace, w.unstaged),
                                                        plan.filter.tie_target,
                                                        p.num_queries};
  return scoring::launch_scoring<kHeads>(p, nullptr, sink, stream);
}

template <int K>
Status run_select_stage(const IndexerTopkParams& p, const FusedPlan& plan, void* workspace, const FusedHooks& hooks,
                        int device, CUstream_st* stream) {
  const FusedWorkspace& w = plan.workspace;
  const SelectArgs args{p.ks,
                        p.ke,
                        p.num_keys,
                        workspace_piece<std::uint32_t>(workspace, w.count),
                        workspace_piece<std::uint64_t>(workspace, w.candidates),
                        plan.filter.capacity,
                        workspace_piece<std::uint32_t>(workspace, w.unstaged),
                        p.indices,
                        p.values,
                        p.options.index_base == IndexBase::kRelative,
                        p.options.ties == TieBreak::kSmallestIndex,
                        p.options.sorted,
                        workspace_piece<std::uint32_t>(workspace, w.flags),
                        hooks.trace};
  // Stage 3: certificate, select, emit; failing rows flagged.
  return launch_select_kernel<K>(args, plan.select.blocks, plan.select.threads == wide_select_threads(K), device,
                                 stream, "indexer_topk");
}

// The select stage of one K, picked before anything is launched.
using SelectStageRunner = Status (*)(const IndexerTopkParams&, const FusedPlan&, void*, const FusedHooks&, int,
                                     CUstream_st*);
SelectStageRunner select_stage_for(int k) {
  switch (k) {
    case 512: return &run_select_stage<512>;
    case 1024: return &run_select_stage<1024>;
    case 2048: return &run_select_stage<2048>;
    default: return nullptr;
  }
}

Status run_fused(const IndexerTopkParams& p, const FusedPlan& plan, void* workspace, const FusedHooks& hooks,
                 SelectStageRunner run_select, int device, CUstream_st* stream) {
  Status st = run_sample_stage(p, plan, workspace, hooks, device, stream);
  if (!st.ok()) return st;
  st = p.num_heads == 64 ? run_filter_stage<64>(p, plan, workspace, stream)
                         : run_filter_stage<32>(p, plan, workspace, stream);
  if (!st.ok()) return st;
  st = run_select(p, plan, workspace, hooks, device, stream);
  if (!st.ok()) return st;
  // Stage 4: repair (the flagged rows only).
  return run_score_and_select(p, plan.score_and_select, workspace_piece<float>(workspace, plan.workspace.scores),
                              workspace_piece<std::uint32_t>(workspace, plan.workspace.flags), stream);
}

}  // namespace

Status launch_indexer_topk(const IndexerTopkParams& params, CUstream_st* stream, void* workspace,
                           std::size_t workspace_bytes, const FusedHooks& hooks) {
  if (params.num_queries == 0) return Status::Ok();
  int device = 0;
  DeviceLimits limits;
  if (const Status st = LaunchCache::get().current(&device, &limits); !st.ok()) return st;
  const FusedPlan plan = make_plan(params, limits, hooks);
  if (Status st = check_workspace("indexer_topk", workspace, workspace_bytes, plan.workspace.total); !st.ok()) {
    return st;
  }
  const SelectStageRunner run_select = select_stage_for(params.options.k);
  if (run_select == nullptr) {
    return {StatusCode::kInternal, "indexer_topk: K " + std::to_string(params.options.k) + " has no kernel"};
  }
  switch (plan.route) {
    case FusedRoute::kMathOnly: return run_math_only(params, plan, workspace, hooks, stream);
    case FusedRoute::kUnfused: return run_unfused(params, plan, workspace, hooks, stream);
    case FusedRoute::kFused: return run_fused(params, plan, workspace, hooks, run_select, device, stream);
  }
  return {StatusCode::kInternal, "indexer_topk: a route without a launcher"};
}

}  // namespace dsa::fused
