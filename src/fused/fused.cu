// The fused indexer top-k (fused.h): sample, threshold, fused filter, select
// and repair, all on the caller's stream.
#include "fused/fused.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "common/keys.h"
#include "common/cuda_status.h"
#include "common/launch_cache.h"
#include "common/workspace.h"
#include "fused/select_kernel.cuh"
#include "fused/sinks.cuh"
#include "fused/threshold_kernel.cuh"
#include "scoring/launch.cuh"
#include "selection/topk/topk.h"

namespace dsa::fused {
namespace {

// Rescoring buffer of the repair path and the staged route: rows are
// scored batch by batch into at most this many bytes (at least one row).
// Each batch pays a scoring tail and a partial last wave of the top-k:
// 512 MB measured 1.2-2.1 % faster than 256 MB at 4096 x 32K and 64K (one
// batch instead of two, two instead of four; docs/perf-log.md, F22, F27).
constexpr std::size_t kRepairBytes = std::size_t{512} << 20;
// staged_by_shape's "every row fits one batch" past kStagedMaxKeys keys
// is measured against this size, not the buffer's: the staged route
// measures faster for rows whose scores fit 256 MB (docs/perf-log.md, F18)
// and slower at 4096 x 256K (F20).
constexpr std::size_t kSingleBatchRouteBytes = std::size_t{256} << 20;

Status cuda_error(cudaError_t err, const char* what) { return cuda_status(err, std::string("indexer_topk: ") + what); }

// Floats per rescored row, and the rows `bytes` (one batch of the repair and
// staged buffer, by default) hold.
std::int64_t repair_stride(std::int64_t num_keys) { return std::max<std::int64_t>(4, (num_keys + 3) / 4 * 4); }
std::int64_t repair_batch_rows(std::int64_t num_keys, std::size_t bytes = kRepairBytes) {
  return std::max<std::int64_t>(
      1, static_cast<std::int64_t>(bytes / (static_cast<std::size_t>(repair_stride(num_keys)) * sizeof(float))));
}

// Every step-th key, starting at offset, is a sample: about N/32 of them
// (at most kMaxSamples, at least min(N, kMinSamples)), so sampling costs
// ~3 % of the work; e = S*K/N samples fall in a full row's top K (64 at K =
// 2048), which keeps the candidate count near K (1 + guard / sqrt(e)).
struct SamplePlan {
  std::int64_t step = 1, offset = 0, count = 0;
};
SamplePlan sample_plan(std::int64_t num_keys) {
  SamplePlan plan;
  if (num_keys <= 0) return plan;
  const std::int64_t target =
      std::clamp<std::int64_t>(num_keys / 32, std::min<std::int64_t>(num_keys, kMinSamples), kMaxSamples);
  plan.step = (num_keys + target - 1) / target;
  plan.offset = plan.step / 2;
  plan.count = (num_keys - plan.offset + plan.step - 1) / plan.step;
  return plan;
}

// Whether a launch with these hooks takes the fused stages (else the staged
// route, or the math-only control, which needs only the checksum word).
bool fused_route(const IndexerTopkParams& p, const FusedHooks& hooks) {
  if (hooks.mode == FusedMode::kMathOnly) return false;
  using Route = FusedHooks::Route;
  return hooks.route == Route::kFused ||
         (hooks.route == Route::kByShape && (hooks.force_threshold || !staged_by_shape(p.num_queries, p.num_keys)));
}

// Workspace pieces, each 256-byte aligned. The staged route and the
// math-only control use only the buffer and the checksum word: the samples,
// per-row counters and candidates (half of a 4096 x 8K call's workspace)
// take no bytes when the call does not take the fused stages.
struct Layout {
  SamplePlan plan;
  std::int64_t capacity = 0;      // candidates per row
  std::int64_t repair_rows = 0;   // rows per repair batch
  std::int64_t repair_stride = 0; // floats per rescored row
  std::size_t sample_keys = 0, sample_scale = 0, sample_ks = 0, sample_ke = 0, sample_scores = 0, tau = 0,
              count = 0, unstaged = 0, flags = 0, candidates = 0, repair = 0, checksum = 0, total = 0;
};

Layout layout(const IndexerTopkParams& p, bool fused_stages) {
  Layout l;
  // Rows of the fused stages' per-row pieces (0 when they are not taken).
  const auto T = fused_stages ? static_cast<std::size_t>(p.num_queries) : std::size_t{0};
  l.plan = sample_plan(fused_stages ? p.num_keys : 0);
  l.capacity = candidate_capacity(p.options.k);
  l.repair_stride = repair_stride(p.num_keys);
  l.repair_rows = std::min<std::int64_t>(repair_batch_rows(p.num_keys), std::max<std::int64_t>(p.num_queries, 1));
  const auto S = static_cast<std::size_t>(l.plan.count);
  WorkspaceLayout pieces;
  const auto take = [&](std::size_t bytes) { return pieces.take(bytes); };
  l.sample_keys = take(S * kHeadDim);
  l.sample_scale = take(S * sizeof(float));
  l.sample_ks = take(T * sizeof(std::int32_t));
  l.sample_ke = take(T * sizeof(std::int32_t));
  l.sample_scores = take(T * S * sizeof(float));
  l.tau = take(T * sizeof(std::uint32_t));
  l.count = take(T * sizeof(std::uint32_t));
  l.unstaged = take(T * sizeof(std::uint32_t));
  l.flags = take(T * sizeof(std::uint32_t));
  l.candidates = take(T * static_cast<std::size_t>(l.capacity) * sizeof(std::uint64_t));
  l.repair = take(static_cast<std::size_t>(l.repair_rows * l.repair_stride) * sizeof(float));
  l.checksum = take(sizeof(std::uint32_t));
  l.total = pieces.total();
  return l;
}


// Rows scored into the workspace's bounded buffer, batch by batch, and
// finished by the standalone top-k: the repair of the rows whose `flags`
// entry is set (the others get empty ranges and their CTAs exit at once),
// or with flags null every row (the staged route). Exact by construction.
// `batch_rows` (FusedHooks::staged_batch_rows, tests) caps a batch's rows
// below what the buffer holds.
Status score_and_select(const IndexerTopkParams& p, const Layout& l, void* workspace, const std::uint32_t* flags,
                        std::int64_t batch_rows, CUstream_st* stream) {
  const int K = p.options.k;
  auto* scores = workspace_piece<float>(workspace, l.repair);
  batch_rows = batch_rows > 0 ? std::min(batch_rows, l.repair_rows) : l.repair_rows;
  for (std::int64_t first = 0; first < p.num_queries; first += batch_rows) {
    const std::int64_t rows = std::min(batch_rows, p.num_queries - first);
    const std::uint32_t* mask = flags != nullptr ? flags + first : nullptr;
    IndexerInputs in = p;
    in.q = p.q + first * p.num_heads * kHeadDim;
    in.w = p.w + first * p.num_heads;
    in.ks = p.ks + first;
    in.ke = p.ke + first;
    in.num_queries = rows;
    Status st = scoring::launch_scoring(in, mask, scoring::StoreSink{scores, l.repair_stride}, stream);
    if (!st.ok()) return st;
    TopkParams tp;
    tp.scores = scores;
    tp.ks = in.ks;
    tp.ke = in.ke;
    tp.num_rows = rows;
    tp.num_cols = p.num_keys;
    tp.score_stride = l.repair_stride;
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

// The staged route's trace: every row kStaged, no threshold or counts.
__global__ void mark_staged_kernel(FusedRowTrace* trace, std::int64_t rows) {
  const std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (t < rows) trace[t] = FusedRowTrace{FusedPath::kStaged, 0, 0, 0, 0};
}

template <int K>
Status launch(const IndexerTopkParams& p, CUstream_st* stream, void* workspace, const FusedHooks& hooks) {
  const bool fused_stages = fused_route(p, hooks);
  const Layout l = layout(p, fused_stages);
  auto* tau = workspace_piece<std::uint32_t>(workspace, l.tau);
  auto* count = workspace_piece<std::uint32_t>(workspace, l.count);
  auto* unstaged = workspace_piece<std::uint32_t>(workspace, l.unstaged);
  auto* flags = workspace_piece<std::uint32_t>(workspace, l.flags);
  auto* candidates = workspace_piece<std::uint64_t>(workspace, l.candidates);
  const int kQueries = scoring::kTileCols / p.num_heads;

  if (hooks.mode == FusedMode::kMathOnly) {
    // The control: stage 2's main loop with every score folded into a checksum.
    std::uint32_t* checksum = hooks.checksum != nullptr ? hooks.checksum : workspace_piece<std::uint32_t>(workspace, l.checksum);
    return scoring::launch_scoring(p, nullptr, ChecksumSink{checksum}, stream);
  }

  if (!fused_stages) {  // the staged route (the math-only control returned above)
    if (hooks.trace != nullptr) {
      mark_staged_kernel<<<static_cast<unsigned>((p.num_queries + 255) / 256), 256, 0, stream>>>(hooks.trace,
                                                                                                p.num_queries);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return cuda_error(err, "trace kernel launch");
    }
    return score_and_select(p, l, workspace, nullptr, hooks.staged_batch_rows, stream);
  }

  // The device and its limits, for the stages' launch set-up (LaunchCache).
  int device = 0;
  DeviceLimits limits;
  if (const Status st = LaunchCache::get().current(&device, &limits); !st.ok()) return st;

  // Stage 1: samples, their scores, tau per row (and the counters zeroed).
  auto* sample_keys = workspace_piece<std::uint8_t>(workspace, l.sample_keys);
  auto* sample_scale = workspace_piece<float>(workspace, l.sample_scale);
  auto* sample_ks = workspace_piece<std::int32_t>(workspace, l.sample_ks);
  auto* sample_ke = workspace_piece<std::int32_t>(workspace, l.sample_ke);
  auto* sample_scores = workspace_piece<float>(workspace, l.sample_scores);
  {
    const std::int64_t items = std::max(l.plan.count, p.num_queries);
    const int blocks = static_cast<int>(std::min<std::int64_t>((items + 255) / 256, 65535));
    sample_prepare_kernel<<<blocks, 256, 0, stream>>>(SamplePrepareArgs{
        p.k, p.k_scale, p.k_row_stride, p.ks, p.ke, p.num_queries, p.num_keys, l.plan.step, l.plan.offset,
        l.plan.count, sample_keys, sample_scale, sample_ks, sample_ke});
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cuda_error(err, "sample kernel launch");
  }
  if (l.plan.count > 0) {
    IndexerInputs samples = p;
    samples.k = sample_keys;
    samples.k_scale = sample_scale;
    samples.k_row_stride = kHeadDim;
    samples.ks = sample_ks;
    samples.ke = sample_ke;
    samples.num_keys = l.plan.count;
    const Status st = scoring::launch_scoring(samples, nullptr, scoring::StoreSink{sample_scores, l.plan.count}, stream);
    if (!st.ok()) return st;
  }
  {
    const ThresholdArgs args{p.ks,          p.ke,          sample_ks,  sample_ke,
                             sample_scores, l.plan.count,  p.num_queries, p.num_keys,
                             K,             hooks.force_threshold, hooks.forced_threshold_key, tau,
                             count,         unstaged,      hooks.trace};
    const int smem = static_cast<int>(std::max<std::int64_t>(l.plan.count, 1) * sizeof(std::uint32_t));
    // The attribute allows the most samples any call has, set once per device.
    const Status st = LaunchCache::get().allow_shared_memory(reinterpret_cast<const void*>(&threshold_kernel), device,
                                                             static_cast<int>(kMaxSamples * sizeof(std::uint32_t)));
    if (!st.ok()) return st;
    threshold_kernel<<<static_cast<unsigned>(p.num_queries), kThresholdThreads, smem, stream>>>(args);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cuda_error(err, "threshold kernel launch");
  }

  // Stage 2: the fused filter.
  {
    Status st;
    const auto capacity = static_cast<std::uint32_t>(l.capacity);
    // Ties a flooded row stages: K plus a quarter for lanes that see fewer
    // ties than their share; an all-tie row's entries stay well below the
    // capacity (4 K) unless about 2.7 K scores are above tau as well.
    const auto tie_target = static_cast<std::uint32_t>(K + K / 4);
    if (kQueries == 4) {
      st = scoring::launch_scoring<64>(p, nullptr, CandidateSink<4>{tau, count, candidates, capacity, unstaged, tie_target, p.num_queries},
                                       stream);
    } else {
      st = scoring::launch_scoring<32>(p, nullptr, CandidateSink<8>{tau, count, candidates, capacity, unstaged, tie_target, p.num_queries},
                                       stream);
    }
    if (!st.ok()) return st;
  }

  // Stage 3: certificate, select, emit; failing rows flagged.
  {
    const SelectArgs args{p.ks,
                          p.ke,
                          p.num_keys,
                          count,
                          candidates,
                          static_cast<std::uint32_t>(l.capacity),
                          unstaged,
                          p.indices,
                          p.values,
                          p.options.index_base == IndexBase::kRelative,
                          p.options.ties == TieBreak::kSmallestIndex,
                          p.options.sorted,
                          flags,
                          hooks.trace};
    const auto launch_select = [&](auto threads) -> Status {
      constexpr int kThreads = decltype(threads)::value;
      constexpr int kSmem = static_cast<int>(sizeof(typename SelectConfig<K, kThreads>::SharedStorage));
      auto kernel = select_kernel<K, kThreads>;
      const Status set = LaunchCache::get().allow_shared_memory(reinterpret_cast<const void*>(kernel), device, kSmem);
      if (!set.ok()) return set;
      kernel<<<static_cast<unsigned>(p.num_queries), kThreads, kSmem, stream>>>(args);
      const cudaError_t e = cudaGetLastError();
      return e == cudaSuccess ? Status::Ok() : cuda_error(e, "select kernel launch");
    };
    // Fewer rows than two per SM: wide blocks (one row's latency is the stage).
    const bool wide = hooks.select_width == FusedHooks::SelectWidth::kByRows
                          ? p.num_queries <= 2 * static_cast<std::int64_t>(limits.sm_count)
                          : hooks.select_width == FusedHooks::SelectWidth::kWide;
    const Status launched = wide ? launch_select(std::integral_constant<int, kSelectThreadsWide<K>>{})
                                 : launch_select(std::integral_constant<int, kSelectThreads>{});
    if (!launched.ok()) return launched;
  }

  // Stage 4: repair (the flagged rows only).
  return score_and_select(p, l, workspace, flags, 0, stream);
}

}  // namespace

bool staged_by_shape(std::int64_t num_queries, std::int64_t num_keys) {
  return num_keys <= kStagedMaxKeys || num_queries <= repair_batch_rows(num_keys, kSingleBatchRouteBytes);
}

std::size_t workspace_size(const IndexerTopkParams& params, const FusedHooks& hooks) {
  if (params.num_queries == 0) return 0;
  return layout(params, fused_route(params, hooks)).total;
}

Status launch_indexer_topk(const IndexerTopkParams& params, CUstream_st* stream, void* workspace,
                           std::size_t workspace_bytes, const FusedHooks& hooks) {
  if (params.num_queries == 0) return Status::Ok();
  if (Status st = check_workspace("indexer_topk", workspace, workspace_bytes, workspace_size(params, hooks));
      !st.ok()) {
    return st;
  }
  switch (params.options.k) {
    case 512: return launch<512>(params, stream, workspace, hooks);
    case 1024: return launch<1024>(params, stream, workspace, hooks);
    case 2048: return launch<2048>(params, stream, workspace, hooks);
    default: return {StatusCode::kInternal, "indexer_topk: K " + std::to_string(params.options.k) + " has no kernel"};
  }
}

}  // namespace dsa::fused
