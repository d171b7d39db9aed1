// Named, seeded input generators shared by tests, the CLI and the benchmarks.
// The same (name, shape, layout, seed) always yields the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/problem.h"

namespace dsa::tools {

// Value distributions (docs/design.md describes each).
enum class Distribution {
  kModelLike,    // q, k ~ N(0,1); k quantised per row to FP8 with scale amax/448;
                 // q encoded to FP8 directly (no Q scale); w ~ N(0,1)/sqrt(H)
  kTies,         // duplicate key rows and some all-zero q rows (all scores equal)
  kDeadRelu,     // most q.k dot products negative (ReLU kills most heads)
  kMixedSign,    // weights of both signs with large magnitude spread
  kShifted,      // scores large and tightly packed (tiny relative spread)
  kSmallInteger, // small-integer FP8 values, power-of-two scales: fp32 scores exact
};

// Row range layouts.
enum class Layout {
  kCausalSuffix,     // ks = 0, ke = N - T + t + 1 (needs T <= N)
  kVarlenBatch,      // packed batch of several sequences; each row causal inside
                     // its sequence: ks = start of sequence (> 0 for later ones)
  kContextParallel,  // a CP rank's two query chunks (head and mirrored tail)
  kBoundary,         // row lengths cycle through {0, 1, K-1, K, K+1} and random
  kFull,             // ks = 0, ke = N for every row
};

std::string_view to_string(Distribution d);
std::string_view to_string(Layout l);
// Parse the names printed by to_string; return false when unknown.
bool parse_distribution(std::string_view name, Distribution* out);
bool parse_layout(std::string_view name, Layout* out);
std::vector<Distribution> all_distributions();
std::vector<Layout> all_layouts();

struct ProblemSpec {
  Distribution dist = Distribution::kModelLike;
  Layout layout = Layout::kCausalSuffix;
  std::int64_t T = 1;
  std::int64_t N = 1;
  int H = 64;
  int K = 2048;                    // used by kBoundary
  std::int64_t k_row_stride = 0;   // 0 = D; otherwise bytes (multiple of 16, >= D)
  std::uint64_t seed = 1;
};

// Fill q, k, k_scale, w by spec.dist and ks, ke by spec.layout.
IndexerProblem make_indexer_problem(const ProblemSpec& spec);

// Row ranges alone (the same ones make_indexer_problem uses).
void make_ranges(Layout layout, std::int64_t T, std::int64_t N, int K, std::uint64_t seed,
                 std::vector<std::int32_t>* ks, std::vector<std::int32_t>* ke);

// An fp32 score matrix with the character of spec.dist (model-like: the
// distribution real indexer scores have; ties: few distinct values; dead-relu:
// mostly exact zeros; mixed-sign: both signs; shifted: large, tightly packed;
// small-integer: small integers), ranges by spec.layout, stride = N rounded up
// to a multiple of 4 plus spec-independent padding filled with NaN poison so a
// read outside [ks, ke) shows up.
ScoresProblem make_scores_problem(const ProblemSpec& spec);

// merge_topk inputs as context parallelism produces them: row r's scores over
// P * S keys (S = kMergeSliceKeysPerPartK * part_k) with the character of
// `dist` (make_scores_problem's rows), and part p the top part_k of its slice
// [p * S, (p + 1) * S) by descending score, equal scores by ascending index.
// Every kMergeShortRowPeriod-th row is short: part p's slice holds only
// part_k * p / (2P) keys (part 0 none), so its list ends in empty slots
// (index -1, value NaN) and the row may hold fewer than K entries.
inline constexpr std::int64_t kMergeSliceKeysPerPartK = 4;
inline constexpr std::int64_t kMergeShortRowPeriod = 16;
struct MergeSpec {
  Distribution dist = Distribution::kModelLike;
  std::int64_t P = 1;       // parts, >= 1
  std::int64_t R = 1;       // rows, >= 0
  std::int64_t part_k = 1;  // >= 1; P * S keys must be int32-indexable
  std::uint64_t seed = 1;
};
// Throws std::invalid_argument on an invalid spec.
MergeProblem make_merge_problem(const MergeSpec& spec);

}  // namespace dsa::tools
