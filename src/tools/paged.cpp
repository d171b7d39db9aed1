// Paged problems. Row lengths, block addressing and the cache layout are
// written here from the header's definitions, independently of the CPU
// reference (src/reference), so that comparing the two checks both.
#include "tools/paged.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace dsa::tools {
namespace {

constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();
// Fills every slot no row reads: 0xFF is an FP8 NaN key byte, and four of
// them are a NaN scale, so a read of such a slot shows up in the scores.
constexpr std::uint8_t kPoisonByte = 0xFF;

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("make_paged_problem: " + message);
}

// len(b, j) of the header, clamped at 0.
std::int64_t row_length(const PagedProblem& p, std::int64_t b, int j) {
  const std::int64_t len = p.lens_per_token ? p.context_lens[b * p.next_n + j]
                                            : std::int64_t{p.context_lens[b]} - (p.next_n - 1 - j);
  return std::max<std::int64_t>(0, len);
}

// Positions [0, len) request b's rows read: its longest row.
std::int64_t request_length(const PagedProblem& p, std::int64_t b) {
  std::int64_t len = 0;
  for (int j = 0; j < p.next_n; ++j) len = std::max(len, row_length(p, b, j));
  return len;
}

// A slot's key bytes and scale: block `slot / bs` holds bs key rows of D bytes,
// then bs fp32 scales.
std::int64_t block_bytes(const PagedProblem& p) { return std::int64_t{p.block_size} * (p.D + 4); }
std::int64_t key_at(const PagedProblem& p, std::int64_t slot) {
  return slot / p.block_size * block_bytes(p) + slot % p.block_size * p.D;
}
std::int64_t scale_at(const PagedProblem& p, std::int64_t slot) {
  return slot / p.block_size * block_bytes(p) + std::int64_t{p.block_size} * p.D + slot % p.block_size * 4;
}

// 0, 1, ..., count - 1 shuffled by Fisher-Yates with std::mt19937_64, whose
// output the standard fixes exactly (std::shuffle and the distributions are
// not), so a seed draws the same blocks with every standard library.
std::vector<std::int32_t> shuffled_blocks(std::int64_t count, std::uint64_t seed) {
  std::vector<std::int32_t> blocks(static_cast<std::size_t>(count));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::mt19937_64 rng(seed);
  for (std::int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(((rng() >> 32) * static_cast<std::uint64_t>(i + 1)) >> 32);
    std::swap(blocks[i], blocks[j]);
  }
  return blocks;
}

// Table entry i of a request that uses fewer blocks: alternately -1 and a
// block past the cache, the two ways a kernel reading it would go wrong.
std::int32_t unused_entry(std::int64_t num_blocks, std::int64_t i) {
  return i % 2 == 0 ? -1 : static_cast<std::int32_t>(std::min(kMaxIndex, num_blocks + i));
}

void check_spec(const PagedSpec& spec) {
  require(spec.B >= 0, "B must be >= 0 (got " + std::to_string(spec.B) + ")");
  require(spec.next_n >= 1 && spec.next_n <= kMaxNextN,
          "next_n must be in [1, " + std::to_string(kMaxNextN) + "] (got " + std::to_string(spec.next_n) + ")");
  require(std::ranges::find(kSupportedBlockSizes, spec.block_size) != std::end(kSupportedBlockSizes),
          "block_size must be one of 16, 32, 64, 128 (got " + std::to_string(spec.block_size) + ")");
  const std::int64_t lens = spec.lens_per_token ? spec.B * spec.next_n : spec.B;
  require(static_cast<std::int64_t>(spec.context_lens.size()) == lens,
          "context_lens must have " + std::to_string(lens) + " entries (got " +
              std::to_string(spec.context_lens.size()) + ")");
  for (std::int32_t len : spec.context_lens) {
    require(len >= 0, "context_lens must be >= 0 (got " + std::to_string(len) + ")");
  }
  require(spec.extra_blocks >= 0, "extra_blocks must be >= 0");
  require(spec.table_padding >= 0, "table_padding must be >= 0");
  require(spec.min_table_blocks >= 0, "min_table_blocks must be >= 0");
}

}  // namespace

PagedIndexerTopkParams PagedProblem::params(std::int32_t* indices, float* values, const SelectOptions& options,
                                            bool physical_slots) const {
  PagedIndexerTopkParams p;
  p.q = q.data();
  p.kv_cache = kv_cache.data();
  p.block_table = block_table.data();
  p.context_lens = context_lens.data();
  p.w = w.data();
  p.batch = B;
  p.next_n = next_n;
  p.num_heads = H;
  p.head_dim = D;
  p.num_blocks = num_blocks;
  p.block_size = block_size;
  p.max_blocks_per_seq = max_blocks_per_seq;
  p.block_table_stride = block_table_stride;
  p.lens_per_token = lens_per_token;
  p.indices = indices;
  p.values = values;
  p.physical_slots = physical_slots;
  p.options = options;
  return p;
}

PagedProblem make_paged_problem(const PagedSpec& spec) {
  check_spec(spec);
  PagedProblem p;
  p.name = "paged/" + std::string(to_string(spec.dist));
  p.seed = spec.seed;
  p.B = spec.B;
  p.next_n = spec.next_n;
  p.H = spec.H;
  p.block_size = spec.block_size;
  p.lens_per_token = spec.lens_per_token;
  p.context_lens = spec.context_lens;

  // Request b's keys are keys [offset[b], offset[b + 1]) of one generated
  // problem, its rows that problem's rows [b * next_n, (b + 1) * next_n).
  std::vector<std::int64_t> offset(static_cast<std::size_t>(p.B) + 1, 0), blocks(static_cast<std::size_t>(p.B));
  for (std::int64_t b = 0; b < p.B; ++b) {
    const std::int64_t len = request_length(p, b);
    offset[b + 1] = offset[b] + len;
    blocks[b] = (len + p.block_size - 1) / p.block_size;
    p.max_blocks_per_seq = std::max(p.max_blocks_per_seq, blocks[b]);
  }
  p.max_blocks_per_seq = std::max(p.max_blocks_per_seq, spec.min_table_blocks);
  p.num_blocks = std::accumulate(blocks.begin(), blocks.end(), spec.extra_blocks);
  require(p.num_blocks <= kMaxIndex, "the cache needs more than INT32_MAX blocks");
  p.block_table_stride = p.max_blocks_per_seq + spec.table_padding;

  ProblemSpec source_spec;
  source_spec.dist = spec.dist;
  source_spec.layout = Layout::kFull;
  source_spec.T = p.rows();
  source_spec.N = offset[p.B];
  source_spec.H = spec.H;
  source_spec.seed = spec.seed;
  IndexerProblem source = make_indexer_problem(source_spec);
  p.q = std::move(source.q);
  p.w = std::move(source.w);

  // Used blocks are the first entries of one shuffle, so requests never share
  // a block and the extra blocks fall anywhere in the cache.
  const std::vector<std::int32_t> order = shuffled_blocks(p.num_blocks, spec.seed);
  p.block_table.resize(static_cast<std::size_t>(p.B * p.block_table_stride));
  std::size_t next = 0;
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t i = 0; i < p.block_table_stride; ++i) {
      const bool stale = spec.stale_table && i < p.max_blocks_per_seq && p.num_blocks > 0;
      p.block_table[b * p.block_table_stride + i] =
          i < blocks[b] ? order[next++]
          : stale       ? order[static_cast<std::size_t>((b + i) % p.num_blocks)]
                        : unused_entry(p.num_blocks, i);
    }
  }

  p.kv_cache.assign(static_cast<std::size_t>(p.num_blocks * block_bytes(p)), kPoisonByte);
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t pos = 0; pos < offset[b + 1] - offset[b]; ++pos) {
      const std::int64_t slot = physical_slot(p, b, static_cast<std::int32_t>(pos));
      std::memcpy(&p.kv_cache[key_at(p, slot)], &source.k[(offset[b] + pos) * source.k_row_stride], p.D);
      std::memcpy(&p.kv_cache[scale_at(p, slot)], &source.k_scale[offset[b] + pos], sizeof(float));
    }
  }
  return p;
}

IndexerProblem contiguous_view(const PagedProblem& problem) {
  IndexerProblem v;
  v.name = problem.name + "/contiguous";
  v.seed = problem.seed;
  v.T = problem.rows();
  v.H = problem.H;
  v.D = problem.D;
  v.k_row_stride = problem.D;
  v.q = problem.q;
  v.w = problem.w;
  std::vector<std::int64_t> first(static_cast<std::size_t>(problem.B) + 1, 0);  // request b's first key
  for (std::int64_t b = 0; b < problem.B; ++b) first[b + 1] = first[b] + request_length(problem, b);
  v.N = first[problem.B];
  if (v.N > kMaxIndex) throw std::invalid_argument("contiguous_view: more than INT32_MAX keys");
  v.k.resize(static_cast<std::size_t>(v.N * v.D));
  v.k_scale.resize(static_cast<std::size_t>(v.N));
  v.ks.resize(static_cast<std::size_t>(v.T));
  v.ke.resize(static_cast<std::size_t>(v.T));
  for (std::int64_t b = 0; b < problem.B; ++b) {
    for (std::int64_t pos = 0; pos < first[b + 1] - first[b]; ++pos) {
      const std::int64_t slot = physical_slot(problem, b, static_cast<std::int32_t>(pos));
      std::memcpy(&v.k[(first[b] + pos) * v.D], &problem.kv_cache[key_at(problem, slot)], v.D);
      std::memcpy(&v.k_scale[first[b] + pos], &problem.kv_cache[scale_at(problem, slot)], sizeof(float));
    }
    for (int j = 0; j < problem.next_n; ++j) {
      v.ks[b * problem.next_n + j] = static_cast<std::int32_t>(first[b]);
      v.ke[b * problem.next_n + j] = static_cast<std::int32_t>(first[b] + row_length(problem, b, j));
    }
  }
  return v;
}

std::int32_t physical_slot(const PagedProblem& problem, std::int64_t b, std::int32_t position) {
  const std::int64_t block = problem.block_table[b * problem.block_table_stride + position / problem.block_size];
  return static_cast<std::int32_t>(block * problem.block_size + position % problem.block_size);
}

}  // namespace dsa::tools
