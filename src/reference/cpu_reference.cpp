#include "reference/cpu_reference.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/fp8.h"
#include "common/paged.h"
#include "common/parallel.h"
#include "common/keys.h"

namespace dsa::reference {
namespace {

constexpr int kLanes = 16;  // the dot product's documented lane count

struct Fp8Table {
  float value[256];
  Fp8Table() {
    for (int b = 0; b < 256; ++b) value[b] = fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
  }
};
const Fp8Table& fp8_table() {
  static const Fp8Table table;
  return table;
}

// dot over D = kHeadDim in the documented lane order. The lane loops have no
// cross-iteration dependency, so the compiler vectorises them without
// reassociating anything.
template <typename T>
T lane_dot(const T* q, const T* k) {
  T lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = q[j] * k[j];
  for (int d = kLanes; d < kHeadDim; d += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] + q[d + j] * k[d + j];
  }
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  }
  return lane[0];
}

template <typename T>
void decode_q_row(const IndexerInputs& p, std::int64_t t, std::vector<T>* out) {
  const Fp8Table& table = fp8_table();
  const std::int64_t n = static_cast<std::int64_t>(p.num_heads) * p.head_dim;
  out->resize(static_cast<std::size_t>(n));
  const std::uint8_t* q = p.q + t * n;
  for (std::int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<T>(table.value[q[i]]);
}

template <typename T>
T score_pair(const IndexerInputs& p, const T* q_row, const T* k_row, std::int64_t t,
             std::int64_t s) {
  const float* w = p.w + t * p.num_heads;
  T acc = 0;
  for (int h = 0; h < p.num_heads; ++h) {
    const T dot = lane_dot(q_row + static_cast<std::int64_t>(h) * p.head_dim, k_row);
    const T relu = dot > T(0) ? dot : T(0);
    acc = acc + static_cast<T>(w[h]) * relu;
  }
  return static_cast<T>(p.k_scale[s]) * acc;
}

// Order of the exact reference: higher key first, then smaller index.
struct Ranked {
  std::uint32_t key;
  std::int32_t index;
  bool operator<(const Ranked& o) const { return key != o.key ? key > o.key : index < o.index; }
};

// A merge candidate: its rank and the value it came with (returned as given,
// so a NaN or -0 value survives the merge unchanged).
struct MergeEntry {
  Ranked rank;
  float value;
  bool operator<(const MergeEntry& o) const { return rank < o.rank; }
};

// Slots [count, K) of an output row: -1, and -inf where values are written.
void pad_row(std::int64_t count, int k, std::int32_t* indices, float* values) {
  std::fill(indices + count, indices + k, -1);
  if (values) std::fill(values + count, values + k, -std::numeric_limits<float>::infinity());
}

// Requests [first, last) of a paged problem as one prefill problem over their
// gathered keys: request b's positions start at key offset[b - first], and row
// (b, j) is query row (b - first) * next_n + j with range
// [offset, offset + len(b, j)), selected with relative indices (= positions).
// `num_keys` (the sum of the requests' lengths) must be int32-indexable.
void paged_group_topk(const PagedIndexerTopkParams& p, const std::vector<std::int64_t>& length,
                      std::int64_t first, std::int64_t last, std::int64_t num_keys, int num_threads) {
  const std::int64_t requests = last - first;
  std::vector<std::int64_t> offset(static_cast<std::size_t>(requests) + 1, 0);
  for (std::int64_t i = 0; i < requests; ++i) offset[i + 1] = offset[i] + length[first + i];
  std::vector<std::uint8_t> keys(static_cast<std::size_t>(num_keys) * kHeadDim);
  std::vector<float> scales(static_cast<std::size_t>(num_keys));
  parallel_items(requests, num_threads, [&](std::int64_t i) {
    gather_paged_keys(p, first + i, length[first + i], keys.data() + offset[i] * kHeadDim, scales.data() + offset[i]);
  });

  const std::int64_t rows = requests * p.next_n;
  std::vector<std::int32_t> ks(static_cast<std::size_t>(rows)), ke(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < requests; ++i) {
    for (int j = 0; j < p.next_n; ++j) {
      ks[i * p.next_n + j] = static_cast<std::int32_t>(offset[i]);
      ke[i * p.next_n + j] = static_cast<std::int32_t>(offset[i] + paged_row_length(p, first + i, j));
    }
  }

  const std::int64_t first_row = first * p.next_n;
  const int k = p.options.k;
  IndexerTopkParams view;
  view.q = p.q + first_row * p.num_heads * p.head_dim;
  view.k = keys.data();
  view.k_scale = scales.data();
  view.w = p.w + first_row * p.num_heads;
  view.ks = ks.data();
  view.ke = ke.data();
  view.num_queries = rows;
  view.num_keys = num_keys;
  view.num_heads = p.num_heads;
  view.head_dim = p.head_dim;
  view.k_row_stride = kHeadDim;
  view.indices = p.indices + first_row * k;
  view.values = p.values ? p.values + first_row * k : nullptr;
  view.options = p.options;
  view.options.index_base = IndexBase::kRelative;
  indexer_topk_cpu(view, num_threads);
}

}  // namespace

DecodedKeys::DecodedKeys(const IndexerInputs& p, int num_threads) : dim_(p.head_dim) {
  data_.resize(static_cast<std::size_t>(p.num_keys) * dim_);
  const Fp8Table& table = fp8_table();
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (p.num_keys + kBlock - 1) / kBlock;
  parallel_items(blocks, num_threads, [&](std::int64_t b) {
    const std::int64_t end = std::min(p.num_keys, (b + 1) * kBlock);
    for (std::int64_t s = b * kBlock; s < end; ++s) {
      const std::uint8_t* src = p.k + s * p.k_row_stride;
      float* dst = data_.data() + s * dim_;
      for (int d = 0; d < dim_; ++d) dst[d] = table.value[src[d]];
    }
  });
}

// AVX2 clone where the CPU has it: the same lane order and no FMA (the file is
// built with -ffp-contract=off), so both clones give bit-identical scores.
__attribute__((target_clones("avx2", "default")))
void score_row(const IndexerInputs& p, const DecodedKeys& keys, std::int64_t t,
               std::vector<float>* out) {
  const std::int64_t ks = p.ks[t], ke = p.ke[t];
  out->resize(static_cast<std::size_t>(ke - ks));
  thread_local std::vector<float> q_row;
  decode_q_row(p, t, &q_row);
  for (std::int64_t s = ks; s < ke; ++s) (*out)[s - ks] = score_pair(p, q_row.data(), keys.row(s), t, s);
}

void score_row_f64(const IndexerInputs& p, std::int64_t t, std::vector<double>* out) {
  const std::int64_t ks = p.ks[t], ke = p.ke[t];
  out->resize(static_cast<std::size_t>(ke - ks));
  std::vector<double> q_row;
  decode_q_row(p, t, &q_row);
  const Fp8Table& table = fp8_table();
  std::vector<double> k_row(static_cast<std::size_t>(p.head_dim));
  for (std::int64_t s = ks; s < ke; ++s) {
    const std::uint8_t* src = p.k + s * p.k_row_stride;
    for (int d = 0; d < p.head_dim; ++d) k_row[d] = table.value[src[d]];
    (*out)[s - ks] = score_pair(p, q_row.data(), k_row.data(), t, s);
  }
}

double score_magnitude(const IndexerInputs& p, std::int64_t t, std::int64_t s) {
  const Fp8Table& table = fp8_table();
  double acc = 0;
  for (int h = 0; h < p.num_heads; ++h) {
    const std::uint8_t* q = p.q + (t * p.num_heads + h) * p.head_dim;
    const std::uint8_t* k = p.k + s * p.k_row_stride;
    double dot = 0;
    for (int d = 0; d < p.head_dim; ++d) dot += std::fabs(static_cast<double>(table.value[q[d]]) * table.value[k[d]]);
    acc += std::fabs(static_cast<double>(p.w[t * p.num_heads + h])) * dot;
  }
  return acc * p.k_scale[s];
}

void select_row(std::span<const float> row, std::int32_t ks, const SelectOptions& options,
                std::int32_t* indices, float* values) {
  const std::int64_t len = static_cast<std::int64_t>(row.size());
  const std::int64_t count = std::min<std::int64_t>(options.k, len);
  thread_local std::vector<Ranked> ranked;
  ranked.resize(row.size());
  for (std::int64_t i = 0; i < len; ++i) ranked[i] = {score_key(row[i]), static_cast<std::int32_t>(i)};
  if (count < len) std::nth_element(ranked.begin(), ranked.begin() + count, ranked.end());
  if (options.sorted) std::sort(ranked.begin(), ranked.begin() + count);
  const std::int32_t base = options.index_base == IndexBase::kAbsolute ? ks : 0;
  for (std::int64_t i = 0; i < count; ++i) {
    indices[i] = base + ranked[i].index;
    if (values) values[i] = row[ranked[i].index];
  }
  pad_row(count, options.k, indices, values);
}

Status indexer_topk_cpu(const IndexerTopkParams& p, int num_threads) {
  const DecodedKeys keys(p, num_threads);
  const int k = p.options.k;
  parallel_items(p.num_queries, num_threads, [&](std::int64_t t) {
    thread_local std::vector<float> row;
    score_row(p, keys, t, &row);
    select_row(row, p.ks[t], p.options, p.indices + t * k, p.values ? p.values + t * k : nullptr);
  });
  return Status::Ok();
}

Status indexer_scores_cpu(const IndexerScoresParams& p, int num_threads) {
  const DecodedKeys keys(p, num_threads);
  parallel_items(p.num_queries, num_threads, [&](std::int64_t t) {
    thread_local std::vector<float> row;
    score_row(p, keys, t, &row);
    float* out = p.scores + t * p.score_stride;
    std::copy(row.begin(), row.end(), out + p.ks[t]);
    if (p.fill_outside) {
      std::fill(out, out + p.ks[t], -std::numeric_limits<float>::infinity());
      std::fill(out + p.ke[t], out + p.num_keys, -std::numeric_limits<float>::infinity());
    }
  });
  return Status::Ok();
}

Status topk_cpu(const TopkParams& p, int num_threads) {
  const int k = p.options.k;
  parallel_items(p.num_rows, num_threads, [&](std::int64_t t) {
    const std::span<const float> row(p.scores + t * p.score_stride + p.ks[t],
                                     static_cast<std::size_t>(p.ke[t] - p.ks[t]));
    select_row(row, p.ks[t], p.options, p.indices + t * k, p.values ? p.values + t * k : nullptr);
  });
  return Status::Ok();
}

Status indexer_topk_paged_cpu(const PagedIndexerTopkParams& p, int num_threads) {
  // Requests are scored in groups whose keys stay int32-indexable (the prefill
  // ranges are int32); one request alone always is (max_context() <= INT32_MAX).
  constexpr std::int64_t kMaxKeys = std::numeric_limits<std::int32_t>::max();
  std::vector<std::int64_t> length(static_cast<std::size_t>(p.batch));
  for (std::int64_t b = 0; b < p.batch; ++b) length[b] = paged_request_length(p, b);
  for (std::int64_t first = 0, last = 0; first < p.batch; first = last) {
    std::int64_t keys = 0;
    for (last = first; last < p.batch && keys + length[last] <= kMaxKeys; ++last) keys += length[last];
    assert(last > first);
    paged_group_topk(p, length, first, last, keys, num_threads);
  }
  if (p.physical_slots) {
    const int k = p.options.k;
    parallel_items(p.num_rows(), num_threads, [&](std::int64_t r) {
      std::int32_t* row = p.indices + r * k;
      for (int i = 0; i < k && row[i] >= 0; ++i) {
        row[i] = static_cast<std::int32_t>(paged_slot(p, r / p.next_n, row[i]));
      }
    });
  }
  return Status::Ok();
}

Status merge_topk_cpu(const MergeTopkParams& p, int num_threads) {
  const int k = p.options.k;
  parallel_items(p.num_rows, num_threads, [&](std::int64_t r) {
    thread_local std::vector<MergeEntry> entries;
    entries.clear();
    for (std::int64_t part = 0; part < p.num_parts; ++part) {
      const std::int64_t base = (part * p.num_rows + r) * p.part_k;
      for (std::int64_t i = 0; i < p.part_k; ++i) {
        const std::int32_t index = p.indices[base + i];
        if (index >= 0) entries.push_back({{score_key(p.values[base + i]), index}, p.values[base + i]});
      }
    }
    const auto count = std::min<std::int64_t>(k, static_cast<std::int64_t>(entries.size()));
    std::partial_sort(entries.begin(), entries.begin() + count, entries.end());
    std::int32_t* indices = p.out_indices + r * k;
    float* values = p.out_values ? p.out_values + r * k : nullptr;
    for (std::int64_t i = 0; i < count; ++i) {
      indices[i] = entries[i].rank.index;
      if (values) values[i] = entries[i].value;
    }
    pad_row(count, k, indices, values);
  });
  return Status::Ok();
}

std::int64_t paged_row_length(const PagedIndexerInputs& p, std::int64_t b, int j) {
  return ::dsa::paged_row_length(p.context_lens, p.lens_per_token, b, p.next_n, j);
}

std::int64_t paged_request_length(const PagedIndexerInputs& p, std::int64_t b) {
  std::int64_t len = 0;
  for (int j = 0; j < p.next_n; ++j) len = std::max(len, paged_row_length(p, b, j));
  return len;
}

std::int64_t paged_blocks(const PagedIndexerInputs& p, std::int64_t len) {
  return (len + p.block_size - 1) / p.block_size;
}

std::int64_t paged_slot(const PagedIndexerInputs& p, std::int64_t b, std::int64_t position) {
  const std::int64_t block = p.block_table[b * p.block_table_stride + position / p.block_size];
  return block * p.block_size + position % p.block_size;
}

void gather_paged_keys(const PagedIndexerInputs& p, std::int64_t b, std::int64_t len, std::uint8_t* keys,
                       float* scales) {
  for (std::int64_t pos = 0; pos < len; ++pos) {
    const std::int64_t slot = paged_slot(p, b, pos);
    std::memcpy(keys + pos * kHeadDim, p.kv_cache + paged_key_offset(p.block_size, slot), kHeadDim);
    std::memcpy(scales + pos, p.kv_cache + paged_scale_offset(p.block_size, slot), kPagedScaleBytes);
  }
}


}  // namespace dsa::reference
