// The public operators: validate, then run on exactly the backend the caller
// named. There is no fallback between backends.
#include <cmath>
#include <cstring>
#include <string>

#include "api/cuda_runtime.h"
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

Status check_finite_fp8(const char* arg, const std::uint8_t* data, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (fp8_is_nan(data[i])) return non_finite(std::string(arg) + ": byte " + std::to_string(i) + " is FP8 NaN");
  }
  return Status::Ok();
}

// options.check_finite on host inputs: FP8 NaN bytes in q/k, NaN/Inf in
// k_scale/w. (FP8 e4m3fn has no infinities.)
Status check_finite_indexer(const IndexerTopkParams& p) {
  DSA_RETURN_IF_ERROR(check_finite_fp8("q", p.q, p.num_queries * p.num_heads * p.head_dim));
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

// The same for the paged operator: q, w, and the key bytes and scale of every
// position a row reads (cache slots no row reads may hold anything).
Status check_finite_paged(const PagedIndexerTopkParams& p) {
  DSA_RETURN_IF_ERROR(check_finite_fp8("q", p.q, p.num_rows() * p.num_heads * p.head_dim));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = reference::paged_request_length(p, b);
    for (std::int64_t pos = 0; pos < len; ++pos) {
      const std::int64_t slot = reference::paged_slot(p, b, pos);
      const std::string where = " of slot " + std::to_string(slot) + " (request " + std::to_string(b) +
                                ", position " + std::to_string(pos) + ")";
      const std::uint8_t* key = p.kv_cache + reference::paged_key_offset(p.block_size, slot);
      for (int d = 0; d < p.head_dim; ++d) {
        if (fp8_is_nan(key[d])) return non_finite("kv_cache: key byte " + std::to_string(d) + where + " is FP8 NaN");
      }
      float scale;
      std::memcpy(&scale, p.kv_cache + reference::paged_scale_offset(p.block_size, slot), sizeof(scale));
      if (!std::isfinite(scale)) return non_finite("kv_cache: scale" + where + " is " + std::to_string(scale));
    }
  }
  return check_finite_floats("w", p.w, p.num_rows() * p.num_heads);
}

// The same for merge_topk: the values of the non-empty entries.
Status check_finite_merge(const MergeTopkParams& p) {
  const std::int64_t entries = p.num_parts * p.num_rows * p.part_k;
  for (std::int64_t e = 0; e < entries; ++e) {
    if (p.indices[e] >= 0 && !std::isfinite(p.values[e])) {
      return non_finite("values[" + std::to_string(e / (p.num_rows * p.part_k)) + ", " +
                        std::to_string(e / p.part_k % p.num_rows) + ", " + std::to_string(e % p.part_k) + "] is " +
                        std::to_string(p.values[e]));
    }
  }
  return Status::Ok();
}

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

// A selecting operator: validate (range rules as the context asks), then the
// CUDA launch, or on the CPU the optional input check and the reference.
template <class Params, class Launch, class CheckFinite, class Reference>
Status run_selection(const Params& params, const ExecutionContext& ctx, Launch launch, CheckFinite check_finite,
                     Reference reference) {
  DSA_RETURN_IF_ERROR(validate(params, ctx.backend, RangeCheck{ctx.check_ranges, ctx.stream}));
  if (ctx.backend == Backend::kCuda) {
    if (params.options.check_finite) {
      return {StatusCode::kUnsupported, "options.check_finite: not available on the CUDA backend yet"};
    }
    return launch();
  }
  if (params.options.check_finite) DSA_RETURN_IF_ERROR(check_finite(params));
  return reference(params, ctx.num_threads);
}

}  // namespace

Status indexer_topk_workspace_size(const IndexerTopkParams& params, Backend backend,
                                   std::size_t* bytes) {
  return query_workspace(params, backend, bytes, [](const IndexerTopkParams& p) { return fused::workspace_size(p); });
}

Status indexer_topk_paged_workspace_size(const PagedIndexerTopkParams& params, Backend backend,
                                         std::size_t* bytes) {
  return query_workspace(params, backend, bytes, decode::paged_workspace_size);
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
      check_finite_indexer, reference::indexer_topk_cpu);
}

Status topk(const TopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx, [&] { return selection::topk::launch_topk(params, ctx.stream); }, check_finite_scores,
      reference::topk_cpu);
}

Status indexer_topk_paged(const PagedIndexerTopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx,
      [&] { return decode::launch_indexer_topk_paged(params, ctx.stream, ctx.workspace, ctx.workspace_bytes); },
      check_finite_paged, reference::indexer_topk_paged_cpu);
}

Status merge_topk(const MergeTopkParams& params, const ExecutionContext& ctx) {
  return run_selection(
      params, ctx, [&] { return decode::launch_merge_topk(params, ctx.stream, ctx.workspace, ctx.workspace_bytes); },
      check_finite_merge, reference::merge_topk_cpu);
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
