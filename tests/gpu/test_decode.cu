// The decode operators on CUDA. indexer_topk_paged against the prefill
// operator on the same problem laid out contiguously (tools::contiguous_view):
// with smallest-index ties the two must agree bit for bit (indices and
// values), since both score with the same kernel arithmetic; with any ties
// the sorted values must agree. merge_topk against the CPU backend (both
// emit the sorted order, so the arrays are identical). Graph capture and
// replay with new lengths and tables; unvalidated bad input stays in bounds.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "decode/decode.h"
#include "device_array.h"
#include "dsa_topk/dsa_topk.h"
#include "gpu_test_util.h"
#include "tools/generators.h"
#include "tools/paged.h"
#include "tools/problem.h"

namespace dsa {
namespace {

using testing::DeviceArray;
using testing::make_options;
using testing::paged_spec;
using tools::Distribution;
using tools::PagedProblem;
using tools::PagedSpec;

// A paged problem's inputs in device memory.
struct DevicePaged {
  explicit DevicePaged(const PagedProblem& p)
      : host(p), q(p.q), cache(p.kv_cache), table(p.block_table), lens(p.context_lens), w(p.w) {}
  PagedIndexerTopkParams params(std::int32_t* indices, float* values, const SelectOptions& options,
                                bool physical) const {
    PagedIndexerTopkParams out = host.params(indices, values, options, physical);
    out.q = q.get();
    out.kv_cache = cache.get();
    out.block_table = table.get();
    out.context_lens = lens.get();
    out.w = w.get();
    return out;
  }
  const PagedProblem& host;
  DeviceArray<std::uint8_t> q, cache;
  DeviceArray<std::int32_t> table, lens;
  DeviceArray<float> w;
};

struct Result {
  std::vector<std::int32_t> indices;
  std::vector<float> values;
};

// Runs `call` with a workspace of `bytes`; returns its Status.
template <class Call>
Status with_workspace(std::size_t bytes, Call call) {
  DeviceArray<std::uint8_t> ws(std::max<std::size_t>(bytes, 1));
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  ctx.workspace = ws.get();
  ctx.workspace_bytes = bytes;
  const Status st = call(ctx);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return st;
}

Result run_paged(const DevicePaged& d, const SelectOptions& options, bool physical, bool want_values,
                 bool check_ranges = true) {
  const std::int64_t rows = d.host.B * d.host.next_n;
  DeviceArray<std::int32_t> indices(static_cast<std::size_t>(rows) * options.k);
  DeviceArray<float> values(want_values ? static_cast<std::size_t>(rows) * options.k : 0);
  indices.poison();
  if (want_values) values.poison();
  const PagedIndexerTopkParams p = d.params(indices.get(), want_values ? values.get() : nullptr, options, physical);
  std::size_t bytes = 0;
  EXPECT_TRUE(indexer_topk_paged_workspace_size(p, Backend::kCuda, &bytes).ok());
  const Status st = with_workspace(bytes, [&](ExecutionContext ctx) {
    ctx.check_ranges = check_ranges;
    return indexer_topk_paged(p, ctx);
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return {indices.download(), want_values ? values.download() : std::vector<float>{}};
}

// indexer_topk_paged with its route pinned: decode::launch_indexer_topk_paged
// on the workspace its plan sizes (the inputs are valid: no validation); its
// Status in *status. Values are always returned.
Result run_paged_pinned(const DevicePaged& d, const SelectOptions& options, const decode::PagedHooks& hooks,
                        Status* status) {
  const std::int64_t rows = d.host.B * d.host.next_n;
  DeviceArray<std::int32_t> indices(static_cast<std::size_t>(rows) * options.k);
  DeviceArray<float> values(static_cast<std::size_t>(rows) * options.k);
  indices.poison();
  values.poison();
  const PagedIndexerTopkParams p = d.params(indices.get(), values.get(), options, false);
  const std::size_t bytes = decode::paged_workspace_size(p, hooks);
  DeviceArray<std::uint8_t> ws(std::max<std::size_t>(bytes, 1));
  *status = decode::launch_indexer_topk_paged(p, nullptr, ws.get(), bytes, hooks);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {indices.download(), values.download()};
}

// The prefill operator on the contiguous layout (relative indices: positions).
Result run_prefill(const tools::IndexerProblem& c, const SelectOptions& options) {
  DeviceArray<std::uint8_t> q(c.q), k(c.k);
  DeviceArray<float> k_scale(c.k_scale), w(c.w);
  DeviceArray<std::int32_t> ks(c.ks), ke(c.ke);
  DeviceArray<std::int32_t> indices(static_cast<std::size_t>(c.T) * options.k);
  DeviceArray<float> values(static_cast<std::size_t>(c.T) * options.k);
  SelectOptions o = options;
  o.index_base = IndexBase::kRelative;
  IndexerTopkParams p = c.params(indices.get(), values.get(), o);
  p.q = q.get();
  p.k = k.get();
  p.k_scale = k_scale.get();
  p.w = w.get();
  p.ks = ks.get();
  p.ke = ke.get();
  std::size_t bytes = 0;
  EXPECT_TRUE(indexer_topk_workspace_size(p, Backend::kCuda, &bytes).ok());
  const Status st = with_workspace(bytes, [&](const ExecutionContext& ctx) { return indexer_topk(p, ctx); });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return {indices.download(), values.download()};
}

std::string describe(const PagedSpec& s, int K) {
  return std::string(tools::to_string(s.dist)) + " B=" + std::to_string(s.B) + " next_n=" + std::to_string(s.next_n) +
         " H=" + std::to_string(s.H) + " bs=" + std::to_string(s.block_size) +
         (s.lens_per_token ? " per-token" : "") +
         (s.min_table_blocks > 0 ? " table=" + std::to_string(s.min_table_blocks) + " blocks" : "") +
         " K=" + std::to_string(K) + " seed=" + std::to_string(s.seed);
}

// An any-tie result against the deterministic one (`want`, sorted, values):
// each row holds min(K, len) distinct positions in [0, len) and then -1
// (values -inf); a returned position the deterministic row holds has its
// value, bit for bit, unless either is NaN; any other returned position,
// and any position of the deterministic row not returned, ties with the K-th
// score (score keys equal, so NaN ties with -inf). A NaN score's value is
// the route's: stages that keep score keys report -inf, those that read the
// scores NaN (the bar selection's stored rows too are selected from score
// keys: -inf); both rank as -inf.
void expect_valid_any(const tools::IndexerProblem& view, const Result& any, const Result& want, int K) {
  for (std::int64_t r = 0; r < view.T; ++r) {
    const std::int64_t len = view.ke[r] - view.ks[r];
    const std::int64_t n = std::min<std::int64_t>(K, len);
    std::vector<std::pair<std::int32_t, float>> ref;
    for (std::int64_t i = 0; i < n; ++i) ref.emplace_back(want.indices[r * K + i], want.values[r * K + i]);
    const std::uint32_t kth = n > 0 ? score_key(ref.back().second) : 0;
    std::sort(ref.begin(), ref.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<bool> seen(static_cast<std::size_t>(std::max<std::int64_t>(len, 0)), false);
    std::vector<bool> matched(ref.size(), false);
    for (std::int64_t i = 0; i < K; ++i) {
      const std::int32_t idx = any.indices[r * K + i];
      const float val = any.values[r * K + i];
      if (i >= n) {
        ASSERT_EQ(idx, -1) << "row " << r << " slot " << i;
        ASSERT_EQ(score_key(val), score_key(-INFINITY)) << "row " << r << " slot " << i;
        continue;
      }
      ASSERT_TRUE(idx >= 0 && idx < len) << "row " << r << " slot " << i << ": " << idx << " of " << len;
      ASSERT_FALSE(seen[static_cast<std::size_t>(idx)]) << "row " << r << ": position " << idx << " twice";
      seen[static_cast<std::size_t>(idx)] = true;
      const auto at = std::lower_bound(ref.begin(), ref.end(), std::make_pair(idx, -INFINITY),
                                       [](const auto& a, const auto& b) { return a.first < b.first; });
      if (at != ref.end() && at->first == idx) {
        if (std::isnan(at->second) || std::isnan(val)) {  // NaN and -inf: the same key
          ASSERT_EQ(score_key(val), score_key(at->second)) << "row " << r << " position " << idx << ": a NaN score";
        } else {
          ASSERT_EQ(std::memcmp(&at->second, &val, sizeof(float)), 0) << "row " << r << " position " << idx;
        }
        matched[static_cast<std::size_t>(at - ref.begin())] = true;
      } else {
        ASSERT_EQ(score_key(val), kth) << "row " << r << " position " << idx << ": not a tie with the K-th score";
      }
    }
    for (std::size_t j = 0; j < ref.size(); ++j) {
      if (!matched[j]) {
        ASSERT_EQ(score_key(ref[j].second), kth) << "row " << r << ": position " << ref[j].first << " missing";
      }
    }
  }
}

// Paged (deterministic, sorted, values) == prefill on the contiguous view, bit
// for bit; physical slots are the positions mapped through the table; any
// ties give a valid top K (expect_valid_any).
void expect_problem_matches_prefill(const PagedProblem& p, int K) {
  const DevicePaged d(p);
  const tools::IndexerProblem view = tools::contiguous_view(p);
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  const Result paged = run_paged(d, det, false, true);
  const Result want = run_prefill(view, det);
  ASSERT_EQ(paged.indices, want.indices);
  ASSERT_EQ(paged.values.size(), want.values.size());
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    ASSERT_EQ(std::memcmp(&paged.values[i], &want.values[i], sizeof(float)), 0) << "slot " << i;
  }
  const Result slots = run_paged(d, det, true, false);
  const std::int64_t rows = p.B * p.next_n;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < K; ++i) {
      const std::int32_t pos = want.indices[r * K + i];
      const std::int32_t expect = pos < 0 ? -1 : tools::physical_slot(p, r / p.next_n, pos);
      ASSERT_EQ(slots.indices[r * K + i], expect) << "row " << r << " slot " << i;
    }
  }
  expect_valid_any(view, run_paged(d, make_options(K), false, true), want, K);
}

void expect_matches_prefill(const PagedSpec& s, int K) {
  SCOPED_TRACE(describe(s, K));
  expect_problem_matches_prefill(tools::make_paged_problem(s), K);
}

std::vector<std::int32_t> ragged(int n, std::int32_t lo, std::int32_t hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> len(lo, hi);
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  for (auto& v : out) v = len(rng);
  return out;
}

// indexer_topk_paged(first's shape, options) captured once in a CUDA graph
// (ranges unchecked, as engines run it), then replayed for each problem in
// `replays` with its data uploaded into the same buffers: check(problem,
// result) after each replay (indices, and values). A pinned route
// (`hooks`) is captured through the decode launcher instead of the API.
template <class Check>
void expect_graph_replays(const PagedProblem& first, const SelectOptions& options,
                          std::initializer_list<const PagedProblem*> replays, Check check,
                          const decode::PagedHooks& hooks = {}) {
  const int K = options.k;
  const bool pinned = hooks.route != decode::PagedHooks::Route::kByShape;
  DevicePaged d(first);
  DeviceArray<std::int32_t> indices(static_cast<std::size_t>(first.rows()) * K);
  DeviceArray<float> values(static_cast<std::size_t>(first.rows()) * K);
  const PagedIndexerTopkParams p = d.params(indices.get(), values.get(), options, false);
  std::size_t bytes = 0;
  if (pinned) {
    bytes = decode::paged_workspace_size(p, hooks);
  } else {
    ASSERT_TRUE(indexer_topk_paged_workspace_size(p, Backend::kCuda, &bytes).ok());
  }
  DeviceArray<std::uint8_t> ws(std::max<std::size_t>(bytes, 1));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  ctx.stream = stream;
  ctx.workspace = ws.get();
  ctx.workspace_bytes = bytes;
  ctx.check_ranges = false;
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status st =
      pinned ? decode::launch_indexer_topk_paged(p, stream, ws.get(), bytes, hooks) : indexer_topk_paged(p, ctx);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.to_string();
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const PagedProblem* now : replays) {
    d.q.upload(now->q);
    d.cache.upload(now->kv_cache);
    d.table.upload(now->block_table);
    d.lens.upload(now->context_lens);
    d.w.upload(now->w);
    indices.poison();
    values.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    check(*now, Result{indices.download(), values.download()});
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeGpu, PagedMatchesPrefillEveryBlockSizeAndNextN) {
  for (int bs : {16, 32, 64, 128}) {
    for (int next_n : {1, 2, 4, 8}) {
      expect_matches_prefill(paged_spec(Distribution::kModelLike, 3, next_n, 64, bs, {5000, 2047 + next_n, 1}, false, 11),
                             2048);
    }
  }
}

TEST(DecodeGpu, PagedMatchesPrefillHeadsDistributionsAndK) {
  std::uint64_t seed = 100;
  for (Distribution dist : tools::all_distributions()) {
    for (int H : {32, 64}) {
      for (int K : {512, 2048}) {
        expect_matches_prefill(paged_spec(dist, 5, 2, H, 64, ragged(5, 0, 9000, seed), false, seed), K);
        ++seed;
      }
    }
  }
}

TEST(DecodeGpu, PagedLengthsAroundKAndPerToken) {
  // Per-token lengths: 0, 1, K-1, K, K+1 and longer, in one batch.
  expect_matches_prefill(paged_spec(Distribution::kModelLike, 3, 2, 64, 64, {0, 1, 2047, 2048, 2049, 20000}, true, 7), 2048);
  expect_matches_prefill(paged_spec(Distribution::kTies, 2, 4, 64, 32, {511, 512, 513, 0, 1, 1000, 3000, 2}, true, 8), 512);
  // 1-D lengths shorter than next_n: the first rows are empty.
  expect_matches_prefill(paged_spec(Distribution::kDeadRelu, 4, 4, 64, 16, {0, 1, 3, 4}, false, 9), 1024);
}

TEST(DecodeGpu, PagedLongContextAndManyRequests) {
  expect_matches_prefill(paged_spec(Distribution::kModelLike, 2, 1, 64, 64, {200000, 70000}, false, 21), 2048);
  expect_matches_prefill(paged_spec(Distribution::kShifted, 37, 1, 64, 64, ragged(37, 0, 12000, 22), false, 22), 2048);
}

// The fused selection pinned where the plan's speed rule would not take it
// (contexts of up to 40K keys, 900 select CTAs; 2, 4 and 8 tokens a request,
// 1-D and 2-D lengths, around K and past a cluster's 128K): every
// distribution gives a valid any-tie top K. Pinned where the select kernel
// cannot take the call (three tokens a request: padded rows), the launch is
// an invalid argument and writes nothing.
TEST(DecodeGpu, FusedSelectPinnedAtAnyShape) {
  const decode::PagedHooks pinned{decode::PagedHooks::Route::kFusedSelect};
  const int K = 2048;
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  std::uint64_t seed = 500;
  std::vector<PagedSpec> specs;
  for (Distribution dist : tools::all_distributions()) {
    specs.push_back(paged_spec(dist, 40, 1, 64, 64, ragged(40, 0, 40000, seed), false, seed));
    ++seed;
  }
  specs.push_back(paged_spec(Distribution::kModelLike, 300, 1, 64, 16, ragged(300, 1000, 20000, seed), false, seed));
  ++seed;
  specs.push_back(paged_spec(Distribution::kModelLike, 3, 2, 64, 64, {140000, 2049, 30000}, false, seed++));
  specs.push_back(paged_spec(Distribution::kTies, 2, 2, 64, 32, {40000, 2050}, false, seed++));
  specs.push_back(paged_spec(Distribution::kDeadRelu, 2, 4, 64, 64, {9000, 2051}, false, seed++));
  specs.push_back(paged_spec(Distribution::kShifted, 1, 8, 64, 16, {20000}, false, seed++));
  specs.push_back(
      paged_spec(Distribution::kModelLike, 3, 2, 64, 64, {2047, 2048, 0, 2049, 131072, 131073}, true, seed++));
  specs.push_back(paged_spec(Distribution::kModelLike, 2, 4, 64, 16, ragged(8, 0, 12000, seed), true, seed));
  for (const PagedSpec& s : specs) {
    SCOPED_TRACE(describe(s, K));
    const PagedProblem p = tools::make_paged_problem(s);
    const DevicePaged d(p);
    const tools::IndexerProblem view = tools::contiguous_view(p);
    Status st;
    const Result any = run_paged_pinned(d, make_options(K), pinned, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_valid_any(view, any, run_prefill(view, det), K);
  }
  const PagedProblem three =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 3, 64, 64, {5000, 9000, 3}, false, 7));
  const DevicePaged d(three);
  Status st;
  const Result none = run_paged_pinned(d, make_options(K), pinned, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  std::int32_t poison = 0;
  std::memset(&poison, testing::kPoison, sizeof(poison));
  for (std::int32_t v : none.indices) ASSERT_EQ(v, poison);
}

// The math-only control (bench's math ms): the scoring launches of every
// block width and head count run to completion and write no output.
TEST(DecodeGpu, MathOnlyControlWritesNothing) {
  const decode::PagedHooks control{decode::PagedHooks::Route::kMathOnly};
  std::int32_t poison = 0;
  std::memset(&poison, testing::kPoison, sizeof(poison));
  std::uint64_t seed = 900;
  for (int heads : {32, 64}) {
    for (int next_n : {1, 2, 4}) {
      const PagedSpec s =
          paged_spec(Distribution::kModelLike, 5, next_n, heads, 64, ragged(5, 0, 9000, seed), false, seed);
      ++seed;
      SCOPED_TRACE(describe(s, 512));
      const PagedProblem p = tools::make_paged_problem(s);
      const DevicePaged d(p);
      Status st;
      const Result r = run_paged_pinned(d, make_options(512), control, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (std::int32_t v : r.indices) ASSERT_EQ(v, poison);
    }
  }
}

// A model-like problem of three one-token requests (140000, 9000 and 4000
// keys) with NaN and Inf scores planted through the keys' scales: more NaN
// scores than K in one row, +inf ones, a row with fewer finite scores than
// K, and -inf ones.
PagedProblem with_non_finite_scores(std::uint64_t seed) {
  PagedProblem p =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 1, 64, 64, {140000, 9000, 4000}, false, seed));
  const std::size_t block_bytes = p.kv_cache.size() / static_cast<std::size_t>(p.num_blocks);
  const auto plant = [&](std::int64_t b, std::int32_t from, std::int32_t to, float scale) {
    for (std::int32_t pos = from; pos < to; ++pos) {
      const std::int32_t block = p.block_table[b * p.block_table_stride + pos / p.block_size];
      const std::size_t at = static_cast<std::size_t>(block) * block_bytes +
                             static_cast<std::size_t>(p.block_size) * p.D + (pos % p.block_size) * sizeof(float);
      std::memcpy(p.kv_cache.data() + at, &scale, sizeof(float));
    }
  };
  plant(0, 100, 3100, NAN);
  plant(0, 50000, 50020, INFINITY);
  plant(1, 0, 8000, NAN);
  plant(2, 10, 20, -INFINITY);
  return p;
}

// One token a request, 64 heads: the calls the streaming and the bar
// selections take.
PagedProblem one_token(Distribution dist, std::int64_t B, int bs, std::vector<std::int32_t> lens,
                       std::uint64_t seed) {
  return tools::make_paged_problem(paged_spec(dist, B, 1, 64, bs, std::move(lens), false, seed));
}

// check(problem, K) over every distribution, K 512-2048 and blocks of 16 and
// 64 (seeds from `seed` on): one-token requests of lengths 0, 1, K - 1, K,
// K + 1, then `longer`.
template <class Check>
void over_every_distribution_and_length(std::uint64_t seed, const std::vector<std::int32_t>& longer, Check check) {
  for (Distribution dist : tools::all_distributions()) {
    for (int K : {512, 1024, 2048}) {
      for (int bs : {16, 64}) {
        SCOPED_TRACE(std::string(tools::to_string(dist)) + " K=" + std::to_string(K) + " bs=" + std::to_string(bs));
        std::vector<std::int32_t> lens = {0, 1, K - 1, K, K + 1};
        lens.insert(lens.end(), longer.begin(), longer.end());
        const auto B = static_cast<std::int64_t>(lens.size());
        check(one_token(dist, B, bs, std::move(lens), seed), K);
        ++seed;
      }
    }
  }
}

// The streaming selection (pinned: PagedHooks::Route::kStreamSelect) gives a
// valid any-tie top K with the prefill operator's values, bit for bit.
void expect_stream_select_valid(const PagedProblem& p, int K) {
  const decode::PagedHooks stream{decode::PagedHooks::Route::kStreamSelect};
  const DevicePaged d(p);
  const tools::IndexerProblem view = tools::contiguous_view(p);
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  Status st;
  const Result any = run_paged_pinned(d, make_options(K), stream, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_valid_any(view, any, run_prefill(view, det), K);
}

// Every distribution (ties and dead ReLU cut on equal keys), K 512-2048,
// blocks of 16 and 64, lengths around K and empty rows; rows long enough to
// cut many times in a piece and short enough to merge hundreds of pieces.
TEST(DecodeGpu, StreamSelectEveryDistributionAndLength) {
  over_every_distribution_and_length(600, {5000, 40000, 140000}, expect_stream_select_valid);
}

// Many ragged rows (a CTA's run crosses many rows, rows cross CTAs), a 1M
// context over every CTA (its list merged from ~260 pieces), NaN and Inf.
TEST(DecodeGpu, StreamSelectManyRowsLongContextAndNonFinite) {
  const auto problem = one_token;
  expect_stream_select_valid(problem(Distribution::kModelLike, 300, 16, ragged(300, 0, 20000, 610), 610), 2048);
  expect_stream_select_valid(problem(Distribution::kModelLike, 40, 64, ragged(40, 0, 140000, 611), 611), 2048);
  expect_stream_select_valid(problem(Distribution::kModelLike, 2, 64, {1048576, 300000}, 612), 2048);
  expect_stream_select_valid(problem(Distribution::kDeadRelu, 1, 64, {1048576}, 613), 1024);
  expect_stream_select_valid(with_non_finite_scores(614), 2048);
}

// Small enough for the sanitizers: a cut within a piece (8K keys a row
// over few CTAs), ties, a row of K + 1 keys.
TEST(DecodeGpu, StreamSelectSmall) {
  expect_stream_select_valid(
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 2, 1, 64, 64, {20000, 2049}, false, 620)), 2048);
  expect_stream_select_valid(
      tools::make_paged_problem(paged_spec(Distribution::kTies, 3, 1, 64, 32, {9000, 3000, 513}, false, 621)), 512);
}

// A route pinned where it cannot take the call (two tokens a request) is an
// invalid argument, and nothing is written.
void expect_pinned_two_tokens_rejected(decode::PagedHooks::Route route) {
  const PagedProblem two =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 2, 64, 64, {5000, 9000, 3}, false, 7));
  const DevicePaged d(two);
  Status st;
  const Result none = run_paged_pinned(d, make_options(2048), decode::PagedHooks{route}, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  std::int32_t poison = 0;
  std::memset(&poison, testing::kPoison, sizeof(poison));
  for (std::int32_t v : none.indices) ASSERT_EQ(v, poison);
}

TEST(DecodeGpu, StreamSelectPinnedElsewhereIsRejected) {
  expect_pinned_two_tokens_rejected(decode::PagedHooks::Route::kStreamSelect);
}

// The bar selection (pinned: PagedHooks::Route::kBarSelect) takes every
// option: deterministic sorted results with values are the prefill
// operator's bit for bit (NaN scores are reported as -inf, as the fused
// prefill route reports them, so problems with NaN compare any-tie only),
// and any-tie unsorted ones are a valid top K.
// Both ways of the route's short rows: storing their scores for the
// standalone top-k (the plan's threshold) and keeping entries under a bar
// like the long ones (bar_stored_below = 0).
// The bar route pinned by `bar` over d's rows, in one batch (K 2048, any
// ties): each row's entry count and RowFlag as the call leaves them in its
// workspace.
struct BarRowWords {
  std::vector<std::uint32_t> counts;
  std::vector<std::uint32_t> flags;
};
void run_bar_row_words(const DevicePaged& d, const decode::PagedHooks& bar, BarRowWords* out) {
  const std::int64_t rows = d.host.B;
  DeviceArray<std::int32_t> indices(static_cast<std::size_t>(rows) * 2048);
  const PagedIndexerTopkParams p = d.params(indices.get(), nullptr, make_options(2048), false);
  const decode::PagedPlan plan = decode::make_plan(p, bar);
  ASSERT_TRUE(plan.bar_select);
  ASSERT_EQ(plan.batches.count(), 1);
  DeviceArray<std::uint8_t> ws(plan.workspace.total);
  ASSERT_TRUE(decode::launch_indexer_topk_paged(p, nullptr, ws.get(), plan.workspace.total, bar).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<std::uint8_t> bytes = ws.download();
  const auto words_at = [&](std::size_t at) {
    std::vector<std::uint32_t> v(static_cast<std::size_t>(rows));
    std::memcpy(v.data(), bytes.data() + at, v.size() * sizeof(std::uint32_t));
    return v;
  };
  out->counts = words_at(plan.workspace.bar_state + decode::kBarCount * rows * sizeof(std::uint32_t));
  out->flags = words_at(plan.workspace.bar_flags);
}

void expect_bar_select_valid(const PagedProblem& p, int K, bool bit_exact = true) {
  const DevicePaged d(p);
  const tools::IndexerProblem view = tools::contiguous_view(p);
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  const Result want = run_prefill(view, det);
  for (std::int64_t stored_below : {std::int64_t{-1}, std::int64_t{0}}) {
    SCOPED_TRACE("bar_stored_below " + std::to_string(stored_below));
    const decode::PagedHooks bar{decode::PagedHooks::Route::kBarSelect, stored_below};
    Status st;
    if (bit_exact) {
      const Result got = run_paged_pinned(d, det, bar, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(got.indices, want.indices);
      for (std::size_t i = 0; i < want.values.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got.values[i], &want.values[i], sizeof(float)), 0) << "slot " << i;
      }
    }
    const Result any = run_paged_pinned(d, make_options(K), bar, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_valid_any(view, any, want, K);
  }
}

// Every distribution (ties and dead ReLU keep a whole row under one bar:
// every key is an entry, which the row's area holds), K 512-2048, blocks of 16
// and 64, lengths around K, empty rows, rows long enough for the bar to
// rise many times in a piece.
TEST(DecodeGpu, BarSelectEveryDistributionAndLength) {
  over_every_distribution_and_length(700, {5000, 40000, 140000, 400000},
                                     [](const PagedProblem& p, int K) { expect_bar_select_valid(p, K); });
}

// Many ragged rows (a CTA's run crosses many rows, rows cross CTAs), large
// batches of long rows (where it is faster), a 1M context over every CTA
// (its pieces' bars rise apart), NaN and Inf.
TEST(DecodeGpu, BarSelectManyRowsLongContextAndNonFinite) {
  const auto problem = one_token;
  expect_bar_select_valid(problem(Distribution::kModelLike, 300, 16, ragged(300, 0, 20000, 710), 710), 2048);
  const PagedProblem many_long = problem(Distribution::kModelLike, 140, 64, ragged(140, 100000, 140000, 711), 711);
  expect_bar_select_valid(many_long, 2048);
  // The shape the operator routes to the bar selection by itself (positions;
  // physical slots take the unfused route).
  ASSERT_TRUE(decode::make_plan(many_long.params(nullptr, nullptr, make_options(2048), false)).bar_select);
  expect_problem_matches_prefill(many_long, 2048);
  // Short and long rows in one batch: those under kBarStoredBelowKeys keys
  // store their scores, the others keep entries (and, with the threshold at
  // 0, every row keeps entries); by shape too (a 128K table over them).
  std::vector<std::int32_t> lens = ragged(136, 0, 131072, 716);
  lens[0] = 131072;
  const PagedProblem mixed = problem(Distribution::kModelLike, 136, 64, lens, 716);
  expect_bar_select_valid(mixed, 2048);
  const decode::PagedPlan plan = decode::make_plan(mixed.params(nullptr, nullptr, make_options(2048), false));
  ASSERT_TRUE(plan.bar_select);
  ASSERT_EQ(plan.bar_stored_below, decode::kBarStoredBelowKeys);
  expect_problem_matches_prefill(mixed, 2048);
  expect_bar_select_valid(problem(Distribution::kShifted, 136, 64, ragged(136, 60000, 131072, 712), 712), 1024);
  expect_bar_select_valid(problem(Distribution::kModelLike, 2, 64, {1048576, 300000}, 713), 2048);
  expect_bar_select_valid(problem(Distribution::kDeadRelu, 1, 64, {1048576}, 714), 1024);
  expect_bar_select_valid(with_non_finite_scores(715), 2048, /*bit_exact=*/false);
}

// Small enough for the sanitizers, long enough that each CTA's piece
// (~1.5K keys) raises its bar at K = 512; ties (a row that keeps every key);
// shifted scores (a row that zooms into its bin).
TEST(DecodeGpu, BarSelectSmall) {
  expect_bar_select_valid(
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 2, 1, 64, 64, {200000, 2049}, false, 720)), 512);
  expect_bar_select_valid(
      tools::make_paged_problem(paged_spec(Distribution::kTies, 3, 1, 64, 32, {90000, 3000, 513}, false, 721)), 512);
  expect_bar_select_valid(
      tools::make_paged_problem(paged_spec(Distribution::kShifted, 2, 1, 64, 64, {150000, 4000}, false, 722)), 512);
}

// Rows whose scores crowd into one 12-bit bin (shifted scores: every key
// within ~0.2 % of the others) zoom into it, so their bars rise inside the
// bin: exact, and where the route is faster (a row in one or two CTAs' pieces)
// no row keeps more than a quarter of its keys. Without the zoom every key
// of such a row stays at or above its bar.
TEST(DecodeGpu, BarSelectCrowdedRowsZoomInsteadOfRepair) {
  constexpr std::int64_t kRows = 136;
  const PagedProblem problem =
      one_token(Distribution::kShifted, kRows, 64, std::vector<std::int32_t>(kRows, 131072), 730);
  expect_bar_select_valid(problem, 2048);
  const DevicePaged d(problem);
  BarRowWords words;
  ASSERT_NO_FATAL_FAILURE(run_bar_row_words(d, decode::PagedHooks{decode::PagedHooks::Route::kBarSelect}, &words));
  for (std::int64_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(words.flags[r], kRowDone) << "row " << r;
    EXPECT_LE(words.counts[r], 131072u / 4) << "row " << r << " kept " << words.counts[r] << " entries";
  }
}

// A long row whose query is zero (the ties generator's every fourth row)
// scores 0 at every key, one tie no bar cuts: the zero kernel flags it to
// store its scores, as a short row does, where as entries it would keep the
// whole row. With bar_stored_below = 0 (no row stores) it keeps entries.
TEST(DecodeGpu, BarSelectZeroQueryRowsStoreTheirScores) {
  constexpr std::int64_t kRows = 8;
  const PagedProblem problem =
      one_token(Distribution::kTies, kRows, 64, std::vector<std::int32_t>(kRows, 70000), 740);
  expect_bar_select_valid(problem, 2048);
  const DevicePaged d(problem);
  for (std::int64_t stored_below : {std::int64_t{-1}, std::int64_t{0}}) {
    SCOPED_TRACE("bar_stored_below " + std::to_string(stored_below));
    BarRowWords words;
    ASSERT_NO_FATAL_FAILURE(
        run_bar_row_words(d, decode::PagedHooks{decode::PagedHooks::Route::kBarSelect, stored_below}, &words));
    for (std::int64_t r = 0; r < kRows; ++r) {
      const bool zero_query = r % 4 == 3;
      EXPECT_EQ(words.flags[r], zero_query && stored_below != 0 ? kRowStored : kRowDone) << "row " << r;
    }
  }
}

TEST(DecodeGpu, BarSelectPinnedElsewhereIsRejected) {
  expect_pinned_two_tokens_rejected(decode::PagedHooks::Route::kBarSelect);
}

// Many short ragged requests: a CTA's run crosses many units of one to
// eleven tiles, so one of the two key producers often has no tile in a unit
// and the unit slots are reused many times (the producers' arrivals on them).
TEST(DecodeGpu, PagedManyShortRequestsAcrossUnits) {
  expect_matches_prefill(paged_spec(Distribution::kModelLike, 400, 1, 64, 64, ragged(400, 0, 700, 41), false, 41), 512);
  expect_matches_prefill(paged_spec(Distribution::kTies, 300, 2, 64, 16, ragged(300, 0, 700, 42), false, 42), 512);
}

// The fused selection (one token a request, H = 64, any ties, unsorted
// positions, contexts of 128K keys and more, few rows): every distribution
// at lengths around K and long ones, ragged in one batch; its candidates'
// overflow (ties, dead ReLU) goes through the scores.
TEST(DecodeGpu, FusedSelectEveryDistributionAndLength) {
  std::uint64_t seed = 300;
  for (Distribution dist : tools::all_distributions()) {
    for (int K : {512, 2048}) {
      for (int bs : {16, 64}) {
        expect_matches_prefill(
            paged_spec(dist, 8, 1, 64, bs, {0, 1, K - 1, K, K + 1, 5000, 40000, 140000}, false, seed), K);
        ++seed;
      }
    }
  }
}

// Small enough for the sanitizers, long enough for the fused route: ties
// (all-zero queries score every key alike, a bin that overflows the
// candidates), a row of K + 1 keys, model-like rows.
TEST(DecodeGpu, FusedSelectSmall) {
  expect_matches_prefill(paged_spec(Distribution::kTies, 3, 1, 64, 64, {131072, 3000, 513}, false, 301), 512);
  expect_matches_prefill(paged_spec(Distribution::kModelLike, 2, 1, 64, 32, {131072, 2049}, false, 302), 2048);
}

TEST(DecodeGpu, FusedSelectManyRowsAndLongContext) {
  std::vector<std::int32_t> lens = ragged(14, 0, 140000, 310);
  lens[0] = 140000;  // 14 rows of 18 parts: 252 CTAs
  expect_matches_prefill(paged_spec(Distribution::kModelLike, 14, 1, 64, 64, lens, false, 310), 2048);
  expect_matches_prefill(paged_spec(Distribution::kTies, 14, 1, 64, 64, lens, false, 311), 1024);
  expect_matches_prefill(paged_spec(Distribution::kModelLike, 2, 1, 64, 64, {1048576, 300000}, false, 312), 2048);
  expect_matches_prefill(paged_spec(Distribution::kDeadRelu, 1, 1, 64, 64, {1048576}, false, 313), 2048);
}

// Short rows under an engine's wide table: the select kernel's parts are
// sized by the table (16 parts, one cluster a row, at 128K keys; 20
// independent parts at 160K), so most of a short row's parts hold no key
// and exit at once, uncounted. Any distribution; rows around K, of one part,
// of a part and a key, and one as long as the table. The first problem is
// the route the plan takes by shape; the second is pinned (320 CTAs).
TEST(DecodeGpu, FusedSelectShortRowsUnderAWideTable) {
  const int K = 2048;
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  std::uint64_t seed = 340;
  for (Distribution dist : tools::all_distributions()) {
    PagedSpec wide = paged_spec(dist, 6, 1, 64, 64, {4096, 16384, 2049, 8192, 8193, 131072}, false, seed++);
    wide.min_table_blocks = 131072 / 64;
    SCOPED_TRACE(describe(wide, K));
    const PagedProblem p = tools::make_paged_problem(wide);
    const DevicePaged d(p);
    ASSERT_TRUE(decode::make_plan(d.params(nullptr, nullptr, make_options(K), false)).fused_select);
    const tools::IndexerProblem view = tools::contiguous_view(p);
    expect_valid_any(view, run_paged(d, make_options(K), false, true), run_prefill(view, det), K);
  }
  PagedSpec wider = paged_spec(Distribution::kModelLike, 16, 1, 64, 16, ragged(16, 0, 30000, seed), false, seed);
  wider.min_table_blocks = 163840 / 16;
  SCOPED_TRACE(describe(wider, K));
  const PagedProblem p = tools::make_paged_problem(wider);
  const DevicePaged d(p);
  const tools::IndexerProblem view = tools::contiguous_view(p);
  Status st;
  const decode::PagedHooks fused{decode::PagedHooks::Route::kFusedSelect};
  const Result any = run_paged_pinned(d, make_options(K), fused, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_valid_any(view, any, run_prefill(view, det), K);
}

// NaN and Inf scores (planted key scales) rank as the contract says on the
// fused selection too: NaN as -inf, +inf above everything.
TEST(DecodeGpu, FusedSelectNonFiniteScores) {
  expect_problem_matches_prefill(with_non_finite_scores(320), 2048);
}

// The fused selection under a CUDA graph, replayed with new lengths (across K
// too), queries, weights and keys in the same buffers.
TEST(DecodeGpu, FusedSelectGraphReplay) {
  const int K = 2048;
  const PagedProblem a =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 1, 64, 64, {30000, 2500, 140000}, false, 330));
  // b: a ties problem of the same shape, its blocks moved to where a's table
  // puts them (the graph holds a's table).
  const PagedProblem ties =
      tools::make_paged_problem(paged_spec(Distribution::kTies, 3, 1, 64, 64, {30000, 2500, 140000}, false, 331));
  PagedProblem b = a;
  b.q = ties.q;
  b.w = ties.w;
  b.context_lens = {1000, 2049, 135000};
  const std::size_t block_bytes = a.kv_cache.size() / static_cast<std::size_t>(a.num_blocks);
  for (std::int64_t r = 0; r < a.B; ++r) {
    for (std::int64_t e = 0; e < a.max_blocks_per_seq; ++e) {
      const std::int32_t from = ties.block_table[r * ties.block_table_stride + e];
      const std::int32_t to = a.block_table[r * a.block_table_stride + e];
      if (from < 0 || from >= ties.num_blocks || to < 0 || to >= a.num_blocks) continue;
      std::copy_n(ties.kv_cache.begin() + from * block_bytes, block_bytes, b.kv_cache.begin() + to * block_bytes);
    }
  }
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  expect_graph_replays(a, make_options(K), {&a, &b, &a, &b}, [&](const PagedProblem& now, const Result& got) {
    const tools::IndexerProblem view = tools::contiguous_view(now);
    expect_valid_any(view, got, run_prefill(view, det), K);
  });
}

// The bar selection under a CUDA graph (pinned), replayed with new lengths,
// queries, weights and keys in the same buffers: its zeroed state, floors
// and flags (a replay whose row keeps every key, then one whose rows do
// not; a row that keeps entries, then stores its scores over its area, then
// keeps entries again) start fresh on every replay.
TEST(DecodeGpu, BarSelectGraphReplay) {
  const int K = 1024;
  const PagedProblem a =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 1, 64, 64, {90000, 2500, 140000}, false, 332));
  // b: a's keys, other lengths (the first row short enough to store its
  // scores, where a's kept entries), and a zero query for the last request
  // (a ties problem's fourth row): all its scores tie, so it keeps every
  // key.
  const PagedProblem ties =
      tools::make_paged_problem(paged_spec(Distribution::kTies, 4, 1, 64, 64, {90000, 2500, 140000, 1}, false, 333));
  PagedProblem b = a;
  const std::size_t q_row = b.q.size() / 3;
  std::copy_n(ties.q.begin() + 3 * q_row, q_row, b.q.begin() + 2 * q_row);
  b.context_lens = {29000, 2049, 135000};
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  const decode::PagedHooks bar{decode::PagedHooks::Route::kBarSelect};
  expect_graph_replays(
      a, det, {&a, &b, &a, &b},
      [&](const PagedProblem& now, const Result& got) {
        const Result want = run_prefill(tools::contiguous_view(now), det);
        EXPECT_EQ(got.indices, want.indices);
        for (std::size_t i = 0; i < want.values.size(); ++i) {
          ASSERT_EQ(std::memcmp(&got.values[i], &want.values[i], sizeof(float)), 0) << "slot " << i;
        }
      },
      bar);
}

TEST(DecodeGpu, PagedDeterministicAcrossRunsAndBatches) {
  const PagedSpec s = paged_spec(Distribution::kTies, 6, 2, 64, 64, ragged(6, 100, 9000, 31), false, 31);
  const PagedProblem p = tools::make_paged_problem(s);
  const DevicePaged d(p);
  const SelectOptions det = make_options(2048, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  const Result first = run_paged(d, det, false, true);
  for (int run = 0; run < 3; ++run) EXPECT_EQ(run_paged(d, det, false, true).indices, first.indices);
  // The first three requests alone (another batch composition, another
  // grid split) get the same rows.
  PagedProblem sub = p;
  sub.B = 3;
  sub.q.resize(static_cast<std::size_t>(sub.B * sub.next_n * sub.H * sub.D));
  sub.w.resize(static_cast<std::size_t>(sub.B * sub.next_n * sub.H));
  sub.block_table.resize(static_cast<std::size_t>(sub.B * sub.block_table_stride));
  sub.context_lens.resize(static_cast<std::size_t>(sub.B));
  const Result alone = run_paged(DevicePaged(sub), det, false, true);
  const std::size_t n = static_cast<std::size_t>(sub.B * sub.next_n * 2048);
  EXPECT_EQ(alone.indices, std::vector<std::int32_t>(first.indices.begin(), first.indices.begin() + n));
  EXPECT_EQ(std::memcmp(alone.values.data(), first.values.data(), n * sizeof(float)), 0);
}

TEST(DecodeGpu, PagedGraphReplayWithNewLengthsAndTables) {
  const int K = 2048;
  const PagedProblem a =
      tools::make_paged_problem(paged_spec(Distribution::kModelLike, 4, 2, 64, 64, {3000, 9000, 100, 6000}, false, 41));
  // The same buffers with new data: other lengths (within each request's
  // blocks), the blocks relabelled (block i's bytes moved to block nb-1-i and
  // the table rewritten), other queries and weights.
  PagedProblem b = a;
  b.context_lens = {2049, 8000, 1, 5000};
  const std::size_t block_bytes = a.kv_cache.size() / static_cast<std::size_t>(a.num_blocks);
  for (std::int64_t i = 0; i < a.num_blocks; ++i) {
    std::copy_n(a.kv_cache.begin() + i * block_bytes, block_bytes,
                b.kv_cache.begin() + (a.num_blocks - 1 - i) * block_bytes);
  }
  for (auto& e : b.block_table) {
    if (e >= 0 && e < a.num_blocks) e = static_cast<std::int32_t>(a.num_blocks - 1 - e);
  }
  std::reverse(b.q.begin(), b.q.end());
  std::reverse(b.w.begin(), b.w.end());
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  expect_graph_replays(a, det, {&a, &b, &a}, [&](const PagedProblem& now, const Result& got) {
    EXPECT_EQ(got.indices, run_prefill(tools::contiguous_view(now), det).indices);
  });
}

TEST(DecodeGpu, UncheckedBadInputStaysInBounds) {
  PagedProblem p = tools::make_paged_problem(paged_spec(Distribution::kModelLike, 3, 1, 64, 64, {3000, 5000, 700}, false, 51));
  // Table entries outside [0, num_blocks), a negative length, one past the table.
  p.block_table[0] = -5;
  p.block_table[1] = static_cast<std::int32_t>(p.num_blocks) + 100;
  p.context_lens[1] = -7;
  p.context_lens[2] = static_cast<std::int32_t>(p.max_blocks_per_seq * p.block_size) + 999;
  const DevicePaged d(p);
  const SelectOptions det = make_options(2048, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  // Checked: rejected, nothing written.
  {
    DeviceArray<std::int32_t> indices(3 * 2048);
    indices.poison();
    const PagedIndexerTopkParams prm = d.params(indices.get(), nullptr, det, false);
    std::size_t bytes = 0;
    ASSERT_TRUE(indexer_topk_paged_workspace_size(prm, Backend::kCuda, &bytes).ok());
    const Status st = with_workspace(bytes, [&](const ExecutionContext& ctx) { return indexer_topk_paged(prm, ctx); });
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    const std::vector<std::int32_t> out = indices.download();
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::int32_t v) {
      std::int32_t poison;
      std::memset(&poison, testing::kPoison, sizeof(poison));
      return v == poison;
    }));
  }
  // Unchecked: runs, every index -1 or inside the clamped row.
  const Result r = run_paged(d, det, false, false, /*check_ranges=*/false);
  const std::int64_t max_len = p.max_blocks_per_seq * p.block_size;
  for (std::int64_t row = 0; row < 3; ++row) {
    const std::int64_t len = std::clamp<std::int64_t>(p.context_lens[row], 0, max_len);
    for (int i = 0; i < 2048; ++i) {
      const std::int32_t v = r.indices[row * 2048 + i];
      EXPECT_TRUE(v == -1 || (v >= 0 && v < len)) << "row " << row << " slot " << i << ": " << v;
    }
  }
}

TEST(DecodeGpu, PagedTooSmallWorkspaceIsRejected) {
  const PagedProblem p = tools::make_paged_problem(paged_spec(Distribution::kModelLike, 2, 1, 64, 64, {3000, 100}, false, 61));
  const DevicePaged d(p);
  DeviceArray<std::int32_t> indices(2 * 2048);
  const PagedIndexerTopkParams prm = d.params(indices.get(), nullptr, make_options(2048), false);
  std::size_t bytes = 0;
  ASSERT_TRUE(indexer_topk_paged_workspace_size(prm, Backend::kCuda, &bytes).ok());
  ASSERT_GT(bytes, 256u);
  const Status st = with_workspace(bytes - 256, [&](const ExecutionContext& ctx) { return indexer_topk_paged(prm, ctx); });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ctx.workspace"), std::string::npos) << st.message();
}

// ----------------------------------------------------------------- merge ---

struct MergeInput {
  std::int64_t P, R, part_k;
  std::vector<float> values;
  std::vector<std::int32_t> indices;
};

// Parts of disjoint index sets per row; values with ties across parts, NaN,
// -inf, and empty slots.
MergeInput merge_input(std::int64_t P, std::int64_t R, std::int64_t part_k, std::uint64_t seed) {
  MergeInput m{P, R, part_k, {}, {}};
  std::mt19937_64 rng(seed);
  m.values.resize(static_cast<std::size_t>(P * R * part_k));
  m.indices.resize(m.values.size());
  for (std::int64_t r = 0; r < R; ++r) {
    std::vector<std::int32_t> pool(static_cast<std::size_t>(P * part_k));
    for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::int32_t>(i * 3 + (r % 3));
    std::shuffle(pool.begin(), pool.end(), rng);
    for (std::int64_t p = 0; p < P; ++p) {
      for (std::int64_t i = 0; i < part_k; ++i) {
        const std::size_t at = static_cast<std::size_t>((p * R + r) * part_k + i);
        const std::uint64_t u = rng() % 100;
        m.indices[at] = u < 10 ? -1 : pool[static_cast<std::size_t>(p * part_k + i)];
        m.values[at] = u < 13   ? std::nanf("")
                       : u < 16 ? -INFINITY
                       : u < 50 ? static_cast<float>(rng() % 8)  // ties
                                : std::ldexp(static_cast<float>(rng() % 100000), -10);
      }
    }
  }
  return m;
}

Result run_merge(const MergeInput& m, const SelectOptions& options, Backend backend) {
  MergeTopkParams p;
  p.num_parts = m.P;
  p.num_rows = m.R;
  p.part_k = m.part_k;
  p.options = options;
  Result out{std::vector<std::int32_t>(static_cast<std::size_t>(m.R) * options.k),
             std::vector<float>(static_cast<std::size_t>(m.R) * options.k)};
  if (backend == Backend::kCpu) {
    p.values = m.values.data();
    p.indices = m.indices.data();
    p.out_indices = out.indices.data();
    p.out_values = out.values.data();
    ExecutionContext ctx;
    const Status st = merge_topk(p, ctx);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  }
  DeviceArray<float> values(m.values), out_values(out.values.size());
  DeviceArray<std::int32_t> indices(m.indices), out_indices(out.indices.size());
  out_indices.poison();
  p.values = values.get();
  p.indices = indices.get();
  p.out_indices = out_indices.get();
  p.out_values = out_values.get();
  std::size_t bytes = 0;
  EXPECT_TRUE(merge_topk_workspace_size(p, Backend::kCuda, &bytes).ok());
  const Status st = with_workspace(bytes, [&](const ExecutionContext& ctx) { return merge_topk(p, ctx); });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return {out_indices.download(), out_values.download()};
}

// merge_topk on CUDA and on the CPU backend: identical indices, and values
// identical bit for bit (both return the values as given).
void expect_merge_matches_cpu(const MergeInput& m, const SelectOptions& o) {
  const Result gpu = run_merge(m, o, Backend::kCuda);
  const Result cpu = run_merge(m, o, Backend::kCpu);
  ASSERT_EQ(gpu.indices, cpu.indices);
  for (std::size_t i = 0; i < cpu.values.size(); ++i) {
    ASSERT_EQ(std::memcmp(&gpu.values[i], &cpu.values[i], sizeof(float)), 0) << "slot " << i;
  }
}

TEST(DecodeGpu, MergeMatchesCpu) {
  std::uint64_t seed = 1;
  for (std::int64_t P : {1, 2, 3, 8}) {
    for (std::int64_t part_k : {100, 512, 2048, 3000}) {
      for (int K : {512, 2048}) {
        for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
          SCOPED_TRACE("P=" + std::to_string(P) + " part_k=" + std::to_string(part_k) + " K=" + std::to_string(K));
          expect_merge_matches_cpu(merge_input(P, 5, part_k, seed++), make_options(K, ties, IndexBase::kAbsolute, true));
        }
      }
    }
  }
}

// Rows built for the cut of merge_topk's select, one kind a row:
//  0  every entry the same score (the K-th key's ties are the whole row);
//  1  K / 3 entries above a score that more than the remaining 2K / 3 share
//     (the cut falls inside the ties, which span the parts), the rest below;
//  2  NaN and -inf only (NaN ranks as -inf: one tied score, two values);
//  3  every slot empty;
//  4  exactly K non-empty entries (when the row has that many), empty slots
//     between them;
//  5  K + 1 non-empty entries (the least of them is cut);
//  6  +0 and -0 only (equal scores, two values);
//  7  -FLT_MAX, the float below it and -inf (the keys' lowest digits);
//  8  distinct spread scores (the select stops at a digit bin taken whole).
// Indices are distinct in a row, some near INT32_MAX (the inverted index's
// high digits).
constexpr std::int64_t kMergeCutRows = 9;
MergeInput merge_cut_input(std::int64_t P, std::int64_t part_k, int K, std::uint64_t seed) {
  const std::int64_t R = kMergeCutRows, n = P * part_k;
  MergeInput m{P, R, part_k, {}, {}};
  m.values.resize(static_cast<std::size_t>(P * R * part_k));
  m.indices.resize(m.values.size());
  std::mt19937_64 rng(seed);
  for (std::int64_t r = 0; r < R; ++r) {
    // Entry e of the row (part e / part_k, slot e % part_k) in a random order:
    // order[j] is the j-th entry the kinds above hand scores to.
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t e = 0; e < n; ++e) order[e] = e;
    std::shuffle(order.begin(), order.end(), rng);
    const std::int64_t keep = r == 4 ? K : r == 5 ? K + 1 : n;  // non-empty entries
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t e = order[j];
      const std::size_t at = static_cast<std::size_t>(((e / part_k) * R + r) * part_k + e % part_k);
      const auto index = static_cast<std::int32_t>(e % 2 == 0 ? e * 5 + r : 0x7FFFFFFF - e);
      float v = 0.0f;
      switch (r) {
        case 0: v = 1.5f; break;
        case 1: v = j < K / 3 ? 9.0f : j < K / 3 + K ? 2.0f : -1.0f; break;
        case 2: v = j % 2 == 0 ? std::nanf("") : -INFINITY; break;
        case 6: v = j % 2 == 0 ? 0.0f : -0.0f; break;
        case 7: v = j % 3 == 0 ? -FLT_MAX : j % 3 == 1 ? std::nextafter(-FLT_MAX, 0.0f) : -INFINITY; break;
        default: v = std::ldexp(static_cast<float>(rng() % 1000000), -12); break;
      }
      m.values[at] = v;
      m.indices[at] = r == 3 || j >= keep ? -1 : index;
    }
  }
  return m;
}

TEST(DecodeGpu, MergeCutsMatchCpu) {
  std::uint64_t seed = 100;
  for (int K : {512, 1024, 2048}) {
    for (std::int64_t P = 1; P <= 8; ++P) {
      for (std::int64_t part_k : {std::int64_t{1}, std::int64_t{K} / P, std::int64_t{K} - 1, std::int64_t{K},
                                  std::int64_t{K} + 1}) {
        SCOPED_TRACE("P=" + std::to_string(P) + " part_k=" + std::to_string(part_k) + " K=" + std::to_string(K));
        const MergeInput m = merge_cut_input(P, part_k, K, seed++);
        expect_merge_matches_cpu(m, make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true));
      }
    }
  }
}

// Rows around the kernel's shared-memory cache of a row's entries (20480
// 64-bit keys, merge_caches_entries in decode/plan.h): at the limit the row
// is cached, one entry past it the kernel reads the parts from global
// memory on every pass.
TEST(DecodeGpu, MergeCutsAroundTheEntryCacheMatchCpu) {
  std::uint64_t seed = 200;
  for (const auto& [P, part_k] : {std::pair<std::int64_t, std::int64_t>{10, 2048}, {10, 2049}, {11, 2048}, {2, 10241}}) {
    SCOPED_TRACE("P=" + std::to_string(P) + " part_k=" + std::to_string(part_k));
    const MergeInput m = merge_cut_input(P, part_k, 2048, seed++);
    expect_merge_matches_cpu(m, make_options(2048, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true));
    expect_merge_matches_cpu(m, make_options(2048, TieBreak::kAny, IndexBase::kAbsolute, true));
  }
}

// Context parallel on one GPU: each slice's top K with values, merged, is
// the whole range's top K.
TEST(DecodeGpu, MergeOfSlicesIsTheWholeTopK) {
  const int K = 2048;
  const PagedProblem p = tools::make_paged_problem(
      paged_spec(Distribution::kModelLike, 4, 1, 64, 64, {30000, 9000, 2100, 50000}, false, 71));
  const tools::IndexerProblem whole = tools::contiguous_view(p);
  const SelectOptions det = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  const Result want = run_prefill(whole, det);
  constexpr int kSlices = 3;
  MergeInput m{kSlices, whole.T, K, {}, {}};
  for (int s = 0; s < kSlices; ++s) {
    tools::IndexerProblem slice = whole;
    for (std::int64_t t = 0; t < whole.T; ++t) {
      const std::int32_t len = whole.ke[t] - whole.ks[t];
      slice.ks[t] = whole.ks[t] + len * s / kSlices;
      slice.ke[t] = whole.ks[t] + len * (s + 1) / kSlices;
    }
    const Result part = run_prefill(slice, det);  // relative to the slice's start
    for (std::int64_t t = 0; t < whole.T; ++t) {
      for (int i = 0; i < K; ++i) {
        const std::int32_t v = part.indices[t * K + i];
        m.indices.push_back(v < 0 ? -1 : v + slice.ks[t] - whole.ks[t]);
        m.values.push_back(part.values[t * K + i]);
      }
    }
  }
  const Result merged = run_merge(m, det, Backend::kCuda);
  EXPECT_EQ(merged.indices, want.indices);
}

}  // namespace
}  // namespace dsa
