// Contract section 3: every validation rule rejects a bad argument with
// kInvalidArgument, names the argument and the rule, and writes no output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"

namespace dsa {
namespace {

constexpr std::int32_t kPoison = -12345;

// Outputs still poisoned: indices kPoison, values 7.
bool untouched(const std::vector<std::int32_t>& indices, const std::vector<float>& values) {
  return std::all_of(indices.begin(), indices.end(), [](std::int32_t v) { return v == kPoison; }) &&
         std::all_of(values.begin(), values.end(), [](float v) { return v == 7.0f; });
}

// A small valid indexer problem with 16-byte aligned buffers; outputs poisoned.
struct IndexerFixture {
  static constexpr std::int64_t T = 3, N = 40;
  alignas(16) std::uint8_t q[T * 64 * 128];
  alignas(16) std::uint8_t k[N * 128];
  alignas(16) float k_scale[N];
  alignas(16) float w[T * 64];
  alignas(16) std::int32_t ks[T] = {0, 5, 40};
  alignas(16) std::int32_t ke[T] = {40, 30, 40};
  std::vector<std::int32_t> indices = std::vector<std::int32_t>(T * 512, kPoison);
  std::vector<float> values = std::vector<float>(T * 512, 7.0f);
  IndexerTopkParams p;

  IndexerFixture() {
    for (std::size_t i = 0; i < sizeof(q); ++i) q[i] = static_cast<std::uint8_t>((i * 37) % 0x70);
    for (std::size_t i = 0; i < sizeof(k); ++i) k[i] = static_cast<std::uint8_t>((i * 11) % 0x70);
    for (std::int64_t s = 0; s < N; ++s) k_scale[s] = 0.5f + 0.01f * static_cast<float>(s);
    for (std::int64_t i = 0; i < T * 64; ++i) w[i] = (i % 3 == 0 ? -1.0f : 1.0f) / 8.0f;
    p.q = q;
    p.k = k;
    p.k_scale = k_scale;
    p.w = w;
    p.ks = ks;
    p.ke = ke;
    p.num_queries = T;
    p.num_keys = N;
    p.indices = indices.data();
    p.values = values.data();
    p.options.k = 512;
  }
  bool outputs_untouched() const { return untouched(indices, values); }
};

struct TopkFixture {
  static constexpr std::int64_t T = 2, N = 30, kStride = 32;
  alignas(16) float scores[T * kStride];
  alignas(16) std::int32_t ks[T] = {0, 3};
  alignas(16) std::int32_t ke[T] = {30, 10};
  std::vector<std::int32_t> indices = std::vector<std::int32_t>(T * 512, kPoison);
  TopkParams p;

  TopkFixture() {
    for (std::int64_t i = 0; i < T * kStride; ++i) scores[i] = std::sin(static_cast<float>(i));
    p.scores = scores;
    p.ks = ks;
    p.ke = ke;
    p.num_rows = T;
    p.num_cols = N;
    p.score_stride = kStride;
    p.indices = indices.data();
    p.options.k = 512;
  }
  bool outputs_untouched() const { return untouched(indices, {}); }
};

// A small valid paged problem: 2 requests of next_n = 2 tokens over 4 blocks
// of 16 slots, lengths 20 and 5 (request 0 reads table entries 0-1, request 1
// entry 0; the -1s past them are never read); outputs poisoned.
struct PagedFixture {
  static constexpr std::int64_t B = 2, kRows = 4, kBlocks = 4, kStride = 3;
  static constexpr int kBs = 16;
  alignas(16) std::uint8_t q[kRows * 64 * 128];
  alignas(16) std::uint8_t cache[kBlocks * kBs * 132];
  alignas(16) std::int32_t table[B * kStride] = {2, 0, -1, 3, -1, -1};
  alignas(16) std::int32_t lens[kRows] = {20, 5, 0, 0};  // [B], or [B, next_n] with lens_per_token
  alignas(16) float w[kRows * 64];
  std::vector<std::int32_t> indices = std::vector<std::int32_t>(kRows * 512, kPoison);
  std::vector<float> values = std::vector<float>(kRows * 512, 7.0f);
  PagedIndexerTopkParams p;

  PagedFixture() {
    for (std::size_t i = 0; i < sizeof(q); ++i) q[i] = static_cast<std::uint8_t>((i * 37) % 0x70);
    for (std::size_t i = 0; i < sizeof(cache); ++i) cache[i] = static_cast<std::uint8_t>((i * 11) % 0x70);
    for (std::int64_t slot = 0; slot < kBlocks * kBs; ++slot) {
      const float scale = 0.5f + 0.01f * static_cast<float>(slot);
      std::memcpy(&cache[(slot / kBs) * kBs * 132 + kBs * 128 + (slot % kBs) * 4], &scale, 4);
    }
    for (std::int64_t i = 0; i < kRows * 64; ++i) w[i] = (i % 3 == 0 ? -1.0f : 1.0f) / 8.0f;
    p.q = q;
    p.kv_cache = cache;
    p.block_table = table;
    p.context_lens = lens;
    p.w = w;
    p.batch = B;
    p.next_n = 2;
    p.num_blocks = kBlocks;
    p.block_size = kBs;
    p.max_blocks_per_seq = 2;
    p.block_table_stride = kStride;
    p.indices = indices.data();
    p.values = values.data();
    p.options.k = 512;
  }
  bool outputs_untouched() const { return untouched(indices, values); }
};

// Two parts of three rows, four entries each (the last one empty); row r's
// indices are 10 r + 3 part + i, distinct across parts; outputs poisoned.
struct MergeFixture {
  static constexpr std::int64_t P = 2, R = 3, kPartK = 4;
  alignas(16) float values[P * R * kPartK];
  alignas(16) std::int32_t indices[P * R * kPartK];
  std::vector<std::int32_t> out_indices = std::vector<std::int32_t>(R * 512, kPoison);
  std::vector<float> out_values = std::vector<float>(R * 512, 7.0f);
  MergeTopkParams p;

  static constexpr std::int64_t at(std::int64_t part, std::int64_t r, std::int64_t i) {
    return (part * R + r) * kPartK + i;
  }
  MergeFixture() {
    for (std::int64_t part = 0; part < P; ++part) {
      for (std::int64_t r = 0; r < R; ++r) {
        for (std::int64_t i = 0; i < kPartK; ++i) {
          indices[at(part, r, i)] = i == kPartK - 1 ? -1 : static_cast<std::int32_t>(10 * r + 3 * part + i);
          values[at(part, r, i)] = std::sin(static_cast<float>(at(part, r, i)));
        }
      }
    }
    p.values = values;
    p.indices = indices;
    p.num_parts = P;
    p.num_rows = R;
    p.part_k = kPartK;
    p.out_indices = out_indices.data();
    p.out_values = out_values.data();
    p.options.k = 512;
  }
  bool outputs_untouched() const { return untouched(out_indices, out_values); }
};

Status run_on_cpu(const IndexerTopkParams& p) { return indexer_topk(p, ExecutionContext{}); }
Status run_on_cpu(const TopkParams& p) { return topk(p, ExecutionContext{}); }
Status run_on_cpu(const PagedIndexerTopkParams& p) { return indexer_topk_paged(p, ExecutionContext{}); }
Status run_on_cpu(const MergeTopkParams& p) { return merge_topk(p, ExecutionContext{}); }

// Runs the fixture's operator on the CPU backend and checks the rejection.
template <class Fixture>
void expect_rejected(Fixture& f, const std::string& argument, const std::string& rule) {
  const Status st = run_on_cpu(f.p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_EQ(st.message().rfind(argument + ":", 0), 0u) << "message should start with the argument: "
                                                       << st.message();
  EXPECT_NE(st.message().find(rule), std::string::npos) << st.message();
  EXPECT_TRUE(f.outputs_untouched()) << "a rejected call wrote its outputs";
}

template <typename T>
T* misalign(T* ptr, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(ptr) + bytes);
}

TEST(Validation, FixturesAreValidAndRun) {
  IndexerFixture f;
  ASSERT_TRUE(indexer_topk(f.p, ExecutionContext{}).ok());
  EXPECT_EQ(f.indices[0 * 512 + 40], -1);  // row 0 has 40 keys
  EXPECT_GE(f.indices[0], 0);
  EXPECT_EQ(f.indices[2 * 512], -1);  // row 2 is empty
  TopkFixture g;
  ASSERT_TRUE(topk(g.p, ExecutionContext{}).ok());
  EXPECT_GE(g.indices[0], 0);
}

TEST(Validation, IndexerShapes) {
  { IndexerFixture f; f.p.num_queries = -1; expect_rejected(f, "num_queries", "must be in [0, 2147483647]"); }
  { IndexerFixture f; f.p.num_queries = 1LL << 31; expect_rejected(f, "num_queries", "must be in [0,"); }
  { IndexerFixture f; f.p.num_keys = -5; expect_rejected(f, "num_keys", "must be in [0,"); }
  { IndexerFixture f; f.p.num_keys = 1LL << 32; expect_rejected(f, "num_keys", "must be in [0,"); }
  { IndexerFixture f; f.p.num_heads = 16; expect_rejected(f, "num_heads", "must be 32 or 64 (got 16)"); }
  { IndexerFixture f; f.p.head_dim = 64; expect_rejected(f, "head_dim", "must be 128 (got 64)"); }
  { IndexerFixture f; f.p.k_row_stride = 112; expect_rejected(f, "k_row_stride", ">= head_dim"); }
  { IndexerFixture f; f.p.k_row_stride = 136; expect_rejected(f, "k_row_stride", "multiple of 16"); }
  { IndexerFixture f; f.p.options.k = 2000; expect_rejected(f, "options.k", "one of 512, 1024, 2048 (got 2000)"); }
  { IndexerFixture f; f.p.options.k = 0; expect_rejected(f, "options.k", "one of"); }
}

TEST(Validation, IndexerNullPointers) {
  { IndexerFixture f; f.p.q = nullptr; expect_rejected(f, "q", "must not be null"); }
  { IndexerFixture f; f.p.k = nullptr; expect_rejected(f, "k", "must not be null"); }
  { IndexerFixture f; f.p.k_scale = nullptr; expect_rejected(f, "k_scale", "must not be null"); }
  { IndexerFixture f; f.p.w = nullptr; expect_rejected(f, "w", "must not be null"); }
  { IndexerFixture f; f.p.ks = nullptr; expect_rejected(f, "ks", "must not be null"); }
  { IndexerFixture f; f.p.ke = nullptr; expect_rejected(f, "ke", "must not be null"); }
  { IndexerFixture f; f.p.indices = nullptr; expect_rejected(f, "indices", "must not be null"); }
}

TEST(Validation, IndexerAlignment) {
  { IndexerFixture f; f.p.q = misalign(f.q, 8); expect_rejected(f, "q", "16-byte aligned"); }
  { IndexerFixture f; f.p.k = misalign(f.k, 4); expect_rejected(f, "k", "16-byte aligned"); }
  { IndexerFixture f; f.p.k_scale = misalign(f.k_scale, 8); expect_rejected(f, "k_scale", "16-byte aligned"); }
  { IndexerFixture f; f.p.w = misalign(f.w, 1); expect_rejected(f, "w", "4-byte aligned"); }
  { IndexerFixture f; f.p.ks = misalign(f.ks, 2); expect_rejected(f, "ks", "4-byte aligned"); }
  { IndexerFixture f; f.p.ke = misalign(f.ke, 2); expect_rejected(f, "ke", "4-byte aligned"); }
  {
    IndexerFixture f;
    std::vector<std::int32_t> buffer(3 * 512 + 1);
    f.p.indices = misalign(buffer.data(), 2);
    expect_rejected(f, "indices", "4-byte aligned");
  }
  { IndexerFixture f; f.p.values = misalign(f.values.data(), 1); expect_rejected(f, "values", "4-byte aligned"); }
}

TEST(Validation, IndexerRanges) {
  { IndexerFixture f; f.ks[1] = -1; expect_rejected(f, "ks[1]", "must be >= 0 (ks=-1, ke=30)"); }
  { IndexerFixture f; f.ks[1] = 31; expect_rejected(f, "ks[1]", "must be <= ke[1] (ks=31, ke=30)"); }
  { IndexerFixture f; f.ke[2] = 41; expect_rejected(f, "ke[2]", "must be <= num_keys = 40"); }
}

TEST(Validation, EmptyTensorsMayBeNull) {
  IndexerFixture f;
  f.p.num_queries = 0;
  f.p.q = nullptr;
  f.p.w = nullptr;
  f.p.ks = f.p.ke = nullptr;
  f.p.indices = nullptr;
  f.p.values = nullptr;
  EXPECT_TRUE(indexer_topk(f.p, ExecutionContext{}).ok());
}

TEST(Validation, TopkShapes) {
  { TopkFixture f; f.p.num_rows = -2; expect_rejected(f, "num_rows", "must be in [0,"); }
  { TopkFixture f; f.p.num_cols = -1; expect_rejected(f, "num_cols", "must be in [0,"); }
  { TopkFixture f; f.p.num_cols = 1LL << 31; expect_rejected(f, "num_cols", "must be in [0,"); }
  { TopkFixture f; f.p.score_stride = 29; expect_rejected(f, "score_stride", "must be >= num_cols (got 29 < 30)"); }
  {
    TopkFixture f;
    f.p.score_stride = std::numeric_limits<std::int64_t>::max() / 2;
    expect_rejected(f, "score_stride", "overflows int64");
  }
  { TopkFixture f; f.p.options.k = 4096; expect_rejected(f, "options.k", "(got 4096)"); }
}

TEST(Validation, TopkPointersAndRanges) {
  { TopkFixture f; f.p.scores = nullptr; expect_rejected(f, "scores", "must not be null"); }
  { TopkFixture f; f.p.ks = nullptr; expect_rejected(f, "ks", "must not be null"); }
  { TopkFixture f; f.p.ke = nullptr; expect_rejected(f, "ke", "must not be null"); }
  { TopkFixture f; f.p.indices = nullptr; expect_rejected(f, "indices", "must not be null"); }
  { TopkFixture f; f.p.scores = misalign(f.scores, 2); expect_rejected(f, "scores", "4-byte aligned"); }
  { TopkFixture f; f.ks[0] = -3; expect_rejected(f, "ks[0]", "must be >= 0"); }
  { TopkFixture f; f.ks[1] = 11; expect_rejected(f, "ks[1]", "must be <= ke[1]"); }
  { TopkFixture f; f.ke[0] = 31; expect_rejected(f, "ke[0]", "must be <= num_cols = 30"); }
}

// indexer_scores shares the input rules and adds its own output rules.
TEST(Validation, IndexerScores) {
  IndexerFixture f;
  std::vector<float> scores(f.T * f.N, 5.0f);
  IndexerScoresParams p;
  static_cast<IndexerInputs&>(p) = f.p;
  p.scores = scores.data();
  p.score_stride = f.N;
  ASSERT_TRUE(indexer_scores(p, ExecutionContext{}).ok());
  EXPECT_NE(scores[0 * f.N + 39], 5.0f);                  // row 0 covers [0, 40): written
  EXPECT_EQ(scores[1 * f.N + 4], 5.0f);                   // row 1 is [5, 30): key 4 untouched
  auto rejected = [&](IndexerScoresParams bad, const std::string& arg, const std::string& rule) {
    std::vector<float> before = scores;
    const Status st = indexer_scores(bad, ExecutionContext{});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_EQ(st.message().rfind(arg + ":", 0), 0u) << st.message();
    EXPECT_NE(st.message().find(rule), std::string::npos) << st.message();
    EXPECT_EQ(before, scores) << "a rejected call wrote its output";
  };
  { auto b = p; b.score_stride = f.N - 1; rejected(b, "score_stride", "must be >= num_keys (got 39 < 40)"); }
  { auto b = p; b.score_stride = std::numeric_limits<std::int64_t>::max() / 2; rejected(b, "score_stride", "overflows int64"); }
  { auto b = p; b.scores = nullptr; rejected(b, "scores", "must not be null"); }
  { auto b = p; b.scores = misalign(scores.data(), 2); rejected(b, "scores", "4-byte aligned"); }
  { auto b = p; b.num_heads = 48; rejected(b, "num_heads", "must be 32 or 64"); }
  {
    // Row 1 becomes [5, 3): ks > ke.
    alignas(16) std::int32_t bad_ke[3] = {40, 3, 40};
    auto b = p;
    b.ke = bad_ke;
    rejected(b, "ks[1]", "must be <= ke[1] (ks=5, ke=3)");
  }
}

// check_ranges = false only concerns the CUDA backend's host round trip:
// the CPU backend always validates ranges.
TEST(Validation, CpuBackendAlwaysChecksRanges) {
  IndexerFixture f;
  f.ke[0] = 41;
  ExecutionContext ctx;
  ctx.check_ranges = false;
  const Status st = indexer_topk(f.p, ctx);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("ke[0]:", 0), 0u) << st.message();
  EXPECT_TRUE(f.outputs_untouched());
}

TEST(Validation, WorkspaceQueryNeedsOutput) {
  IndexerFixture f;
  EXPECT_EQ(indexer_topk_workspace_size(f.p, Backend::kCpu, nullptr).code(), StatusCode::kInvalidArgument);
  TopkFixture g;
  EXPECT_EQ(topk_workspace_size(g.p, Backend::kCpu, nullptr).code(), StatusCode::kInvalidArgument);
  std::size_t bytes = 99;
  EXPECT_TRUE(indexer_topk_workspace_size(f.p, Backend::kCpu, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}

// Without a GPU every pointer is host memory, which the CUDA backend refuses:
// the request never silently runs on the CPU instead.
TEST(Validation, CudaBackendNeverFallsBackToCpu) {
  // Host buffers on Backend::kCuda: rejected without a GPU (no backend) and
  // with one (host memory), never computed on the host instead.
  std::string why;
  const bool available = cuda_backend_available(Operator::kIndexerTopk, &why);
  IndexerFixture f;
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  const Status st = indexer_topk(f.p, ctx);
  EXPECT_NE(st.code(), StatusCode::kOk);
  EXPECT_TRUE(f.outputs_untouched());
  if (available) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  } else {
    EXPECT_FALSE(why.empty());
  }
}

TEST(Validation, CheckFiniteReportsNonFiniteInputs) {
  {
    IndexerFixture f;
    f.p.options.check_finite = true;
    f.q[70] = 0xFF;  // FP8 NaN
    const Status st = indexer_topk(f.p, ExecutionContext{});
    EXPECT_EQ(st.code(), StatusCode::kNonFiniteInput);
    EXPECT_NE(st.message().find("q: byte 70"), std::string::npos) << st.message();
    EXPECT_TRUE(f.outputs_untouched());
  }
  {
    IndexerFixture f;
    f.p.options.check_finite = true;
    f.k[3 * 128 + 5] = 0x7F;
    const Status st = indexer_topk(f.p, ExecutionContext{});
    EXPECT_NE(st.message().find("k[3, 5]"), std::string::npos) << st.message();
  }
  {
    IndexerFixture f;
    f.p.options.check_finite = true;
    f.k_scale[7] = std::numeric_limits<float>::infinity();
    EXPECT_NE(indexer_topk(f.p, ExecutionContext{}).message().find("k_scale[7]"), std::string::npos);
  }
  {
    IndexerFixture f;
    f.p.options.check_finite = true;
    f.w[65] = std::nanf("");
    EXPECT_NE(indexer_topk(f.p, ExecutionContext{}).message().find("w[65]"), std::string::npos);
  }
  {
    TopkFixture f;
    f.p.options.check_finite = true;
    f.scores[32 + 4] = std::nanf("");
    const Status st = topk(f.p, ExecutionContext{});
    EXPECT_EQ(st.code(), StatusCode::kNonFiniteInput);
    EXPECT_NE(st.message().find("scores[1, 4]"), std::string::npos) << st.message();
  }
}

// Without check_finite, NaN scores rank as -inf and rows stay complete.
TEST(Validation, NanScoresRankLowestWithoutCheck) {
  TopkFixture f;
  for (int s = 0; s < 30; s += 2) f.scores[s] = std::nanf("");
  f.p.options.k = 512;
  ASSERT_TRUE(topk(f.p, ExecutionContext{}).ok());
  // Row 0 has 30 keys: all returned, distinct, in range.
  std::vector<bool> seen(30, false);
  for (int i = 0; i < 30; ++i) {
    const std::int32_t idx = f.indices[i];
    ASSERT_TRUE(idx >= 0 && idx < 30 && !seen[idx]) << idx;
    seen[idx] = true;
  }
  EXPECT_EQ(f.indices[30], -1);
}

// ------------------------------------------------------------ paged -------

TEST(Validation, PagedFixtureIsValidAndRuns) {
  PagedFixture f;
  ASSERT_TRUE(indexer_topk_paged(f.p, ExecutionContext{}).ok());
  // Rows (b, j) have lengths 19, 20, 4, 5.
  EXPECT_GE(f.indices[0 * 512 + 18], 0);
  EXPECT_EQ(f.indices[0 * 512 + 19], -1);
  EXPECT_GE(f.indices[1 * 512 + 19], 0);
  EXPECT_EQ(f.indices[3 * 512 + 5], -1);
  // A 1-D length below next_n: row (1, 0) is empty, row (1, 1) has one position.
  PagedFixture g;
  g.lens[1] = 1;
  ASSERT_TRUE(indexer_topk_paged(g.p, ExecutionContext{}).ok());
  EXPECT_EQ(g.indices[2 * 512], -1);
  EXPECT_EQ(g.indices[3 * 512], 0);
  EXPECT_EQ(g.indices[3 * 512 + 1], -1);
}

TEST(Validation, PagedShapes) {
  { PagedFixture f; f.p.batch = -1; expect_rejected(f, "batch", "must be in [0, 2147483647]"); }
  { PagedFixture f; f.p.batch = 1LL << 31; expect_rejected(f, "batch", "must be in [0,"); }
  { PagedFixture f; f.p.next_n = 0; expect_rejected(f, "next_n", "must be in [1, 8] (got 0)"); }
  { PagedFixture f; f.p.next_n = 9; expect_rejected(f, "next_n", "must be in [1, 8] (got 9)"); }
  {
    PagedFixture f;
    f.p.batch = std::numeric_limits<std::int32_t>::max();
    expect_rejected(f, "batch", "batch * next_n must be <= 2147483647 (got 2147483647 * 2)");
  }
  { PagedFixture f; f.p.num_heads = 48; expect_rejected(f, "num_heads", "must be 32 or 64 (got 48)"); }
  { PagedFixture f; f.p.head_dim = 64; expect_rejected(f, "head_dim", "must be 128 (got 64)"); }
  { PagedFixture f; f.p.block_size = 48; expect_rejected(f, "block_size", "must be one of 16, 32, 64, 128 (got 48)"); }
  { PagedFixture f; f.p.num_blocks = -1; expect_rejected(f, "num_blocks", "must be in [0, 2147483647] (got -1)"); }
  { PagedFixture f; f.p.num_blocks = 1LL << 31; expect_rejected(f, "num_blocks", "must be in [0,"); }
  { PagedFixture f; f.p.max_blocks_per_seq = -1; expect_rejected(f, "max_blocks_per_seq", "must be >= 0 (got -1)"); }
  {
    PagedFixture f;
    f.p.max_blocks_per_seq = f.p.block_table_stride = (1LL << 31) / 16;
    expect_rejected(f, "max_blocks_per_seq", "max_blocks_per_seq * block_size must be <= 2147483647");
  }
  {
    PagedFixture f;
    f.p.block_table_stride = 1;
    expect_rejected(f, "block_table_stride", "must be >= max_blocks_per_seq (got 1 < 2)");
  }
  {
    PagedFixture f;
    f.p.block_table_stride = std::numeric_limits<std::int64_t>::max() / 4;
    expect_rejected(f, "block_table_stride", "overflows int64");
  }
  {
    PagedFixture f;
    f.p.physical_slots = true;
    f.p.num_blocks = (1LL << 31) / 16;
    expect_rejected(f, "num_blocks", "num_blocks * block_size must be <= 2147483647 with physical_slots");
  }
  { PagedFixture f; f.p.options.k = 1000; expect_rejected(f, "options.k", "one of 512, 1024, 2048 (got 1000)"); }
  {
    PagedFixture f;
    f.p.options.index_base = IndexBase::kRelative;
    expect_rejected(f, "options.index_base", "must be kAbsolute");
  }
}

TEST(Validation, PagedPointers) {
  { PagedFixture f; f.p.q = nullptr; expect_rejected(f, "q", "must not be null"); }
  { PagedFixture f; f.p.kv_cache = nullptr; expect_rejected(f, "kv_cache", "must not be null"); }
  { PagedFixture f; f.p.block_table = nullptr; expect_rejected(f, "block_table", "must not be null"); }
  { PagedFixture f; f.p.context_lens = nullptr; expect_rejected(f, "context_lens", "must not be null"); }
  { PagedFixture f; f.p.w = nullptr; expect_rejected(f, "w", "must not be null"); }
  { PagedFixture f; f.p.indices = nullptr; expect_rejected(f, "indices", "must not be null"); }
  { PagedFixture f; f.p.q = misalign(f.q, 8); expect_rejected(f, "q", "16-byte aligned"); }
  { PagedFixture f; f.p.kv_cache = misalign(f.cache, 4); expect_rejected(f, "kv_cache", "16-byte aligned"); }
  { PagedFixture f; f.p.block_table = misalign(f.table, 2); expect_rejected(f, "block_table", "4-byte aligned"); }
  { PagedFixture f; f.p.context_lens = misalign(f.lens, 2); expect_rejected(f, "context_lens", "4-byte aligned"); }
  { PagedFixture f; f.p.w = misalign(f.w, 1); expect_rejected(f, "w", "4-byte aligned"); }
  {
    PagedFixture f;
    std::vector<std::int32_t> buffer(4 * 512 + 1);
    f.p.indices = misalign(buffer.data(), 2);
    expect_rejected(f, "indices", "4-byte aligned");
  }
  { PagedFixture f; f.p.values = misalign(f.values.data(), 1); expect_rejected(f, "values", "4-byte aligned"); }
  {
    // Nothing to read or write: every pointer may be null.
    PagedFixture f;
    f.p.batch = 0;
    f.p.num_blocks = 0;
    f.p.q = f.p.kv_cache = nullptr;
    f.p.block_table = f.p.context_lens = nullptr;
    f.p.w = nullptr;
    f.p.indices = nullptr;
    f.p.values = nullptr;
    EXPECT_TRUE(indexer_topk_paged(f.p, ExecutionContext{}).ok());
  }
  {
    // No table entry can be used: the table may be null.
    PagedFixture f;
    f.p.max_blocks_per_seq = 0;
    f.p.block_table = nullptr;
    f.lens[0] = f.lens[1] = 0;
    EXPECT_TRUE(indexer_topk_paged(f.p, ExecutionContext{}).ok());
  }
}

TEST(Validation, PagedLengths) {
  { PagedFixture f; f.lens[1] = -1; expect_rejected(f, "context_lens[1]", "must be >= 0 (got -1)"); }
  {
    PagedFixture f;
    f.lens[0] = 33;
    expect_rejected(f, "context_lens[0]", "must be <= max_context() = max_blocks_per_seq * block_size = 32 (got 33)");
  }
  {
    PagedFixture f;
    f.p.lens_per_token = true;
    f.lens[0] = 19, f.lens[1] = 20, f.lens[2] = 5, f.lens[3] = -2;
    expect_rejected(f, "context_lens[1, 1]", "must be >= 0 (got -2)");
  }
  {
    PagedFixture f;
    f.p.lens_per_token = true;
    f.lens[0] = 19, f.lens[1] = 20, f.lens[2] = 40, f.lens[3] = 5;
    expect_rejected(f, "context_lens[1, 0]", "must be <= max_context()");
  }
  {
    // Per-token lengths in any order; request 1 reads 1 block (its longest row has 5).
    PagedFixture f;
    f.p.lens_per_token = true;
    f.lens[0] = 20, f.lens[1] = 3, f.lens[2] = 5, f.lens[3] = 0;
    ASSERT_TRUE(indexer_topk_paged(f.p, ExecutionContext{}).ok());
    EXPECT_GE(f.indices[0 * 512 + 19], 0);
    EXPECT_EQ(f.indices[1 * 512 + 3], -1);
    EXPECT_EQ(f.indices[3 * 512], -1);
  }
}

TEST(Validation, PagedBlockTable) {
  {
    PagedFixture f;
    f.table[1] = 4;
    expect_rejected(f, "block_table[0, 1]", "must be in [0, num_blocks) (got 4, num_blocks=4)");
  }
  { PagedFixture f; f.table[3] = -1; expect_rejected(f, "block_table[1, 0]", "(got -1, num_blocks=4)"); }
  {
    // Request 1 becomes 17 long: its second entry is read now.
    PagedFixture f;
    f.lens[1] = 17;
    expect_rejected(f, "block_table[1, 1]", "must be in [0, num_blocks) (got -1, num_blocks=4)");
  }
  {
    // Entries no row reads may hold anything; so may the table of an empty request.
    PagedFixture f;
    f.table[2] = 1000;
    f.table[4] = -9;
    ASSERT_TRUE(indexer_topk_paged(f.p, ExecutionContext{}).ok());
    PagedFixture g;
    g.lens[1] = 0;
    g.table[3] = -9;
    EXPECT_TRUE(indexer_topk_paged(g.p, ExecutionContext{}).ok());
  }
  {
    // check_ranges = false concerns the CUDA backend only.
    PagedFixture f;
    f.table[0] = 7;
    ExecutionContext ctx;
    ctx.check_ranges = false;
    const Status st = indexer_topk_paged(f.p, ctx);
    EXPECT_EQ(st.message().rfind("block_table[0, 0]:", 0), 0u) << st.message();
    EXPECT_TRUE(f.outputs_untouched());
  }
}

TEST(Validation, PagedWorkspaceAndBackends) {
  PagedFixture f;
  EXPECT_EQ(indexer_topk_paged_workspace_size(f.p, Backend::kCpu, nullptr).code(), StatusCode::kInvalidArgument);
  std::size_t bytes = 99;
  EXPECT_TRUE(indexer_topk_paged_workspace_size(f.p, Backend::kCpu, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  f.p.num_heads = 48;
  const Status st = indexer_topk_paged_workspace_size(f.p, Backend::kCuda, &bytes);
  EXPECT_EQ(st.message().rfind("num_heads:", 0), 0u) << st.message();

  PagedFixture g;
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  EXPECT_NE(indexer_topk_paged(g.p, ctx).code(), StatusCode::kOk);
  EXPECT_TRUE(g.outputs_untouched());
}

TEST(Validation, PagedCheckFinite) {
  auto check = [](PagedFixture& f, const std::string& what) {
    f.p.options.check_finite = true;
    const Status st = indexer_topk_paged(f.p, ExecutionContext{});
    EXPECT_EQ(st.code(), StatusCode::kNonFiniteInput) << st.to_string();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
    EXPECT_TRUE(f.outputs_untouched());
  };
  { PagedFixture f; f.q[3 * 64 * 128 + 1] = 0xFF; check(f, "q: byte 24577"); }
  // Position 17 of request 0 is row 1 of block 0 (slot 1).
  { PagedFixture f; f.cache[1 * 128 + 9] = 0x7F; check(f, "kv_cache: key byte 9 of slot 1 (request 0, position 17)"); }
  {
    PagedFixture f;
    const float nan = std::nanf("");
    std::memcpy(&f.cache[3 * 16 * 132 + 16 * 128 + 4 * 4], &nan, 4);  // request 1, position 4
    check(f, "kv_cache: scale of slot 52 (request 1, position 4)");
  }
  { PagedFixture f; f.w[2 * 64 + 5] = INFINITY; check(f, "w[133]"); }
  {
    // Slots no row reads are not checked: block 1 is unused, request 1 reads 5 slots of block 3.
    PagedFixture f;
    f.p.options.check_finite = true;
    std::fill_n(&f.cache[1 * 16 * 132], 16 * 132, 0xFF);
    f.cache[3 * 16 * 132 + 5 * 128] = 0xFF;
    EXPECT_TRUE(indexer_topk_paged(f.p, ExecutionContext{}).ok());
  }
}

// ------------------------------------------------------------ merge -------

TEST(Validation, MergeFixtureIsValidAndRuns) {
  MergeFixture f;
  ASSERT_TRUE(merge_topk(f.p, ExecutionContext{}).ok());
  EXPECT_GE(f.out_indices[5], 0);  // 6 non-empty entries per row
  EXPECT_EQ(f.out_indices[6], -1);
}

TEST(Validation, MergeShapes) {
  { MergeFixture f; f.p.num_parts = -1; expect_rejected(f, "num_parts", "must be in [0, 2147483647] (got -1)"); }
  { MergeFixture f; f.p.num_parts = 1LL << 31; expect_rejected(f, "num_parts", "must be in [0,"); }
  { MergeFixture f; f.p.num_rows = -3; expect_rejected(f, "num_rows", "must be in [0,"); }
  { MergeFixture f; f.p.part_k = -1; expect_rejected(f, "part_k", "must be in [0,"); }
  { MergeFixture f; f.p.part_k = 1LL << 31; expect_rejected(f, "part_k", "must be in [0, 2147483647]"); }
  {
    MergeFixture f;
    f.p.part_k = 0;
    expect_rejected(f, "part_k", "must be >= 1 when num_parts * num_rows > 0 (got 0)");
  }
  {
    MergeFixture f;
    f.p.part_k = 1LL << 30;
    expect_rejected(f, "part_k", "num_parts * part_k must be <= 2147483647 (got 2 * 1073741824)");
  }
  { MergeFixture f; f.p.options.k = 100; expect_rejected(f, "options.k", "(got 100)"); }
  {
    MergeFixture f;
    f.p.options.index_base = IndexBase::kRelative;
    expect_rejected(f, "options.index_base", "must be kAbsolute");
  }
  {
    // No rows: part_k 0 and null inputs are fine.
    MergeFixture f;
    f.p.num_rows = 0;
    f.p.part_k = 0;
    f.p.values = nullptr;
    f.p.indices = nullptr;
    f.p.out_indices = nullptr;
    EXPECT_TRUE(merge_topk(f.p, ExecutionContext{}).ok());
  }
}

TEST(Validation, MergePointers) {
  { MergeFixture f; f.p.values = nullptr; expect_rejected(f, "values", "must not be null"); }
  { MergeFixture f; f.p.indices = nullptr; expect_rejected(f, "indices", "must not be null"); }
  { MergeFixture f; f.p.out_indices = nullptr; expect_rejected(f, "out_indices", "must not be null"); }
  { MergeFixture f; f.p.values = misalign(f.values, 2); expect_rejected(f, "values", "4-byte aligned"); }
  { MergeFixture f; f.p.indices = misalign(f.indices, 2); expect_rejected(f, "indices", "4-byte aligned"); }
  {
    MergeFixture f;
    std::vector<std::int32_t> buffer(3 * 512 + 1);
    f.p.out_indices = misalign(buffer.data(), 2);
    expect_rejected(f, "out_indices", "4-byte aligned");
  }
  {
    MergeFixture f;
    f.p.out_values = misalign(f.out_values.data(), 1);
    expect_rejected(f, "out_values", "4-byte aligned");
  }
}

TEST(Validation, MergeEntries) {
  {
    MergeFixture f;
    f.indices[MergeFixture::at(1, 2, 3)] = -2;
    expect_rejected(f, "indices[1, 2, 3]", "must be >= -1 (an empty slot) (got -2)");
  }
  {
    MergeFixture f;
    f.indices[MergeFixture::at(1, 1, 0)] = 10;  // part 0 holds index 10 in row 1 too
    expect_rejected(f, "indices", "row 1 holds index 10 twice (parts 0 and 1)");
  }
  {
    MergeFixture f;
    f.indices[MergeFixture::at(0, 2, 2)] = 20;  // the same part twice
    expect_rejected(f, "indices", "row 2 holds index 20 twice (parts 0 and 0)");
  }
  {
    // Empty slots repeat freely, and indices may repeat across rows.
    MergeFixture f;
    f.indices[MergeFixture::at(0, 0, 0)] = -1;
    f.indices[MergeFixture::at(1, 0, 0)] = -1;
    f.indices[MergeFixture::at(0, 1, 0)] = 0;
    EXPECT_TRUE(merge_topk(f.p, ExecutionContext{}).ok());
  }
  {
    MergeFixture f;
    f.indices[MergeFixture::at(0, 0, 1)] = -5;
    ExecutionContext ctx;
    ctx.check_ranges = false;
    EXPECT_EQ(merge_topk(f.p, ctx).message().rfind("indices[0, 0, 1]:", 0), 0u);
    EXPECT_TRUE(f.outputs_untouched());
  }
}

TEST(Validation, MergeWorkspaceAndBackends) {
  MergeFixture f;
  EXPECT_EQ(merge_topk_workspace_size(f.p, Backend::kCpu, nullptr).code(), StatusCode::kInvalidArgument);
  std::size_t bytes = 99;
  EXPECT_TRUE(merge_topk_workspace_size(f.p, Backend::kCpu, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  f.p.options.k = 3;
  EXPECT_EQ(merge_topk_workspace_size(f.p, Backend::kCuda, &bytes).message().rfind("options.k:", 0), 0u);

  MergeFixture g;
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  EXPECT_NE(merge_topk(g.p, ctx).code(), StatusCode::kOk);
  EXPECT_TRUE(g.outputs_untouched());
}

TEST(Validation, MergeCheckFinite) {
  MergeFixture f;
  f.p.options.check_finite = true;
  f.values[MergeFixture::at(0, 1, 3)] = std::nanf("");  // an empty slot: not checked
  ASSERT_TRUE(merge_topk(f.p, ExecutionContext{}).ok());
  MergeFixture g;
  g.p.options.check_finite = true;
  g.values[MergeFixture::at(1, 0, 2)] = -INFINITY;
  const Status st = merge_topk(g.p, ExecutionContext{});
  EXPECT_EQ(st.code(), StatusCode::kNonFiniteInput);
  EXPECT_NE(st.message().find("values[1, 0, 2] is -inf"), std::string::npos) << st.message();
  EXPECT_TRUE(g.outputs_untouched());
}

}  // namespace
}  // namespace dsa
