// Argument validation (contract section 3). Each rule returns the first
// violation as "<argument>: <rule> (<values>)"; the operators call validate()
// before touching any output, so a rejected call writes nothing.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "api/cuda_runtime.h"
#include "api/status_macros.h"
#include "api/validate.h"
#include "dsa_topk/dsa_topk.h"

namespace dsa {
namespace {

constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();

Status invalid(const std::string& arg, const std::string& rule) {
  return {StatusCode::kInvalidArgument, arg + ": " + rule};
}

Status check_k(const SelectOptions& options) {
  for (int k : kSupportedK) {
    if (options.k == k) return Status::Ok();
  }
  return invalid("options.k", "must be one of 512, 1024, 2048 (got " + std::to_string(options.k) + ")");
}

Status check_count(const char* arg, std::int64_t value, std::int64_t max) {
  if (value < 0 || value > max) {
    return invalid(arg, "must be in [0, " + std::to_string(max) + "] (got " + std::to_string(value) + ")");
  }
  return Status::Ok();
}

// A tensor's pointer: non-null when the tensor has elements, aligned, and in
// the memory the backend reads.
Status check_pointer(const char* arg, const void* ptr, bool non_empty, std::size_t alignment,
                     Backend backend) {
  if (ptr == nullptr) {
    return non_empty ? invalid(arg, "must not be null") : Status::Ok();
  }
  if (reinterpret_cast<std::uintptr_t>(ptr) % alignment != 0) {
    return invalid(arg, "must be " + std::to_string(alignment) + "-byte aligned");
  }
  const detail::MemoryKind kind = detail::memory_kind(ptr);
  if (backend == Backend::kCpu && kind == detail::MemoryKind::kDevice) {
    return invalid(arg, "is device memory; the CPU backend needs host memory");
  }
  if (backend == Backend::kCuda && kind == detail::MemoryKind::kHost) {
    return invalid(arg, "is host memory; the CUDA backend needs device memory");
  }
  return Status::Ok();
}

// `*data` as host-readable memory: device arrays are copied into `*copy`.
Status readable_on_host(const std::int32_t*& data, std::int64_t rows, Backend backend, CUstream_st* stream,
                        std::vector<std::int32_t>* copy) {
  if (backend != Backend::kCuda || detail::memory_kind(data) != detail::MemoryKind::kDevice) {
    return Status::Ok();
  }
  copy->resize(static_cast<std::size_t>(rows));
  DSA_RETURN_IF_ERROR(detail::copy_to_host(copy->data(), data, copy->size() * sizeof(std::int32_t), stream));
  data = copy->data();
  return Status::Ok();
}

// Per-row ranges 0 <= ks[t] <= ke[t] <= n. On the CUDA backend the ranges live
// in device memory and are copied to the host for this check.
Status check_ranges(const std::int32_t* ks, const std::int32_t* ke, std::int64_t rows, std::int64_t n,
                    const char* n_name, Backend backend, const RangeCheck& ranges) {
  if (rows == 0 || (backend == Backend::kCuda && !ranges.enabled)) return Status::Ok();
  std::vector<std::int32_t> host_ks, host_ke;
  DSA_RETURN_IF_ERROR(readable_on_host(ks, rows, backend, ranges.stream, &host_ks));
  DSA_RETURN_IF_ERROR(readable_on_host(ke, rows, backend, ranges.stream, &host_ke));
  for (std::int64_t t = 0; t < rows; ++t) {
    const std::string row = "[" + std::to_string(t) + "]";
    const std::string values = " (ks=" + std::to_string(ks[t]) + ", ke=" + std::to_string(ke[t]) + ")";
    if (ks[t] < 0) return invalid("ks" + row, "must be >= 0" + values);
    if (ks[t] > ke[t]) return invalid("ks" + row, "must be <= ke" + row + values);
    if (ke[t] > n) {
      return invalid("ke" + row, std::string("must be <= ") + n_name + " = " + std::to_string(n) + values);
    }
  }
  return Status::Ok();
}

Status check_supported_heads(int heads) {
  for (int h : kSupportedHeads) {
    if (heads == h) return Status::Ok();
  }
  return invalid("num_heads", "must be 32 or 64 (got " + std::to_string(heads) + ")");
}

// The rules every indexer operator shares (contract section 3).
Status validate_inputs(const IndexerInputs& p, Backend backend) {
  DSA_RETURN_IF_ERROR(check_count("num_queries", p.num_queries, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_count("num_keys", p.num_keys, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_supported_heads(p.num_heads));
  if (p.head_dim != kHeadDim) {
    return invalid("head_dim", "must be 128 (got " + std::to_string(p.head_dim) + ")");
  }
  if (p.k_row_stride < p.head_dim || p.k_row_stride % 16 != 0) {
    return invalid("k_row_stride", "must be >= head_dim and a multiple of 16 bytes (got " +
                                       std::to_string(p.k_row_stride) + ")");
  }
  const bool rows = p.num_queries > 0, keys = p.num_keys > 0;
  DSA_RETURN_IF_ERROR(check_pointer("q", p.q, rows, 16, backend));
  DSA_RETURN_IF_ERROR(check_pointer("k", p.k, keys, 16, backend));
  DSA_RETURN_IF_ERROR(check_pointer("k_scale", p.k_scale, keys, 16, backend));
  DSA_RETURN_IF_ERROR(check_pointer("w", p.w, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("ks", p.ks, rows, 4, backend));
  return check_pointer("ke", p.ke, rows, 4, backend);
}

}  // namespace

Status validate(const IndexerTopkParams& p, Backend backend, const RangeCheck& ranges) {
  DSA_RETURN_IF_ERROR(validate_inputs(p, backend));
  DSA_RETURN_IF_ERROR(check_k(p.options));
  const bool rows = p.num_queries > 0;
  DSA_RETURN_IF_ERROR(check_pointer("indices", p.indices, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("values", p.values, false, 4, backend));
  return check_ranges(p.ks, p.ke, p.num_queries, p.num_keys, "num_keys", backend, ranges);
}

Status validate(const IndexerScoresParams& p, Backend backend, const RangeCheck& ranges) {
  DSA_RETURN_IF_ERROR(validate_inputs(p, backend));
  if (p.score_stride < p.num_keys) {
    return invalid("score_stride", "must be >= num_keys (got " + std::to_string(p.score_stride) + " < " +
                                       std::to_string(p.num_keys) + ")");
  }
  if (p.num_queries > 0 && p.score_stride > std::numeric_limits<std::int64_t>::max() / 4 / p.num_queries) {
    return invalid("score_stride", "num_queries * score_stride * 4 bytes overflows int64");
  }
  DSA_RETURN_IF_ERROR(check_pointer("scores", p.scores, p.num_queries > 0 && p.num_keys > 0, 4, backend));
  return check_ranges(p.ks, p.ke, p.num_queries, p.num_keys, "num_keys", backend, ranges);
}

Status validate(const TopkParams& p, Backend backend, const RangeCheck& ranges) {
  DSA_RETURN_IF_ERROR(check_count("num_rows", p.num_rows, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_count("num_cols", p.num_cols, kMaxIndex));
  if (p.score_stride < p.num_cols) {
    return invalid("score_stride", "must be >= num_cols (got " + std::to_string(p.score_stride) +
                                       " < " + std::to_string(p.num_cols) + ")");
  }
  if (p.num_rows > 0 && p.score_stride > std::numeric_limits<std::int64_t>::max() / 4 / p.num_rows) {
    return invalid("score_stride", "num_rows * score_stride * 4 bytes overflows int64");
  }
  DSA_RETURN_IF_ERROR(check_k(p.options));
  const bool rows = p.num_rows > 0;
  DSA_RETURN_IF_ERROR(check_pointer("scores", p.scores, rows && p.num_cols > 0, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("ks", p.ks, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("ke", p.ke, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("indices", p.indices, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("values", p.values, false, 4, backend));
  return check_ranges(p.ks, p.ke, p.num_rows, p.num_cols, "num_cols", backend, ranges);
}

Status validate(const IndexerTopkParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }
Status validate(const IndexerScoresParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }
Status validate(const TopkParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }

}  // namespace dsa
