// Host-side paged decode problems (dsa_topk.h, "paged (decode)"): a seeded
// generator that scatters a request's keys over randomly chosen cache blocks,
// and the same problem as a contiguous prefill problem, so that the paged
// operator can be judged against indexer_topk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "tools/generators.h"
#include "tools/problem.h"

namespace dsa::tools {

// A paged decode problem, all tensors host-resident (shapes as in
// PagedIndexerInputs).
struct PagedProblem {
  std::string name;
  std::uint64_t seed = 0;
  std::int64_t B = 0;                      // requests
  int next_n = 1;                          // query tokens per request
  int H = 64;
  int D = kHeadDim;
  int block_size = 64;
  std::int64_t num_blocks = 0;
  std::int64_t max_blocks_per_seq = 0;
  std::int64_t block_table_stride = 0;
  bool lens_per_token = false;
  std::vector<std::uint8_t> q;             // [B * next_n, H, D] FP8 e4m3
  std::vector<std::uint8_t> kv_cache;      // [num_blocks, block_size * (D + 4)]
  std::vector<std::int32_t> block_table;   // [B, block_table_stride]
  std::vector<std::int32_t> context_lens;  // [B], or [B, next_n] with lens_per_token
  std::vector<float> w;                    // [B * next_n, H]

  // Params pointing into this problem's buffers (host pointers).
  PagedIndexerTopkParams params(std::int32_t* indices, float* values, const SelectOptions& options,
                                bool physical_slots) const;
  std::int64_t rows() const { return B * next_n; }
};

struct PagedSpec {
  Distribution dist = Distribution::kModelLike;
  std::int64_t B = 1;
  int next_n = 1;
  int H = 64;
  int block_size = 64;
  std::vector<std::int32_t> context_lens;  // [B], or [B * next_n] with lens_per_token; each >= 0
  bool lens_per_token = false;
  std::int64_t extra_blocks = 3;           // cache blocks no request uses
  std::int64_t table_padding = 3;          // block_table_stride - max_blocks_per_seq
  // Blocks the table covers a request at least (max_blocks_per_seq; the
  // entries past a request's own blocks unused): an engine's table sized for
  // its longest context, whatever the batch's lengths.
  std::int64_t min_table_blocks = 0;
  // The entries past a request's own blocks (below max_blocks_per_seq) hold
  // real blocks of the cache, other requests' or unused ones, as an
  // engine's reused table rows do, instead of -1 and blocks past the cache:
  // a kernel that loads past a row's blocks then reads real bytes (for
  // timing; the row's positions and scores are the same). The stride's
  // padding stays past the cache.
  bool stale_table = false;
  std::uint64_t seed = 1;
};

// Keys, q and w have the character of spec.dist (make_indexer_problem over
// all requests' keys); each request's keys sit in cache blocks drawn by a
// seeded permutation, no block shared by two requests. Everything no row may
// read is poison: unused table entries hold -1 or a block >= num_blocks, and
// unused cache slots (extra blocks, the tail of a request's last block) hold
// FP8 NaN keys and NaN scales. The same spec always gives the same bytes.
// Throws std::invalid_argument on an invalid spec.
PagedProblem make_paged_problem(const PagedSpec& spec);

// The same problem as a prefill problem: keys gathered request after request,
// row (b, j) = b * next_n + j with ks = the request's first key and
// ks + len(b, j) as ke. indexer_topk on it with IndexBase::kRelative selects
// the positions the paged operator returns (bit for bit in kSmallestIndex
// mode).
IndexerProblem contiguous_view(const PagedProblem& problem);

// The cache slot of request b's position (block_table[b, p / bs] * bs + p % bs).
std::int32_t physical_slot(const PagedProblem& problem, std::int64_t b, std::int32_t position);

}  // namespace dsa::tools
