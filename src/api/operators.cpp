// The public operators: validate, then run on exactly the backend the caller
// named. There is no fallback between backends.
#include <string>

#include "api/check_finite.h"
#include "api/cuda_queries.h"
#include "api/status_macros.h"
#include "api/validate.h"
#include "decode/decode.h"
#include "dsa_topk/dsa_topk.h"
#include "fused/fused.h"
#include "reference/cpu_reference.h"
#include "scoring/scoring.h"
#include "selection/topk/topk.h"

namespace dsa {
namespace {

// The workspace query of an operator whose CPU backend keeps its scratch on
// the host: on CUDA validated without the per-row range rules (no device
// read), since the size depends on shapes and K only.
template <class Params, class Size>
Status query_workspace(const Params& params, Backend backend, std::size_t* bytes, Size cuda_size) {
  if (bytes == nullptr) return {StatusCode::kInvalidArgument, "bytes: must not be null"};
  *bytes = 0;
  if (backend == Backend::kCuda) {
    DSA_RETURN_IF_ERROR(validate(params, backend, RangeCheck{false, nullptr}));
    *bytes = cuda_size(params);
  }
  return Status::Ok();
}

// A selecting operator: validate (range rules as the context asks), the
// optional input check on the backend's side, then the CUDA launch or the
// reference. Both checks come before any output is written.
template <class Params, class Launch, class Reference>
Status run_selection(const Params& params, const ExecutionContext& ctx, Launch launch, Reference reference) {
  DSA_RETURN_IF_ERROR(validate(params, ctx.backend, RangeCheck{ctx.check_ranges, ctx.stream}));
  if (params.options.check_finite) DSA_RETURN_IF_ERROR(finite::check(params, ctx));
  if (ctx.backend == Backend::kCuda) return launch();
  return reference(params, ctx.num_threads);
}

}  // namespace

Status indexer_topk_workspace_size(const IndexerTopkParams& params, Backend backend,
                                   std::size_t* bytes) {
  return query_workspace(params, backend, bytes, [](const IndexerTopkParams& p) { return fused::workspace_size(p); });
}

Status indexer_topk_paged_workspace_size(const PagedIndexerTopkParams& params, Backend backend,
                                         std::size_t* bytes) {
  return query_workspace(params, backend, bytes,
                         [](const PagedIndexerTopkParams& p) { return decode::paged_workspace_size(p); });
}

Status merge_topk_workspace_size(const MergeTopkParams& params, Backend backend, std::size_t* bytes) {
  return query_workspace(params, backend, bytes, decode::merge_workspace_size);
}

Status topk_workspace_size(const TopkParams& params, Backend backend, std::size_t* bytes) {
  if (bytes == nullptr) return {StatusCode::kInvalidArgument, "bytes: must not be null"};
  *bytes = 0;  // both backends: the CUDA kernel keeps all its scratch in shared memory
  return Status::Ok();
}

Status indexer_topk(const IndexerTopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx, [&] { return fused::launch_indexer_topk(params, ctx.stream, ctx.workspace, ctx.workspace_bytes); },
      reference::indexer_topk_cpu);
}

Status topk(const TopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx, [&] { return selection::topk::launch_topk(params, ctx.stream); }, reference::topk_cpu);
}

Status indexer_topk_paged(const PagedIndexerTopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx,
      [&] { return decode::launch_indexer_topk_paged(params, ctx.stream, ctx.workspace, ctx.workspace_bytes); },
      reference::indexer_topk_paged_cpu);
}

Status merge_topk(const MergeTopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx, [&] { return decode::launch_merge_topk(params, ctx.stream, ctx.workspace, ctx.workspace_bytes); },
      reference::merge_topk_cpu);
}

Status indexer_scores(const IndexerScoresParams& params, const ExecutionContext& ctx) {
  DSA_RETURN_IF_ERROR(validate(params, ctx.backend, RangeCheck{ctx.check_ranges, ctx.stream}));
  if (ctx.backend == Backend::kCuda) return scoring::launch_indexer_scores(params, ctx.stream);
  return reference::indexer_scores_cpu(params, ctx.num_threads);
}

bool cuda_backend_available(Operator op, std::string* why) {
  (void)op;  // every operator, the decode ones included, has a CUDA kernel
  return detail::cuda_device_present(why);
}

}  // namespace dsa
