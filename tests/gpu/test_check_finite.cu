// options.check_finite on CUDA. For each operator and each input it checks,
// a NaN or Inf planted past the first element (and a second one later) gives
// kNonFiniteInput with the CPU backend's message word for word, and no output
// is written; inputs that are finite where the operator reads give the
// result they give without the check (paged cache slots no row reads, k
// row padding and score columns outside a row's range may hold anything).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/paged.h"
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
using tools::Distribution;
using tools::Layout;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::uint8_t kFp8Nan = 0x7F, kFp8NegNan = 0xFF;

// An operator's outputs after a call, read back to the host.
struct Outcome {
  Status status;
  std::vector<std::int32_t> indices;
  std::vector<float> values;
};

bool untouched(const Outcome& o) {
  auto poisoned = [](const void* data, std::size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) {
      if (b[i] != testing::kPoison) return false;
    }
    return true;
  };
  return poisoned(o.indices.data(), o.indices.size() * sizeof(std::int32_t)) &&
         poisoned(o.values.data(), o.values.size() * sizeof(float));
}

template <class T>
std::vector<T> poisoned_host(std::size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), testing::kPoison, n * sizeof(T));
  return v;
}

// Host inputs as device (or managed) memory; kept alive by the caller.
class Uploads {
 public:
  explicit Uploads(bool managed) : managed_(managed) {}
  Uploads(const Uploads&) = delete;
  Uploads& operator=(const Uploads&) = delete;
  ~Uploads() {
    for (void* p : owned_) cudaFree(p);
  }
  template <class T>
  T* put(const std::vector<T>& host) {
    return static_cast<T*>(put_bytes(host.data(), host.size() * sizeof(T)));
  }
  template <class T>
  T* poisoned(std::size_t n) {
    void* p = alloc(n * sizeof(T));
    EXPECT_EQ(cudaMemset(p, testing::kPoison, n * sizeof(T)), cudaSuccess);
    return static_cast<T*>(p);
  }
  template <class T>
  std::vector<T> download(const T* p, std::size_t n) {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDefault), cudaSuccess);
    return host;
  }

 private:
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    const std::size_t n = bytes == 0 ? 1 : bytes;
    EXPECT_EQ(managed_ ? cudaMallocManaged(&p, n) : cudaMalloc(&p, n), cudaSuccess);
    owned_.push_back(p);
    return p;
  }
  void* put_bytes(const void* host, std::size_t bytes) {
    void* p = alloc(bytes);
    EXPECT_EQ(cudaMemcpy(p, host, bytes, cudaMemcpyDefault), cudaSuccess);
    return p;
  }
  bool managed_;
  std::vector<void*> owned_;
};

// How a call runs on CUDA: device or managed inputs, range checks on or off.
struct CudaRun {
  bool managed = false;
  bool check_ranges = true;
};

// ------------------------------------------------------------- runners ----

// `call(indices, values)` on poisoned host outputs of n entries each.
Outcome on_host(std::size_t n, const std::function<Status(std::int32_t*, float*)>& call) {
  Outcome out{{}, poisoned_host<std::int32_t>(n), poisoned_host<float>(n)};
  out.status = call(out.indices.data(), out.values.data());
  return out;
}

// `call(ctx)` on CUDA with a workspace of `bytes`; then the outputs of n
// entries each.
Outcome on_device(Uploads& up, std::size_t bytes, CudaRun how, const std::int32_t* indices, const float* values,
                  std::size_t n, const std::function<Status(const ExecutionContext&)>& call) {
  DeviceArray<std::uint8_t> ws(std::max<std::size_t>(bytes, 1));
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  ctx.workspace = ws.get();
  ctx.workspace_bytes = bytes;
  ctx.check_ranges = how.check_ranges;
  Outcome out{call(ctx), {}, {}};
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.indices = up.download(indices, n);
  out.values = up.download(values, n);
  return out;
}

Outcome run_indexer(const tools::IndexerProblem& c, const SelectOptions& o, Backend backend, CudaRun how = {}) {
  const std::size_t n = static_cast<std::size_t>(c.T) * o.k;
  if (backend == Backend::kCpu) {
    return on_host(n, [&](std::int32_t* i, float* v) { return indexer_topk(c.params(i, v, o), ExecutionContext{}); });
  }
  Uploads up(how.managed);
  IndexerTopkParams p = c.params(up.poisoned<std::int32_t>(n), up.poisoned<float>(n), o);
  p.q = up.put(c.q);
  p.k = up.put(c.k);
  p.k_scale = up.put(c.k_scale);
  p.w = up.put(c.w);
  p.ks = up.put(c.ks);
  p.ke = up.put(c.ke);
  std::size_t bytes = 0;
  EXPECT_TRUE(indexer_topk_workspace_size(p, Backend::kCuda, &bytes).ok());
  return on_device(up, bytes, how, p.indices, p.values, n, [&](const auto& ctx) { return indexer_topk(p, ctx); });
}

Outcome run_topk(const tools::ScoresProblem& c, const SelectOptions& o, Backend backend, CudaRun how = {}) {
  const std::size_t n = static_cast<std::size_t>(c.T) * o.k;
  if (backend == Backend::kCpu) {
    return on_host(n, [&](std::int32_t* i, float* v) { return topk(c.params(i, v, o), ExecutionContext{}); });
  }
  Uploads up(how.managed);
  TopkParams p = c.params(up.poisoned<std::int32_t>(n), up.poisoned<float>(n), o);
  p.scores = up.put(c.scores);
  p.ks = up.put(c.ks);
  p.ke = up.put(c.ke);
  return on_device(up, 0, how, p.indices, p.values, n, [&](const auto& ctx) { return topk(p, ctx); });
}

Outcome run_paged(const tools::PagedProblem& c, const SelectOptions& o, Backend backend, CudaRun how = {}) {
  const std::size_t n = static_cast<std::size_t>(c.rows()) * o.k;
  if (backend == Backend::kCpu) {
    return on_host(n, [&](std::int32_t* i, float* v) {
      return indexer_topk_paged(c.params(i, v, o, false), ExecutionContext{});
    });
  }
  Uploads up(how.managed);
  PagedIndexerTopkParams p = c.params(up.poisoned<std::int32_t>(n), up.poisoned<float>(n), o, false);
  p.q = up.put(c.q);
  p.kv_cache = up.put(c.kv_cache);
  p.block_table = up.put(c.block_table);
  p.context_lens = up.put(c.context_lens);
  p.w = up.put(c.w);
  std::size_t bytes = 0;
  EXPECT_TRUE(indexer_topk_paged_workspace_size(p, Backend::kCuda, &bytes).ok());
  return on_device(up, bytes, how, p.indices, p.values, n, [&](const auto& ctx) { return indexer_topk_paged(p, ctx); });
}

struct MergeProblem {
  std::int64_t P = 3, R = 4, part_k = 600;
  std::vector<float> values;
  std::vector<std::int32_t> indices;
  std::size_t at(std::int64_t p, std::int64_t r, std::int64_t i) const {
    return static_cast<std::size_t>((p * R + r) * part_k + i);
  }
};

// Disjoint indices per row, small-integer values (ties), every seventh entry
// empty with a NaN value (not an input: empty slots are not checked).
MergeProblem merge_problem() {
  MergeProblem m;
  m.values.resize(static_cast<std::size_t>(m.P * m.R * m.part_k));
  m.indices.resize(m.values.size());
  for (std::int64_t p = 0; p < m.P; ++p) {
    for (std::int64_t r = 0; r < m.R; ++r) {
      for (std::int64_t i = 0; i < m.part_k; ++i) {
        const std::size_t e = m.at(p, r, i);
        const bool empty = e % 7 == 3;
        m.indices[e] = empty ? -1 : static_cast<std::int32_t>(p * m.part_k + i);
        m.values[e] = empty ? kNan : static_cast<float>((e * 37) % 50);
      }
    }
  }
  return m;
}

Outcome run_merge(const MergeProblem& m, const SelectOptions& o, Backend backend, CudaRun how = {}) {
  const std::size_t n = static_cast<std::size_t>(m.R) * o.k;
  MergeTopkParams p;
  p.num_parts = m.P;
  p.num_rows = m.R;
  p.part_k = m.part_k;
  p.options = o;
  if (backend == Backend::kCpu) {
    p.values = m.values.data();
    p.indices = m.indices.data();
    return on_host(n, [&](std::int32_t* i, float* v) {
      p.out_indices = i;
      p.out_values = v;
      return merge_topk(p, ExecutionContext{});
    });
  }
  Uploads up(how.managed);
  p.values = up.put(m.values);
  p.indices = up.put(m.indices);
  p.out_indices = up.poisoned<std::int32_t>(n);
  p.out_values = up.poisoned<float>(n);
  std::size_t bytes = 0;
  EXPECT_TRUE(merge_topk_workspace_size(p, Backend::kCuda, &bytes).ok());
  return on_device(up, bytes, how, p.out_indices, p.out_values, n, [&](const auto& ctx) { return merge_topk(p, ctx); });
}

// ------------------------------------------------------------- checks -----

SelectOptions checked(int k) {
  SelectOptions o = make_options(k, TieBreak::kSmallestIndex, IndexBase::kAbsolute, /*sorted=*/true);
  o.check_finite = true;
  return o;
}

// `run(backend, how)` on bad input: the CPU backend reports `expected` (a
// sanity anchor for the message), CUDA reports the CPU's message exactly, and
// neither writes an output.
void expect_rejected(const std::function<Outcome(Backend, CudaRun)>& run, const std::string& expected,
                     CudaRun how = {}) {
  SCOPED_TRACE(expected);
  const Outcome cpu = run(Backend::kCpu, how);
  ASSERT_EQ(cpu.status.code(), StatusCode::kNonFiniteInput) << cpu.status.to_string();
  EXPECT_NE(cpu.status.message().find(expected), std::string::npos) << cpu.status.message();
  EXPECT_TRUE(untouched(cpu));
  const Outcome cuda = run(Backend::kCuda, how);
  EXPECT_EQ(cuda.status.code(), StatusCode::kNonFiniteInput) << cuda.status.to_string();
  EXPECT_EQ(cuda.status.message(), cpu.status.message());
  EXPECT_TRUE(untouched(cuda));
}

// With the check on, finite input gives what it gives with the check off
// (deterministic sorted options, so the arrays are unique), bit for bit.
void expect_same_as_unchecked(const std::function<Outcome(const SelectOptions&)>& run, int k) {
  SelectOptions off = checked(k);
  off.check_finite = false;
  const Outcome with = run(checked(k)), without = run(off);
  ASSERT_TRUE(with.status.ok()) << with.status.to_string();
  ASSERT_TRUE(without.status.ok()) << without.status.to_string();
  EXPECT_EQ(with.indices, without.indices);
  ASSERT_EQ(with.values.size(), without.values.size());
  EXPECT_EQ(std::memcmp(with.values.data(), without.values.data(), with.values.size() * sizeof(float)), 0);
}

void set_float(std::vector<std::uint8_t>& bytes, std::int64_t offset, float v) {
  std::memcpy(bytes.data() + offset, &v, sizeof(v));
}

// ------------------------------------------------------------ indexer -----

// k rows padded to 144 bytes: the padding holds FP8 NaN, which is not read.
tools::IndexerProblem indexer_problem() {
  return testing::indexer_problem(Distribution::kModelLike, Layout::kVarlenBatch, 6, 3000, 512, 64, 144, 5);
}

void expect_indexer_rejected(const std::function<void(tools::IndexerProblem&)>& plant, const std::string& expected,
                             CudaRun how = {}) {
  tools::IndexerProblem bad = indexer_problem();
  plant(bad);
  expect_rejected([&](Backend b, CudaRun h) { return run_indexer(bad, checked(512), b, h); }, expected, how);
}

TEST(CheckFiniteGpu, IndexerEachInput) {
  expect_indexer_rejected([](auto& p) { p.q[5] = kFp8Nan; p.q[4000] = kFp8NegNan; }, "q: byte 5 is FP8 NaN");
  expect_indexer_rejected([](auto& p) { p.q[64 * 128 * 3 + 77] = kFp8NegNan; p.q[64 * 128 * 5] = kFp8Nan; },
                          "q: byte 24653 is FP8 NaN");
  expect_indexer_rejected([](auto& p) { p.k[1234 * 144 + 77] = kFp8Nan; p.k[2000 * 144 + 3] = kFp8NegNan; },
                          "k[1234, 77] is FP8 NaN");
  expect_indexer_rejected([](auto& p) { p.k[3 * 144 + 127] = kFp8NegNan; p.k[2999 * 144] = kFp8Nan; },
                          "k[3, 127] is FP8 NaN");
  expect_indexer_rejected([](auto& p) { p.k_scale[1500] = kNan; p.k_scale[2500] = kInf; }, "k_scale[1500] is ");
  expect_indexer_rejected([](auto& p) { p.k_scale[2] = kInf; p.k_scale[9] = kNan; }, "k_scale[2] is inf");
  expect_indexer_rejected([](auto& p) { p.w[100] = -kInf; p.w[300] = kNan; }, "w[100] is -inf");
  expect_indexer_rejected([](auto& p) { p.w[383] = kNan; }, "w[383] is ");
}

// The inputs in the CPU backend's order: q, k, k_scale, w, whatever the
// positions.
TEST(CheckFiniteGpu, IndexerInputOrder) {
  expect_indexer_rejected([](auto& p) { p.w[1] = kNan; p.k_scale[2999] = kInf; }, "k_scale[2999] is inf");
  expect_indexer_rejected([](auto& p) { p.k_scale[1] = kNan; p.k[2999 * 144 + 100] = kFp8Nan; }, "k[2999, 100]");
  expect_indexer_rejected([](auto& p) { p.k[1] = kFp8Nan; p.q[64 * 128 * 6 - 1] = kFp8Nan; }, "q: byte 49151");
}

TEST(CheckFiniteGpu, IndexerManagedMemoryAndUncheckedRanges) {
  const CudaRun managed{true, true}, unchecked{false, false};
  expect_indexer_rejected([](auto& p) { p.k[700 * 144 + 9] = kFp8Nan; p.k[701 * 144] = kFp8Nan; }, "k[700, 9]",
                          managed);
  expect_indexer_rejected([](auto& p) { p.w[200] = kInf; }, "w[200] is inf", unchecked);
}

TEST(CheckFiniteGpu, IndexerFiniteUnchanged) {
  const tools::IndexerProblem prob = indexer_problem();
  expect_same_as_unchecked([&](const SelectOptions& o) { return run_indexer(prob, o, Backend::kCuda); }, 512);
  expect_same_as_unchecked([&](const SelectOptions& o) { return run_indexer(prob, o, Backend::kCuda, {true, true}); },
                           512);
}

// --------------------------------------------------------------- topk -----

// Generated score matrices hold NaN outside each row's range.
tools::ScoresProblem scores_problem() {
  return testing::scores_problem(Distribution::kModelLike, Layout::kVarlenBatch, 8, 5000, 1024, 3);
}

void expect_topk_rejected(const std::function<void(tools::ScoresProblem&)>& plant, const std::string& expected,
                          CudaRun how = {}) {
  tools::ScoresProblem bad = scores_problem();
  plant(bad);
  expect_rejected([&](Backend b, CudaRun h) { return run_topk(bad, checked(1024), b, h); }, expected, how);
}

TEST(CheckFiniteGpu, TopkScores) {
  const tools::ScoresProblem prob = scores_problem();
  auto at = [&](std::int64_t t, std::int64_t offset) {
    return static_cast<std::size_t>(t * prob.stride + prob.ks[t] + offset);
  };
  const std::string row3 = "scores[3, " + std::to_string(prob.ks[3] + 10) + "] is ";
  expect_topk_rejected([&](auto& p) { p.scores[at(3, 10)] = kNan; p.scores[at(5, 0)] = kInf; }, row3);
  expect_topk_rejected([&](auto& p) { p.scores[at(3, 10)] = -kInf; p.scores[at(3, 11)] = kNan; }, row3 + "-inf");
  expect_topk_rejected([&](auto& p) { p.scores[at(7, 0)] = kInf; }, "scores[7, " + std::to_string(prob.ks[7]) + "]",
                       CudaRun{false, false});
  expect_topk_rejected([&](auto& p) { p.scores[at(1, 2)] = kNan; }, "scores[1, ", CudaRun{true, true});
}

TEST(CheckFiniteGpu, TopkFiniteUnchanged) {
  const tools::ScoresProblem prob = scores_problem();
  expect_same_as_unchecked([&](const SelectOptions& o) { return run_topk(prob, o, Backend::kCuda); }, 1024);
}

// -------------------------------------------------------------- paged -----

// Request 1 reads 100 positions, 2 reads 7 of its first block; next_n = 2.
// The generator fills every slot no row reads with NaN keys and scales.
tools::PagedProblem paged_problem() {
  return tools::make_paged_problem(
      testing::paged_spec(Distribution::kModelLike, 3, 2, 64, 16, {40, 100, 7}, false, 9));
}

std::int64_t key_at(const tools::PagedProblem& p, std::int64_t b, std::int32_t pos) {
  return paged_key_offset(p.block_size, tools::physical_slot(p, b, pos));
}
std::int64_t scale_at(const tools::PagedProblem& p, std::int64_t b, std::int32_t pos) {
  return paged_scale_offset(p.block_size, tools::physical_slot(p, b, pos));
}
std::string where(const tools::PagedProblem& p, std::int64_t b, std::int32_t pos) {
  return " of slot " + std::to_string(tools::physical_slot(p, b, pos)) + " (request " + std::to_string(b) +
         ", position " + std::to_string(pos) + ")";
}

void expect_paged_rejected(const std::function<void(tools::PagedProblem&)>& plant, const std::string& expected,
                           CudaRun how = {}) {
  tools::PagedProblem bad = paged_problem();
  plant(bad);
  expect_rejected([&](Backend b, CudaRun h) { return run_paged(bad, checked(512), b, h); }, expected, how);
}

TEST(CheckFiniteGpu, PagedEachInput) {
  const tools::PagedProblem p0 = paged_problem();
  expect_paged_rejected([](auto& p) { p.q[129] = kFp8Nan; p.q[9000] = kFp8Nan; }, "q: byte 129 is FP8 NaN");
  expect_paged_rejected(
      [&](auto& p) {
        p.kv_cache[key_at(p, 1, 37) + 77] = kFp8Nan;
        p.kv_cache[key_at(p, 1, 37) + 90] = kFp8NegNan;
        p.kv_cache[key_at(p, 2, 5)] = kFp8Nan;
      },
      "kv_cache: key byte 77" + where(p0, 1, 37) + " is FP8 NaN");
  expect_paged_rejected(
      [&](auto& p) {
        set_float(p.kv_cache, scale_at(p, 0, 39), kInf);
        set_float(p.kv_cache, scale_at(p, 1, 0), kNan);
      },
      "kv_cache: scale" + where(p0, 0, 39) + " is inf");
  // A position whose key and scale both offend: the key byte is named.
  expect_paged_rejected(
      [&](auto& p) {
        set_float(p.kv_cache, scale_at(p, 2, 3), kNan);
        p.kv_cache[key_at(p, 2, 3) + 127] = kFp8Nan;
        p.kv_cache[key_at(p, 2, 6) + 1] = kFp8Nan;
      },
      "kv_cache: key byte 127" + where(p0, 2, 3) + " is FP8 NaN");
  expect_paged_rejected([](auto& p) { p.w[70] = -kInf; p.w[300] = kNan; }, "w[70] is -inf");
  expect_paged_rejected([](auto& p) { p.w[64 * 5 + 1] = kNan; }, "w[321] is ", CudaRun{true, false});
}

// Slots no row reads are not checked: the generator's poison in the unused
// blocks and the tail of request 2's block, plus a NaN planted right after
// request 2's last position.
TEST(CheckFiniteGpu, PagedUnreadSlotsAndFiniteUnchanged) {
  tools::PagedProblem prob = paged_problem();
  prob.kv_cache[key_at(prob, 2, 7)] = kFp8Nan;
  set_float(prob.kv_cache, scale_at(prob, 2, 7), kNan);
  const Outcome cpu = run_paged(prob, checked(512), Backend::kCpu);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status.to_string();
  expect_same_as_unchecked([&](const SelectOptions& o) { return run_paged(prob, o, Backend::kCuda); }, 512);
  EXPECT_EQ(run_paged(prob, checked(512), Backend::kCuda).indices, cpu.indices);
}

// -------------------------------------------------------------- merge -----

void expect_merge_rejected(const std::function<void(MergeProblem&)>& plant, const std::string& expected,
                           CudaRun how = {}) {
  MergeProblem bad = merge_problem();
  plant(bad);
  expect_rejected([&](Backend b, CudaRun h) { return run_merge(bad, checked(512), b, h); }, expected, how);
}

TEST(CheckFiniteGpu, MergeValues) {
  const MergeProblem m = merge_problem();
  ASSERT_GE(m.indices[m.at(1, 2, 17)], 0);
  ASSERT_GE(m.indices[m.at(2, 0, 6)], 0);
  expect_merge_rejected([&](auto& p) { p.values[m.at(2, 0, 6)] = kInf; p.values[m.at(1, 2, 17)] = kNan; },
                        "values[1, 2, 17] is ");
  expect_merge_rejected([&](auto& p) { p.values[m.at(2, 0, 6)] = -kInf; p.values[m.at(2, 3, 1)] = kNan; },
                        "values[2, 0, 6] is -inf", CudaRun{true, true});
}

TEST(CheckFiniteGpu, MergeEmptySlotsAndFiniteUnchanged) {
  const MergeProblem m = merge_problem();  // NaN values in every empty slot
  expect_same_as_unchecked([&](const SelectOptions& o) { return run_merge(m, o, Backend::kCuda); }, 512);
}

}  // namespace
}  // namespace dsa
