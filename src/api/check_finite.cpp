// options.check_finite: the host scans (CPU backend) and the one report both
// backends' findings go through.
#include "api/check_finite.h"

#include <cmath>
#include <cstring>
#include <string>

#include "api/status_macros.h"
#include "common/fp8.h"
#include "common/paged.h"
#include "reference/cpu_reference.h"

namespace dsa::finite {
namespace {

// ------------------------------------------------------------ host scans ---

// The first NaN byte of `rows` key rows of kHeadDim bytes, `stride` bytes
// apart: row * kHeadDim + byte.
First first_fp8_nan(const std::uint8_t* data, std::int64_t rows, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int d = 0; d < kHeadDim; ++d) {
      if (fp8_is_nan(data[r * stride + d])) return {r * kHeadDim + d};
    }
  }
  return {};
}

// The first non-finite data[i], i < n, skipping entries whose mask[i] is
// negative when `mask` is given.
First first_non_finite(const float* data, std::int64_t n, const std::int32_t* mask = nullptr) {
  for (std::int64_t i = 0; i < n; ++i) {
    if ((mask == nullptr || mask[i] >= 0) && !std::isfinite(data[i])) return {i, data[i]};
  }
  return {};
}

IndexerFindings find_on_host(const IndexerTopkParams& p) {
  return {first_fp8_nan(p.q, p.num_queries * p.num_heads, kHeadDim), first_fp8_nan(p.k, p.num_keys, p.k_row_stride),
          first_non_finite(p.k_scale, p.num_keys), first_non_finite(p.w, p.num_queries * p.num_heads)};
}

ScoresFindings find_on_host(const TopkParams& p) {
  for (std::int64_t t = 0; t < p.num_rows; ++t) {
    for (std::int64_t s = p.ks[t]; s < p.ke[t]; ++s) {
      const std::int64_t at = t * p.score_stride + s;
      if (!std::isfinite(p.scores[at])) return {{at, p.scores[at]}};
    }
  }
  return {};
}

PagedFindings find_on_host(const PagedIndexerTopkParams& p) {
  PagedFindings f;
  f.q = first_fp8_nan(p.q, p.num_rows() * p.num_heads, kHeadDim);
  f.w = first_non_finite(p.w, p.num_rows() * p.num_heads);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = reference::paged_request_length(p, b);
    for (std::int64_t pos = 0; pos < len; ++pos) {
      const std::int64_t slot = reference::paged_slot(p, b, pos);
      const std::uint8_t* key = p.kv_cache + paged_key_offset(p.block_size, slot);
      float scale;
      std::memcpy(&scale, p.kv_cache + paged_scale_offset(p.block_size, slot), sizeof(scale));
      f.key_byte = static_cast<int>(first_fp8_nan(key, 1, kHeadDim).index);
      if (f.key_byte >= 0 || !std::isfinite(scale)) {
        f.kv = {b * p.max_context() + pos, scale};
        f.slot = slot;
        return f;
      }
    }
  }
  return f;
}

MergeFindings find_on_host(const MergeTopkParams& p) {
  return {first_non_finite(p.values, p.num_parts * p.num_rows * p.part_k, p.indices)};
}

// ---------------------------------------------------------------- report ---

Status non_finite(const std::string& what) { return {StatusCode::kNonFiniteInput, what}; }

std::string str(std::int64_t v) { return std::to_string(v); }

// "<arg>[<at>] is <value>": `at` the element's position, "i" or "i, j, ...".
Status element(const std::string& arg, const std::string& at, float value) {
  return non_finite(arg + "[" + at + "] is " + std::to_string(value));
}

Status fp8_byte(const char* arg, const First& f) {
  return non_finite(std::string(arg) + ": byte " + str(f.index) + " is FP8 NaN");
}

Status report(const IndexerTopkParams& p, const IndexerFindings& f) {
  if (f.q.found()) return fp8_byte("q", f.q);
  if (f.k.found()) {
    return non_finite("k[" + str(f.k.index / kHeadDim) + ", " + str(f.k.index % kHeadDim) + "] is FP8 NaN");
  }
  if (f.k_scale.found()) return element("k_scale", str(f.k_scale.index), f.k_scale.value);
  if (f.w.found()) return element("w", str(f.w.index), f.w.value);
  return Status::Ok();
}

Status report(const TopkParams& p, const ScoresFindings& f) {
  if (!f.scores.found()) return Status::Ok();
  const std::int64_t t = f.scores.index / p.score_stride, s = f.scores.index % p.score_stride;
  return element("scores", str(t) + ", " + str(s), f.scores.value);
}

Status report(const PagedIndexerTopkParams& p, const PagedFindings& f) {
  if (f.q.found()) return fp8_byte("q", f.q);
  if (f.kv.found()) {
    const std::int64_t b = f.kv.index / p.max_context(), pos = f.kv.index % p.max_context();
    const std::string where = " of slot " + str(f.slot) + " (request " + str(b) + ", position " + str(pos) + ")";
    if (f.key_byte >= 0) return non_finite("kv_cache: key byte " + str(f.key_byte) + where + " is FP8 NaN");
    return non_finite("kv_cache: scale" + where + " is " + std::to_string(f.kv.value));
  }
  if (f.w.found()) return element("w", str(f.w.index), f.w.value);
  return Status::Ok();
}

Status report(const MergeTopkParams& p, const MergeFindings& f) {
  if (!f.values.found()) return Status::Ok();
  const std::int64_t e = f.values.index;
  return element("values", str(e / (p.num_rows * p.part_k)) + ", " + str(e / p.part_k % p.num_rows) + ", " +
                               str(e % p.part_k),
                 f.values.value);
}

template <class Findings, class Params>
Status check_on_backend(const Params& p, const ExecutionContext& ctx) {
  Findings f;
  if (ctx.backend == Backend::kCuda) {
    DSA_RETURN_IF_ERROR(find_on_device(p, ctx.stream, &f));
  } else {
    f = find_on_host(p);
  }
  return report(p, f);
}

}  // namespace

Status check(const IndexerTopkParams& p, const ExecutionContext& ctx) {
  return check_on_backend<IndexerFindings>(p, ctx);
}
Status check(const TopkParams& p, const ExecutionContext& ctx) { return check_on_backend<ScoresFindings>(p, ctx); }
Status check(const PagedIndexerTopkParams& p, const ExecutionContext& ctx) {
  return check_on_backend<PagedFindings>(p, ctx);
}
Status check(const MergeTopkParams& p, const ExecutionContext& ctx) { return check_on_backend<MergeFindings>(p, ctx); }

}  // namespace dsa::finite
