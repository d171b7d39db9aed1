// The public operators: validate, then run on exactly the backend the caller
// named. There is no fallback between backends.
#include <cmath>
#include <cstring>
#include <string>

#include "api/cuda_runtime.h"
#include "api/status_macros.h"
#include "api/validate.h"
#include "dsa_topk/dsa_topk.h"
#include "fused/fused.h"
#include "reference/cpu_reference.h"
#include "scoring/scoring.h"
#include "selection/topk/topk.h"

namespace dsa {
namespace {

bool fp8_is_nan(std::uint8_t byte) { return (byte & 0x7F) == 0x7F; }

Status non_finite(const std::string& what) { return {StatusCode::kNonFiniteInput, what}; }

Status check_finite_floats(const char* arg, const float* data, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) {
      return non_finite(std::string(arg) + "[" + std::to_string(i) + "] is " + std::to_string(data[i]));
    }
  }
  return Status::Ok();
}

// options.check_finite on host inputs: FP8 NaN bytes in q/k, NaN/Inf in
// k_scale/w. (FP8 e4m3fn has no infinities.)
Status check_finite_indexer(const IndexerTopkParams& p) {
  const std::int64_t q_bytes = p.num_queries * p.num_heads * p.head_dim;
  for (std::int64_t i = 0; i < q_bytes; ++i) {
    if (fp8_is_nan(p.q[i])) return non_finite("q: byte " + std::to_string(i) + " is FP8 NaN");
  }
  for (std::int64_t s = 0; s < p.num_keys; ++s) {
    for (int d = 0; d < p.head_dim; ++d) {
      if (fp8_is_nan(p.k[s * p.k_row_stride + d])) {
        return non_finite("k[" + std::to_string(s) + ", " + std::to_string(d) + "] is FP8 NaN");
      }
    }
  }
  DSA_RETURN_IF_ERROR(check_finite_floats("k_scale", p.k_scale, p.num_keys));
  return check_finite_floats("w", p.w, p.num_queries * p.num_heads);
}

Status check_finite_scores(const TopkParams& p) {
  for (std::int64_t t = 0; t < p.num_rows; ++t) {
    for (std::int32_t s = p.ks[t]; s < p.ke[t]; ++s) {
      const float v = p.scores[t * p.score_stride + s];
      if (!std::isfinite(v)) {
        return non_finite("scores[" + std::to_string(t) + ", " + std::to_string(s) + "] is " +
                          std::to_string(v));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status indexer_topk_workspace_size(const IndexerTopkParams& params, Backend backend,
                                   std::size_t* bytes) {
  if (bytes == nullptr) return {StatusCode::kInvalidArgument, "bytes: must not be null"};
  *bytes = 0;  // the CPU backend keeps its scratch on the host
  if (backend == Backend::kCuda) {
    // Validated without the per-row range rules (no device read): the size
    // depends on shapes and K only.
    DSA_RETURN_IF_ERROR(validate(params, backend, RangeCheck{false, nullptr}));
    *bytes = fused::workspace_size(params);
  }
  return Status::Ok();
}

Status topk_workspace_size(const TopkParams& params, Backend backend, std::size_t* bytes) {
  if (bytes == nullptr) return {StatusCode::kInvalidArgument, "bytes: must not be null"};
  *bytes = 0;  // both backends: the CUDA kernel keeps all its scratch in shared memory
  return Status::Ok();
}

Status indexer_topk(const IndexerTopkParams& params, const ExecutionContext& ctx) {
  DSA_RETURN_IF_ERROR(validate(params, ctx.backend, RangeCheck{ctx.check_ranges, ctx.stream}));
  if (ctx.backend == Backend::kCuda) {
    if (params.options.check_finite) {
      return {StatusCode::kUnsupported, "options.check_finite: not available on the CUDA backend yet"};
    }
    return fused::launch_indexer_topk(params, ctx.stream, ctx.workspace, ctx.workspace_bytes);
  }
  if (params.options.check_finite) DSA_RETURN_IF_ERROR(check_finite_indexer(params));
  return reference::indexer_topk_cpu(params, ctx.num_threads);
}

Status topk(const TopkParams& params, const ExecutionContext& ctx) {
  DSA_RETURN_IF_ERROR(validate(params, ctx.backend, RangeCheck{ctx.check_ranges, ctx.stream}));
  if (ctx.backend == Backend::kCuda) {
    if (params.options.check_finite) {
      return {StatusCode::kUnsupported, "options.check_finite: not available on the CUDA backend yet"};
    }
    return selection::topk::launch_topk(params, ctx.stream);
  }
  if (params.options.check_finite) DSA_RETURN_IF_ERROR(check_finite_scores(params));
  return reference::topk_cpu(params, ctx.num_threads);
}

Status indexer_scores(const IndexerScoresParams& params, const ExecutionContext& ctx) {
  DSA_RETURN_IF_ERROR(validate(params, ctx.backend, RangeCheck{ctx.check_ranges, ctx.stream}));
  if (ctx.backend == Backend::kCuda) return scoring::launch_indexer_scores(params, ctx.stream);
  return reference::indexer_scores_cpu(params, ctx.num_threads);
}

bool cuda_backend_available(Operator op, std::string* why) {
  (void)op;  // every operator has a CUDA kernel
  return detail::cuda_device_present(why);
}

}  // namespace dsa
