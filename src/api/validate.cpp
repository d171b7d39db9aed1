// Argument validation (contract section 3). Each rule returns the first
// violation as "<argument>: <rule> (<values>)"; the operators call validate()
// before touching any output, so a rejected call writes nothing.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "api/cuda_queries.h"
#include "api/status_macros.h"
#include "api/validate.h"
#include "dsa_topk/dsa_topk.h"
#include "reference/cpu_reference.h"

namespace dsa {
namespace {

constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();

Status invalid(const std::string& arg, const std::string& rule) {
  return {StatusCode::kInvalidArgument, arg + ": " + rule};
}

// `value` must be one of `allowed`; `rule` lists them.
template <std::size_t N>
Status check_one_of(const char* arg, int value, const int (&allowed)[N], const char* rule) {
  for (int a : allowed) {
    if (value == a) return Status::Ok();
  }
  return invalid(arg, std::string(rule) + " (got " + std::to_string(value) + ")");
}

Status check_k(const SelectOptions& options) {
  return check_one_of("options.k", options.k, kSupportedK, "must be one of 512, 1024, 2048");
}

// Operators whose indices have no range start to subtract (`why`).
Status check_absolute_base(const SelectOptions& options, const char* why) {
  if (options.index_base == IndexBase::kAbsolute) return Status::Ok();
  return invalid("options.index_base", std::string("must be kAbsolute (") + why + ")");
}

// "a * b" for the messages of product rules.
std::string product(std::int64_t a, std::int64_t b) { return std::to_string(a) + " * " + std::to_string(b); }

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

// `*data` (`count` elements) as host-readable memory: device arrays are
// copied into `*copy`.
Status readable_on_host(const std::int32_t*& data, std::int64_t count, Backend backend, CUstream_st* stream,
                        std::vector<std::int32_t>* copy) {
  if (backend != Backend::kCuda || detail::memory_kind(data) != detail::MemoryKind::kDevice) {
    return Status::Ok();
  }
  copy->resize(static_cast<std::size_t>(count));
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
  return check_one_of("num_heads", heads, kSupportedHeads, "must be 32 or 64");
}

Status check_head_dim(int head_dim) {
  if (head_dim == kHeadDim) return Status::Ok();
  return invalid("head_dim", "must be 128 (got " + std::to_string(head_dim) + ")");
}

// The rules every indexer operator shares (contract section 3).
Status validate_inputs(const IndexerInputs& p, Backend backend) {
  DSA_RETURN_IF_ERROR(check_count("num_queries", p.num_queries, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_count("num_keys", p.num_keys, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_supported_heads(p.num_heads));
  DSA_RETURN_IF_ERROR(check_head_dim(p.head_dim));
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

Status validate_paged_shapes(const PagedIndexerTopkParams& p) {
  DSA_RETURN_IF_ERROR(check_count("batch", p.batch, kMaxIndex));
  if (p.next_n < 1 || p.next_n > kMaxNextN) {
    return invalid("next_n",
                   "must be in [1, " + std::to_string(kMaxNextN) + "] (got " + std::to_string(p.next_n) + ")");
  }
  if (p.num_rows() > kMaxIndex) {
    return invalid("batch", "batch * next_n must be <= 2147483647 (got " + product(p.batch, p.next_n) + ")");
  }
  DSA_RETURN_IF_ERROR(check_supported_heads(p.num_heads));
  DSA_RETURN_IF_ERROR(check_head_dim(p.head_dim));
  DSA_RETURN_IF_ERROR(
      check_one_of("block_size", p.block_size, kSupportedBlockSizes, "must be one of 16, 32, 64, 128"));
  DSA_RETURN_IF_ERROR(check_count("num_blocks", p.num_blocks, kMaxIndex));
  if (p.max_blocks_per_seq < 0) {
    return invalid("max_blocks_per_seq", "must be >= 0 (got " + std::to_string(p.max_blocks_per_seq) + ")");
  }
  if (p.max_blocks_per_seq > kMaxIndex / p.block_size) {  // max_context() <= INT32_MAX, without overflow
    return invalid("max_blocks_per_seq", "max_blocks_per_seq * block_size must be <= 2147483647 (got " +
                                             product(p.max_blocks_per_seq, p.block_size) + ")");
  }
  if (p.block_table_stride < p.max_blocks_per_seq) {
    return invalid("block_table_stride", "must be >= max_blocks_per_seq (got " + std::to_string(p.block_table_stride) +
                                             " < " + std::to_string(p.max_blocks_per_seq) + ")");
  }
  if (p.batch > 0 && p.block_table_stride > std::numeric_limits<std::int64_t>::max() / 4 / p.batch) {
    return invalid("block_table_stride", "batch * block_table_stride * 4 bytes overflows int64");
  }
  if (p.physical_slots && p.num_blocks > kMaxIndex / p.block_size) {
    return invalid("num_blocks", "num_blocks * block_size must be <= 2147483647 with physical_slots (the slots "
                                 "are int32) (got " + product(p.num_blocks, p.block_size) + ")");
  }
  DSA_RETURN_IF_ERROR(check_k(p.options));
  return check_absolute_base(p.options, "positions start at 0: the two bases agree");
}

// Every length 0 <= context_lens[...] <= max_context(), then every table
// entry a request's rows use in [0, num_blocks). On the CUDA backend both are
// read back from device memory.
Status check_paged_ranges(const PagedIndexerTopkParams& p, Backend backend, const RangeCheck& ranges) {
  if (p.batch == 0 || (backend == Backend::kCuda && !ranges.enabled)) return Status::Ok();
  PagedIndexerInputs host = p;
  std::vector<std::int32_t> host_lens, host_table;
  const std::int64_t lens = p.lens_per_token ? p.num_rows() : p.batch;
  DSA_RETURN_IF_ERROR(readable_on_host(host.context_lens, lens, backend, ranges.stream, &host_lens));
  for (std::int64_t i = 0; i < lens; ++i) {
    const std::int32_t len = host.context_lens[i];
    if (len >= 0 && len <= p.max_context()) continue;
    const std::string arg = "context_lens[" + (p.lens_per_token ? std::to_string(i / p.next_n) + ", " +
                                                                      std::to_string(i % p.next_n)
                                                                : std::to_string(i)) + "]";
    const std::string got = " (got " + std::to_string(len) + ")";
    if (len < 0) return invalid(arg, "must be >= 0" + got);
    return invalid(arg, "must be <= max_context() = max_blocks_per_seq * block_size = " +
                            std::to_string(p.max_context()) + got);
  }
  if (p.max_blocks_per_seq == 0) return Status::Ok();  // every length is 0: no entry is used
  const std::int64_t table = (p.batch - 1) * p.block_table_stride + p.max_blocks_per_seq;
  DSA_RETURN_IF_ERROR(readable_on_host(host.block_table, table, backend, ranges.stream, &host_table));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t used = reference::paged_blocks(host, reference::paged_request_length(host, b));
    for (std::int64_t i = 0; i < used; ++i) {
      const std::int32_t block = host.block_table[b * p.block_table_stride + i];
      if (block < 0 || block >= p.num_blocks) {
        return invalid("block_table[" + std::to_string(b) + ", " + std::to_string(i) + "]",
                       "must be in [0, num_blocks) (got " + std::to_string(block) +
                           ", num_blocks=" + std::to_string(p.num_blocks) + ")");
      }
    }
  }
  return Status::Ok();
}

// No two non-empty entries of a row hold the same index; reports the first
// row with a repeat, its smallest repeated index and the first two parts
// holding it.
Status check_merge_distinct(const MergeTopkParams& p, const std::int32_t* indices) {
  std::vector<std::pair<std::int32_t, std::int64_t>> row;  // (index, part)
  for (std::int64_t r = 0; r < p.num_rows; ++r) {
    row.clear();
    for (std::int64_t part = 0; part < p.num_parts; ++part) {
      const std::int32_t* entries = indices + (part * p.num_rows + r) * p.part_k;
      for (std::int64_t i = 0; i < p.part_k; ++i) {
        if (entries[i] >= 0) row.emplace_back(entries[i], part);
      }
    }
    std::sort(row.begin(), row.end());
    const auto repeat =
        std::adjacent_find(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first == b.first; });
    if (repeat != row.end()) {
      return invalid("indices", "row " + std::to_string(r) + " holds index " + std::to_string(repeat->first) +
                                    " twice (parts " + std::to_string(repeat->second) + " and " +
                                    std::to_string(std::next(repeat)->second) + ")");
    }
  }
  return Status::Ok();
}

// Every index >= -1; on the CPU backend also distinct within a row. On the
// CUDA backend the indices are read back from device memory.
Status check_merge_entries(const MergeTopkParams& p, Backend backend, const RangeCheck& ranges) {
  const std::int64_t entries = p.num_parts * p.num_rows * p.part_k;
  if (entries == 0 || (backend == Backend::kCuda && !ranges.enabled)) return Status::Ok();
  const std::int32_t* indices = p.indices;
  std::vector<std::int32_t> host_indices;
  DSA_RETURN_IF_ERROR(readable_on_host(indices, entries, backend, ranges.stream, &host_indices));
  for (std::int64_t e = 0; e < entries; ++e) {
    if (indices[e] < -1) {
      const std::int64_t part = e / (p.num_rows * p.part_k), r = e / p.part_k % p.num_rows, i = e % p.part_k;
      return invalid("indices[" + std::to_string(part) + ", " + std::to_string(r) + ", " + std::to_string(i) + "]",
                     "must be >= -1 (an empty slot) (got " + std::to_string(indices[e]) + ")");
    }
  }
  return backend == Backend::kCpu ? check_merge_distinct(p, indices) : Status::Ok();
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

Status validate(const PagedIndexerTopkParams& p, Backend backend, const RangeCheck& ranges) {
  DSA_RETURN_IF_ERROR(validate_paged_shapes(p));
  const bool rows = p.num_rows() > 0;
  DSA_RETURN_IF_ERROR(check_pointer("q", p.q, rows, 16, backend));
  DSA_RETURN_IF_ERROR(check_pointer("kv_cache", p.kv_cache, p.num_blocks > 0, 16, backend));
  const bool table = p.batch > 0 && p.max_blocks_per_seq > 0;
  DSA_RETURN_IF_ERROR(check_pointer("block_table", p.block_table, table, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("context_lens", p.context_lens, p.batch > 0, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("w", p.w, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("indices", p.indices, rows, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("values", p.values, false, 4, backend));
  return check_paged_ranges(p, backend, ranges);
}

Status validate(const MergeTopkParams& p, Backend backend, const RangeCheck& ranges) {
  DSA_RETURN_IF_ERROR(check_count("num_parts", p.num_parts, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_count("num_rows", p.num_rows, kMaxIndex));
  DSA_RETURN_IF_ERROR(check_count("part_k", p.part_k, kMaxIndex));
  if (p.num_parts * p.num_rows > 0 && p.part_k < 1) {
    return invalid("part_k", "must be >= 1 when num_parts * num_rows > 0 (got " + std::to_string(p.part_k) + ")");
  }
  if (p.num_parts * p.part_k > kMaxIndex) {
    return invalid("part_k", "num_parts * part_k must be <= 2147483647 (got " + product(p.num_parts, p.part_k) + ")");
  }
  DSA_RETURN_IF_ERROR(check_k(p.options));
  DSA_RETURN_IF_ERROR(check_absolute_base(p.options, "indices pass through"));
  const bool entries = p.num_parts * p.num_rows * p.part_k > 0;
  DSA_RETURN_IF_ERROR(check_pointer("values", p.values, entries, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("indices", p.indices, entries, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("out_indices", p.out_indices, p.num_rows > 0, 4, backend));
  DSA_RETURN_IF_ERROR(check_pointer("out_values", p.out_values, false, 4, backend));
  return check_merge_entries(p, backend, ranges);
}

Status validate(const IndexerTopkParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }
Status validate(const IndexerScoresParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }
Status validate(const TopkParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }
Status validate(const PagedIndexerTopkParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }
Status validate(const MergeTopkParams& p, Backend backend) { return validate(p, backend, RangeCheck{}); }

}  // namespace dsa
