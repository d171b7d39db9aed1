// The decode operators on the CPU backend: indexer_topk_paged against the
// prefill operator on the same keys laid out contiguously (tools/paged.h),
// the cache layout against literal byte offsets, the paged generator, and
// merge_topk against a brute force that sorts every entry.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "reference/cpu_reference.h"
#include "tools/checker.h"
#include "tools/generators.h"
#include "tools/paged.h"

#include "../gpu/gpu_test_util.h"

namespace dsa {
namespace {

using testing::make_options;
using testing::paged_spec;
using tools::Distribution;
using tools::PagedProblem;
using tools::PagedSpec;
using tools::TopkOutput;

constexpr std::int32_t kPoison = -12345;
constexpr float kPoisonValue = 7.0f;
constexpr float kInf = std::numeric_limits<float>::infinity();

TopkOutput poisoned_output(std::int64_t rows, int k) {
  TopkOutput out;
  out.T = rows;
  out.K = k;
  out.indices.assign(static_cast<std::size_t>(rows * k), kPoison);
  out.values.assign(static_cast<std::size_t>(rows * k), kPoisonValue);
  return out;
}

TopkOutput run_paged(const PagedProblem& prob, const SelectOptions& options, bool physical_slots) {
  TopkOutput out = poisoned_output(prob.rows(), options.k);
  const PagedIndexerTopkParams p = prob.params(out.indices.data(), out.values.data(), options, physical_slots);
  const Status st = indexer_topk_paged(p, ExecutionContext{});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// indexer_topk with relative indices: the positions within each request.
TopkOutput run_prefill(const tools::IndexerProblem& view, SelectOptions options) {
  options.index_base = IndexBase::kRelative;
  TopkOutput out = poisoned_output(view.T, options.k);
  const Status st = indexer_topk(view.params(out.indices.data(), out.values.data(), options), ExecutionContext{});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// Slot by slot when sorted; otherwise each row as a set of (index, value bits).
void expect_same_rows(const TopkOutput& want, const TopkOutput& got, bool sorted, const std::string& what) {
  ASSERT_EQ(want.indices.size(), got.indices.size()) << what;
  const int k = want.K;
  auto row = [&](const TopkOutput& out, std::int64_t r) {
    std::vector<std::pair<std::int32_t, std::uint32_t>> slots;
    for (int i = 0; i < k; ++i) {
      slots.emplace_back(out.indices[r * k + i], std::bit_cast<std::uint32_t>(out.values[r * k + i]));
    }
    if (!sorted) std::sort(slots.begin(), slots.end());
    return slots;
  };
  for (std::int64_t r = 0; r < want.T; ++r) ASSERT_EQ(row(want, r), row(got, r)) << what << " row " << r;
}

// Positions of request b's rows turned into physical slots (padding stays -1).
TopkOutput to_physical(const PagedProblem& prob, TopkOutput out) {
  for (std::int64_t r = 0; r < out.T; ++r) {
    for (int i = 0; i < out.K; ++i) {
      std::int32_t& index = out.indices[r * out.K + i];
      if (index >= 0) index = tools::physical_slot(prob, r / prob.next_n, index);
    }
  }
  return out;
}

// Lengths whose rows fall on and around K (0, 1, K-1, K, K+1, longer) and
// below next_n: per request (1-D) or per token.
std::vector<std::int32_t> lens_around(int k, std::int64_t B, int next_n, bool per_token) {
  const std::int32_t pick[] = {0, 1, k - 1, k, k + 1, 2 * k + 37, 3};
  constexpr std::int64_t kPicks = std::size(pick);
  std::vector<std::int32_t> lens;
  for (std::int64_t b = 0; b < B; ++b) {
    if (!per_token) {
      lens.push_back(pick[b % kPicks]);
      continue;
    }
    for (int j = 0; j < next_n; ++j) lens.push_back(pick[(b + 2 * j) % kPicks]);
  }
  return lens;
}

struct PagedCase {
  PagedSpec spec;
  SelectOptions options;
};

// The paged reference against the prefill reference on contiguous_view:
// positions (bit for bit in both tie modes, since the CPU reference always
// breaks ties by the smallest index), judged by the checker too, and physical
// slots as the positions mapped through the table.
void check_case(const PagedCase& c) {
  const PagedProblem prob = tools::make_paged_problem(c.spec);
  const tools::IndexerProblem view = contiguous_view(prob);
  const std::string what = prob.name + " H=" + std::to_string(c.spec.H) + " bs=" +
                           std::to_string(c.spec.block_size) + " next_n=" + std::to_string(c.spec.next_n) +
                           (c.spec.lens_per_token ? " per-token" : " 1-D") + " K=" + std::to_string(c.options.k) +
                           (c.options.ties == TieBreak::kSmallestIndex ? " smallest" : " any") +
                           (c.options.sorted ? " sorted" : " unsorted");
  const TopkOutput positions = run_paged(prob, c.options, false);
  expect_same_rows(run_prefill(view, c.options), positions, c.options.sorted, what);
  SelectOptions relative = c.options;
  relative.index_base = IndexBase::kRelative;
  const tools::CheckReport report = tools::check_problem(view, relative, positions);
  EXPECT_TRUE(report.ok()) << what << "\n" << report.summary();
  expect_same_rows(to_physical(prob, positions), run_paged(prob, c.options, true), c.options.sorted,
                   what + " physical");
}

TEST(PagedReference, MatchesPrefillOnContiguousView) {
  constexpr int kNextN[] = {1, 2, 4, 8};
  constexpr std::int64_t kRequests = 7;  // one per length of lens_around
  std::uint64_t seed = 40;
  int n = 0;
  for (Distribution dist : tools::all_distributions()) {
    for (int H : kSupportedHeads) {
      for (int block_size : kSupportedBlockSizes) {
        const int next_n = kNextN[n % 4];
        const bool per_token = (n / 4 + n) % 2 == 1;
        const TieBreak ties = (n / 2) % 2 == 0 ? TieBreak::kSmallestIndex : TieBreak::kAny;
        const bool sorted = (n / 3) % 2 == 0;
        ++n;
        const PagedSpec spec = paged_spec(dist, kRequests, next_n, H, block_size,
                                       lens_around(512, kRequests, next_n, per_token), per_token, ++seed);
        check_case({spec, make_options(512, ties, IndexBase::kAbsolute, sorted)});
      }
    }
  }
}

TEST(PagedReference, EveryK) {
  for (int k : kSupportedK) {
    for (bool per_token : {false, true}) {
      const PagedSpec spec =
          paged_spec(Distribution::kTies, 7, 2, 64, 64, lens_around(k, 7, 2, per_token), per_token, 5);
      check_case({spec, make_options(k, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true)});
    }
  }
}

// The generator's lengths, written out: 1-D row (b, j) has
// max(0, L_b - next_n + j + 1) positions, a per-token row its own entry.
TEST(PagedReference, RowLengthsAsDefined) {
  const PagedProblem one_d =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 4, 32, 16, {5, 2, 0}, false, 1));
  const PagedProblem per_token = tools::make_paged_problem(
      paged_spec(Distribution::kModelLike, 2, 4, 32, 16, {3, 0, 7, 1, 0, 0, 0, 2}, true, 1));
  const std::vector<std::int32_t> want_one_d = {2, 3, 4, 5, 0, 0, 1, 2, 0, 0, 0, 0};
  const std::vector<std::int32_t> want_per_token = {3, 0, 7, 1, 0, 0, 0, 2};
  for (const auto& [prob, want] : {std::pair{&one_d, &want_one_d}, std::pair{&per_token, &want_per_token}}) {
    const tools::IndexerProblem view = contiguous_view(*prob);
    const PagedIndexerTopkParams p = prob->params(nullptr, nullptr, SelectOptions{}, false);
    for (std::int64_t r = 0; r < prob->rows(); ++r) {
      EXPECT_EQ(view.ke[r] - view.ks[r], (*want)[r]) << prob->name << " row " << r;
      EXPECT_EQ(reference::paged_row_length(p, r / prob->next_n, static_cast<int>(r % prob->next_n)), (*want)[r])
          << prob->name << " row " << r;
    }
  }
  EXPECT_EQ(one_d.max_blocks_per_seq, 1);  // the longest request has 5 positions
  EXPECT_EQ(per_token.max_blocks_per_seq, 1);
}

// A cache written by hand with the header's literal offsets: block c holds
// bs key rows of 128 bytes at c * bs * 132, then bs fp32 scales.
TEST(PagedReference, CacheLayoutAsDocumented) {
  constexpr int kBs = 16, kBlocks = 4, kStride = 3, kH = 32;
  const std::int32_t lens[] = {20, 5};
  const std::int32_t table[2][kStride] = {{2, 0, -1}, {3, -1, 9}};
  const tools::IndexerProblem source = testing::indexer_problem(Distribution::kSmallInteger, tools::Layout::kFull,
                                                                2, 25, 512, kH, 0, 3);
  std::vector<std::uint8_t> cache(kBlocks * kBs * 132, 0xFF);
  const std::int32_t first_key[] = {0, 20};
  for (int b = 0; b < 2; ++b) {
    for (int pos = 0; pos < lens[b]; ++pos) {
      const int block = table[b][pos / kBs], row = pos % kBs;
      std::memcpy(&cache[block * kBs * 132 + row * 128], &source.k[(first_key[b] + pos) * 128], 128);
      std::memcpy(&cache[block * kBs * 132 + kBs * 128 + row * 4], &source.k_scale[first_key[b] + pos], 4);
    }
  }
  PagedIndexerTopkParams p;
  p.q = source.q.data();
  p.kv_cache = cache.data();
  p.block_table = &table[0][0];
  p.context_lens = lens;
  p.w = source.w.data();
  p.batch = 2;
  p.num_heads = kH;
  p.num_blocks = kBlocks;
  p.block_size = kBs;
  p.max_blocks_per_seq = 2;
  p.block_table_stride = kStride;
  p.options = make_options(512, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);

  tools::IndexerProblem prefill = source;
  prefill.ks = {0, 20};
  prefill.ke = {20, 25};
  const TopkOutput want = run_prefill(prefill, p.options);
  for (bool physical : {false, true}) {
    TopkOutput got = poisoned_output(2, 512);
    p.indices = got.indices.data();
    p.values = got.values.data();
    p.physical_slots = physical;
    ASSERT_TRUE(indexer_topk_paged(p, ExecutionContext{}).ok());
    TopkOutput mapped = want;
    for (int b = 0; b < 2 && physical; ++b) {
      for (int i = 0; i < lens[b]; ++i) {
        std::int32_t& pos = mapped.indices[b * 512 + i];
        pos = table[b][pos / kBs] * kBs + pos % kBs;
      }
    }
    expect_same_rows(mapped, got, true, physical ? "physical" : "positions");
    // Request 0 holds all its 20 positions: rows 0-15 of block 2, rows 0-3 of block 0.
    std::set<std::int32_t> want_row0;
    for (int pos = 0; pos < 20; ++pos) want_row0.insert(physical ? (pos < 16 ? 2 * kBs + pos : pos - 16) : pos);
    EXPECT_EQ(std::set<std::int32_t>(got.indices.begin(), got.indices.begin() + 20), want_row0);
    EXPECT_EQ(got.indices[20], -1);
  }
}

// The generator's cache against the same literal offsets, and its promises:
// disjoint blocks, poison wherever no row reads, one stride of padding.
TEST(PagedGenerator, LayoutAndPoison) {
  const PagedSpec spec = paged_spec(Distribution::kModelLike, 4, 2, 32, 16, {40, 0, 17, 33}, false, 9);
  const PagedProblem prob = tools::make_paged_problem(spec);
  const tools::IndexerProblem view = contiguous_view(prob);
  EXPECT_EQ(prob.max_blocks_per_seq, 3);  // 40 positions in blocks of 16
  EXPECT_EQ(prob.block_table_stride, 3 + spec.table_padding);
  EXPECT_EQ(prob.num_blocks, 3 + 0 + 2 + 3 + spec.extra_blocks);
  EXPECT_EQ(view.N, 40 + 0 + 17 + 33);
  std::vector<bool> read(static_cast<std::size_t>(prob.num_blocks * 16), false);
  std::set<std::int32_t> used_blocks;
  const std::int64_t block_bytes = 16 * 132;
  for (std::int64_t b = 0; b < prob.B; ++b) {
    const std::int64_t len = view.ke[b * 2 + 1] - view.ks[b * 2 + 1];
    const std::int64_t blocks = (len + 15) / 16;
    for (std::int64_t i = 0; i < prob.block_table_stride; ++i) {
      const std::int32_t block = prob.block_table[b * prob.block_table_stride + i];
      if (i < blocks) {
        ASSERT_TRUE(block >= 0 && block < prob.num_blocks) << "request " << b << " entry " << i;
        EXPECT_TRUE(used_blocks.insert(block).second) << "block " << block << " used twice";
      } else {
        EXPECT_TRUE(block < 0 || block >= prob.num_blocks) << "unused entry " << i << " holds block " << block;
      }
    }
    for (std::int64_t pos = 0; pos < len; ++pos) {
      const std::int32_t block = prob.block_table[b * prob.block_table_stride + pos / 16];
      const std::int64_t row = pos % 16, key = view.ks[b * 2] + pos;
      EXPECT_EQ(tools::physical_slot(prob, b, static_cast<std::int32_t>(pos)), block * 16 + row);
      read[block * 16 + row] = true;
      ASSERT_EQ(std::memcmp(&prob.kv_cache[block * block_bytes + row * 128], &view.k[key * 128], 128), 0);
      float scale;
      std::memcpy(&scale, &prob.kv_cache[block * block_bytes + 16 * 128 + row * 4], 4);
      ASSERT_EQ(scale, view.k_scale[key]);
      ASSERT_GT(scale, 0.0f);
    }
  }
  for (std::int64_t slot = 0; slot < prob.num_blocks * 16; ++slot) {
    if (read[slot]) continue;
    const std::int64_t block = slot / 16, row = slot % 16;
    for (int d = 0; d < 128; ++d) ASSERT_EQ(prob.kv_cache[block * block_bytes + row * 128 + d], 0xFF) << slot;
    float scale;
    std::memcpy(&scale, &prob.kv_cache[block * block_bytes + 16 * 128 + row * 4], 4);
    ASSERT_TRUE(std::isnan(scale)) << "unread slot " << slot;
  }
}

// A table sized for a longer context than the batch's (min_table_blocks, as
// an engine sizes it for its longest context): wider, the extra entries
// unused, the cache and the reference's results unchanged.
TEST(PagedGenerator, WideTable) {
  const PagedSpec spec = paged_spec(Distribution::kModelLike, 3, 1, 64, 16, {40, 0, 17}, false, 13);
  PagedSpec wide = spec;
  wide.min_table_blocks = 10;
  const PagedProblem a = tools::make_paged_problem(spec), b = tools::make_paged_problem(wide);
  EXPECT_EQ(a.max_blocks_per_seq, 3);
  EXPECT_EQ(b.max_blocks_per_seq, 10);
  EXPECT_EQ(b.block_table_stride, 10 + wide.table_padding);
  EXPECT_EQ(b.kv_cache, a.kv_cache);
  for (std::int64_t r = 0; r < b.B; ++r) {
    for (std::int64_t i = 0; i < b.block_table_stride; ++i) {
      const std::int32_t got = b.block_table[r * b.block_table_stride + i];
      if (i < a.max_blocks_per_seq) {
        EXPECT_EQ(got, a.block_table[r * a.block_table_stride + i]) << r << ", " << i;
      } else {
        EXPECT_TRUE(got < 0 || got >= b.num_blocks) << "unused entry " << i << " holds block " << got;
      }
    }
  }
  const SelectOptions det = make_options(512, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  EXPECT_EQ(run_paged(b, det, false).indices, run_paged(a, det, false).indices);
  wide.min_table_blocks = -1;
  EXPECT_THROW(tools::make_paged_problem(wide), std::invalid_argument);
}

// A stale table (stale_table, as an engine's reused rows): the entries past
// a request's own blocks, up to max_blocks_per_seq, are real blocks of the
// cache; the stride's padding stays past it; the used entries, the cache and
// the reference's results are those of the same spec without it.
TEST(PagedGenerator, StaleTable) {
  PagedSpec spec = paged_spec(Distribution::kModelLike, 3, 1, 64, 16, {40, 0, 17}, false, 13);
  spec.min_table_blocks = 10;
  PagedSpec stale = spec;
  stale.stale_table = true;
  const PagedProblem a = tools::make_paged_problem(spec), b = tools::make_paged_problem(stale);
  ASSERT_EQ(b.block_table_stride, a.block_table_stride);
  EXPECT_EQ(b.kv_cache, a.kv_cache);
  const std::int64_t used[] = {3, 0, 2};
  for (std::int64_t r = 0; r < b.B; ++r) {
    for (std::int64_t i = 0; i < b.block_table_stride; ++i) {
      const std::int32_t got = b.block_table[r * b.block_table_stride + i];
      if (i < used[r]) {
        EXPECT_EQ(got, a.block_table[r * a.block_table_stride + i]) << r << ", " << i;
      } else if (i < b.max_blocks_per_seq) {
        EXPECT_TRUE(got >= 0 && got < b.num_blocks) << "stale entry " << i << " holds " << got;
      } else {
        EXPECT_TRUE(got < 0 || got >= b.num_blocks) << "padding entry " << i << " holds block " << got;
      }
    }
  }
  const SelectOptions det = make_options(512, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  EXPECT_EQ(run_paged(b, det, false).indices, run_paged(a, det, false).indices);
  // A cache with no block: nothing to point at, the entries stay past it.
  PagedSpec empty = paged_spec(Distribution::kModelLike, 2, 1, 64, 16, {0, 0}, false, 14);
  empty.extra_blocks = 0;
  empty.min_table_blocks = 4;
  empty.stale_table = true;
  const PagedProblem e = tools::make_paged_problem(empty);
  ASSERT_EQ(e.num_blocks, 0);
  for (const std::int32_t entry : e.block_table) EXPECT_TRUE(entry < 0 || entry >= e.num_blocks) << entry;
}

// The keys in the cache are the ones make_indexer_problem draws for the
// spec's distribution: request after request, rows b * next_n + j.
TEST(PagedGenerator, KeysComeFromTheIndexerGenerator) {
  const PagedSpec spec = paged_spec(Distribution::kShifted, 3, 2, 64, 32, {70, 2, 31}, false, 4);
  const tools::IndexerProblem view = contiguous_view(tools::make_paged_problem(spec));
  tools::ProblemSpec source;
  source.dist = spec.dist;
  source.layout = tools::Layout::kFull;
  source.T = 6;
  source.N = 70 + 2 + 31;
  source.H = 64;
  source.seed = spec.seed;
  const tools::IndexerProblem want = tools::make_indexer_problem(source);
  EXPECT_EQ(view.k, want.k);
  EXPECT_EQ(view.k_scale, want.k_scale);
  EXPECT_EQ(view.q, want.q);
  EXPECT_EQ(view.w, want.w);
}

TEST(PagedGenerator, Deterministic) {
  const PagedSpec spec = paged_spec(Distribution::kTies, 5, 4, 64, 32, {100, 3, 0, 64, 65}, false, 11);
  const PagedProblem a = tools::make_paged_problem(spec), b = tools::make_paged_problem(spec);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.kv_cache, b.kv_cache);
  EXPECT_EQ(a.block_table, b.block_table);
  EXPECT_EQ(a.context_lens, b.context_lens);
  EXPECT_EQ(a.w, b.w);
  PagedSpec other = spec;
  other.seed = 12;
  const PagedProblem c = tools::make_paged_problem(other);
  EXPECT_NE(a.block_table, c.block_table);
  EXPECT_NE(a.kv_cache, c.kv_cache);
}

TEST(PagedGenerator, RejectsBadSpecs) {
  EXPECT_THROW(tools::make_paged_problem(paged_spec(Distribution::kTies, 2, 1, 64, 64, {3}, false, 1)),
               std::invalid_argument);  // context_lens needs B entries
  EXPECT_THROW(tools::make_paged_problem(paged_spec(Distribution::kTies, 1, 2, 64, 64, {3}, true, 1)),
               std::invalid_argument);  // per token: B * next_n entries
  EXPECT_THROW(tools::make_paged_problem(paged_spec(Distribution::kTies, 1, 1, 64, 48, {3}, false, 1)),
               std::invalid_argument);
  EXPECT_THROW(tools::make_paged_problem(paged_spec(Distribution::kTies, 1, 9, 64, 64, {3}, false, 1)),
               std::invalid_argument);
  EXPECT_THROW(tools::make_paged_problem(paged_spec(Distribution::kTies, 1, 1, 64, 64, {-1}, false, 1)),
               std::invalid_argument);
}

TEST(PagedReference, EmptyRowsAndBatches) {
  const PagedProblem zero =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 2, 64, 64, {0, 1, 0}, false, 2));
  const TopkOutput out = run_paged(zero, make_options(512), false);
  for (std::int64_t r = 0; r < zero.rows(); ++r) {
    const int count = r == 3 ? 1 : 0;  // only row (1, 1) has a position
    for (int i = 0; i < 512; ++i) {
      EXPECT_EQ(out.indices[r * 512 + i], i < count ? 0 : -1) << "row " << r << " slot " << i;
      if (i >= count) {
        EXPECT_EQ(out.values[r * 512 + i], -kInf);
      }
    }
  }
  const PagedProblem none = tools::make_paged_problem(paged_spec(Distribution::kModelLike, 0, 4, 64, 64, {}, false, 2));
  EXPECT_TRUE(indexer_topk_paged(none.params(nullptr, nullptr, make_options(512), true), ExecutionContext{}).ok());
}

TEST(PagedReference, IndependentOfThreadCount) {
  const PagedProblem prob = tools::make_paged_problem(
      paged_spec(Distribution::kTies, 7, 4, 64, 16, lens_around(512, 7, 4, false), false, 21));
  std::vector<std::vector<std::int32_t>> results;
  for (int threads : {1, 3}) {
    TopkOutput out = poisoned_output(prob.rows(), 512);
    ExecutionContext ctx;
    ctx.num_threads = threads;
    ASSERT_TRUE(indexer_topk_paged(prob.params(out.indices.data(), nullptr, make_options(512), true), ctx).ok());
    results.push_back(out.indices);
  }
  EXPECT_EQ(results[0], results[1]);
}

// check_finite looks at the slots rows read only: the generator's poison
// elsewhere passes, a NaN in a read key or scale does not.
TEST(PagedReference, CheckFiniteReadsOnlyUsedSlots) {
  PagedProblem prob = tools::make_paged_problem(paged_spec(Distribution::kModelLike, 2, 1, 64, 16, {20, 5}, false, 3));
  SelectOptions options = make_options(512);
  options.check_finite = true;
  auto run = [&](const PagedProblem& p) {
    TopkOutput out = poisoned_output(p.rows(), 512);
    return indexer_topk_paged(p.params(out.indices.data(), out.values.data(), options, false), ExecutionContext{});
  };
  ASSERT_TRUE(run(prob).ok()) << run(prob).to_string();
  {
    PagedProblem bad = prob;
    const std::int32_t slot = tools::physical_slot(bad, 1, 4);
    bad.kv_cache[(slot / 16) * 16 * 132 + (slot % 16) * 128 + 7] = 0x7F;
    const Status st = run(bad);
    EXPECT_EQ(st.code(), StatusCode::kNonFiniteInput);
    EXPECT_NE(st.message().find("key byte 7 of slot " + std::to_string(slot) + " (request 1, position 4)"),
              std::string::npos)
        << st.message();
  }
  {
    PagedProblem bad = prob;
    const std::int32_t slot = tools::physical_slot(bad, 0, 17);
    const float inf = kInf;
    std::memcpy(&bad.kv_cache[(slot / 16) * 16 * 132 + 16 * 128 + (slot % 16) * 4], &inf, 4);
    const Status st = run(bad);
    EXPECT_EQ(st.code(), StatusCode::kNonFiniteInput);
    EXPECT_NE(st.message().find("scale of slot " + std::to_string(slot)), std::string::npos) << st.message();
  }
  {
    PagedProblem bad = prob;
    bad.w[64 + 3] = std::nanf("");
    EXPECT_NE(run(bad).message().find("w[67]"), std::string::npos);
  }
}

// --------------------------------------------------------------- merge -----

// P parts of R rows, part_k entries each, with the indices of a row distinct
// across parts. Values come from a small pool (ties across parts, +0 and -0,
// -inf, NaN) mixed with distinct ones; empty slots hold -1 and a huge value
// that must be ignored.
struct MergeCase : tools::MergeProblem {
  MergeCase(std::int64_t parts, std::int64_t rows, std::int64_t k_per_part, std::uint64_t seed) {
    P = parts;
    R = rows;
    part_k = k_per_part;
    const float pool[] = {3.0f, 1.5f, 1.5f, 0.0f, -0.0f, -2.0f, -kInf, std::nanf(""), kInf};
    std::mt19937_64 rng(seed);
    values.resize(static_cast<std::size_t>(P * R * part_k));
    indices.resize(values.size());
    for (std::int64_t r = 0; r < R; ++r) {
      std::vector<std::int32_t> keys(static_cast<std::size_t>(3 * P * part_k));
      for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<std::int32_t>(i * 7 + r);
      for (std::size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng() % i]);
      for (std::int64_t p = 0; p < P; ++p) {
        for (std::int64_t i = 0; i < part_k; ++i) {
          const std::size_t e = static_cast<std::size_t>((p * R + r) * part_k + i);
          const std::uint64_t draw = rng();
          if (draw % 8 == 0) {
            indices[e] = -1;
            values[e] = 1e30f;
            continue;
          }
          indices[e] = keys[static_cast<std::size_t>(p * part_k + i)];
          values[e] = draw % 3 == 0 ? pool[(draw >> 8) % std::size(pool)]
                                    : static_cast<float>(static_cast<std::int64_t>((draw >> 16) % 2001) - 1000) / 8;
        }
      }
    }
  }
};

struct Entry {
  float value;
  std::int32_t index;
};

// A score as the contract ranks it: NaN as -inf (and -0 == +0 as floats do).
float ranked(float v) { return std::isnan(v) ? -kInf : v; }

// Every non-empty entry of row r, best first, ties by ascending index.
std::vector<Entry> brute_force(const MergeCase& m, std::int64_t r) {
  std::vector<Entry> all;
  for (std::int64_t p = 0; p < m.P; ++p) {
    for (std::int64_t i = 0; i < m.part_k; ++i) {
      const std::size_t e = static_cast<std::size_t>((p * m.R + r) * m.part_k + i);
      if (m.indices[e] != -1) all.push_back({m.values[e], m.indices[e]});
    }
  }
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) {
    return ranked(a.value) != ranked(b.value) ? ranked(a.value) > ranked(b.value) : a.index < b.index;
  });
  return all;
}

void check_merge(const MergeCase& m, const SelectOptions& options, bool with_values) {
  const int k = options.k;
  TopkOutput out = poisoned_output(m.R, k);
  const Status st =
      merge_topk(m.params(out.indices.data(), with_values ? out.values.data() : nullptr, options), ExecutionContext{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::string what = "P=" + std::to_string(m.P) + " part_k=" + std::to_string(m.part_k) +
                           " K=" + std::to_string(k) + (options.sorted ? " sorted" : " unsorted") +
                           (options.ties == TieBreak::kAny ? " any" : " smallest");
  for (std::int64_t r = 0; r < m.R; ++r) {
    const std::vector<Entry> all = brute_force(m, r);
    const std::size_t count = std::min<std::size_t>(k, all.size());
    std::vector<std::pair<std::int32_t, std::uint32_t>> want, got;
    std::multiset<float> want_scores, got_scores;
    for (std::size_t i = 0; i < count; ++i) {
      want.emplace_back(all[i].index, std::bit_cast<std::uint32_t>(all[i].value));
      want_scores.insert(ranked(all[i].value) == 0.0f ? 0.0f : ranked(all[i].value));
      const std::int32_t index = out.indices[r * k + i];
      const auto entry = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.index == index; });
      ASSERT_NE(entry, all.end()) << what << " row " << r << " slot " << i << ": index " << index << " is no entry";
      got.emplace_back(index, std::bit_cast<std::uint32_t>(with_values ? out.values[r * k + i] : entry->value));
      got_scores.insert(ranked(entry->value) == 0.0f ? 0.0f : ranked(entry->value));
    }
    for (std::size_t i = count; i < static_cast<std::size_t>(k); ++i) {
      ASSERT_EQ(out.indices[r * k + i], -1) << what << " row " << r << " slot " << i;
      if (with_values) {
        ASSERT_EQ(out.values[r * k + i], -kInf) << what << " row " << r << " slot " << i;
      }
    }
    EXPECT_EQ(want_scores, got_scores) << what << " row " << r << ": not a top-K set";
    if (options.ties == TieBreak::kAny) {
      // Any choice among ties: distinct indices, values as given.
      std::sort(got.begin(), got.end());
      EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << what << " row " << r;
      for (const auto& [index, bits] : got) {
        const auto entry = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.index == index; });
        EXPECT_EQ(bits, std::bit_cast<std::uint32_t>(entry->value)) << what << " row " << r << " index " << index;
      }
      continue;
    }
    if (!options.sorted) {
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
    }
    ASSERT_EQ(want, got) << what << " row " << r;
  }
}

TEST(MergeReference, MatchesBruteForce) {
  std::uint64_t seed = 70;
  for (std::int64_t P = 1; P <= 8; ++P) {
    for (std::int64_t part_k : {100, 512, 700}) {  // below, at and above K
      const MergeCase m(P, 4, part_k, ++seed);
      const int variant = static_cast<int>(P + part_k);
      const TieBreak ties = variant % 2 == 0 ? TieBreak::kSmallestIndex : TieBreak::kAny;
      for (bool sorted : {false, true}) check_merge(m, make_options(512, ties, IndexBase::kAbsolute, sorted), true);
      check_merge(m, make_options(512, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true), variant % 3 == 0);
    }
  }
}

TEST(MergeReference, EveryK) {
  for (int k : kSupportedK) {
    const MergeCase m(3, 2, k / 2 + 5, static_cast<std::uint64_t>(k));
    check_merge(m, make_options(k, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true), true);
  }
}

// A row whose entries are all empty, and no parts at all, give -1 rows.
TEST(MergeReference, EmptyRows) {
  MergeCase m(2, 2, 3, 1);
  for (std::int64_t p = 0; p < 2; ++p) std::fill_n(m.indices.begin() + (p * 2 + 1) * 3, 3, -1);
  check_merge(m, make_options(512, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true), true);
  TopkOutput out = poisoned_output(2, 512);
  MergeTopkParams p = m.params(out.indices.data(), out.values.data(), make_options(512));
  p.num_parts = 0;
  ASSERT_TRUE(merge_topk(p, ExecutionContext{}).ok());
  EXPECT_EQ(std::count(out.indices.begin(), out.indices.end(), -1), 2 * 512);
  EXPECT_EQ(std::count(out.values.begin(), out.values.end(), -kInf), 2 * 512);
}

// Merging the top-K of disjoint slices of a row is the top-K of the row.
TEST(MergeReference, MergedSlicesEqualTheWholeRow) {
  const PagedProblem prob = tools::make_paged_problem(
      paged_spec(Distribution::kTies, 1, 1, 64, 64, {3000}, false, 8));
  const tools::IndexerProblem view = contiguous_view(prob);
  const SelectOptions options = make_options(512, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  constexpr int kParts = 5;
  std::vector<std::int32_t> part_indices(kParts * 512);
  std::vector<float> part_values(kParts * 512);
  for (int part = 0; part < kParts; ++part) {
    tools::IndexerProblem slice = view;
    slice.ks = {part * 600};
    slice.ke = {part * 600 + 600};
    ASSERT_TRUE(indexer_topk(slice.params(&part_indices[part * 512], &part_values[part * 512], options),
                             ExecutionContext{}).ok());
  }
  MergeTopkParams merge;
  merge.values = part_values.data();
  merge.indices = part_indices.data();
  merge.num_parts = kParts;
  merge.num_rows = 1;
  merge.part_k = 512;
  TopkOutput merged = poisoned_output(1, 512);
  merge.out_indices = merged.indices.data();
  merge.out_values = merged.values.data();
  merge.options = options;
  ASSERT_TRUE(merge_topk(merge, ExecutionContext{}).ok());
  TopkOutput whole = poisoned_output(1, 512);
  ASSERT_TRUE(indexer_topk(view.params(whole.indices.data(), whole.values.data(), options), ExecutionContext{}).ok());
  expect_same_rows(whole, merged, true, "merged slices");
}

}  // namespace
}  // namespace dsa
