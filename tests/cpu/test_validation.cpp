// Contract section 3: every validation rule rejects a bad argument with
// kInvalidArgument, names the argument and the rule, and writes no output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"

namespace dsa {
namespace {

constexpr std::int32_t kPoison = -12345;

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
  bool outputs_untouched() const {
    for (std::int32_t v : indices) {
      if (v != kPoison) return false;
    }
    for (float v : values) {
      if (v != 7.0f) return false;
    }
    return true;
  }
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
  bool outputs_untouched() const {
    for (std::int32_t v : indices) {
      if (v != kPoison) return false;
    }
    return true;
  }
};

// Runs the operator on the CPU backend and checks the rejection.
void expect_rejected(IndexerFixture& f, const std::string& argument, const std::string& rule) {
  const Status st = indexer_topk(f.p, ExecutionContext{});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_EQ(st.message().rfind(argument + ":", 0), 0u) << "message should start with the argument: "
                                                       << st.message();
  EXPECT_NE(st.message().find(rule), std::string::npos) << st.message();
  EXPECT_TRUE(f.outputs_untouched()) << "a rejected call wrote its outputs";
}

void expect_rejected(TopkFixture& f, const std::string& argument, const std::string& rule) {
  const Status st = topk(f.p, ExecutionContext{});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_EQ(st.message().rfind(argument + ":", 0), 0u) << st.message();
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

}  // namespace
}  // namespace dsa
