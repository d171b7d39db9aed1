// The fused indexer top-k (CUDA) against the unfused CUDA pipeline on the
// same device inputs: indexer_scores (bit-identical scores, contract 2) then
// the standalone top-k. With smallest-index ties the fused answer must be the
// unfused one (identical indices, bit-identical values); with kAny ties the
// one checker judges it against the unfused scores. Every generator, layout
// and K; options; forced failure classes observed through the trace;
// determinism across runs and across T; graph capture; the math-only control;
// a too-small workspace.
// FusedGpuSweep.* and FusedGpuLong.* are the large ones (sanitizer filters).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "device_array.h"
#include "dsa_topk/dsa_topk.h"
#include "fused/fused.h"
#include "fused/plan.h"
#include "gpu_test_util.h"
#include "tools/checker.h"
#include "tools/generators.h"
#include "tools/problem.h"

namespace dsa {
namespace {

using fused::FusedHooks;
using fused::FusedMode;
using fused::FusedPath;
using fused::FusedRowTrace;
using testing::DeviceArray;
using testing::indexer_problem;
using testing::make_options;
using tools::Distribution;
using tools::IndexerProblem;
using tools::Layout;
using tools::TopkOutput;

constexpr int kAllK[] = {512, 1024, 2048};

SelectOptions deterministic(int k, IndexBase base = IndexBase::kAbsolute, bool sorted = true) {
  return make_options(k, TieBreak::kSmallestIndex, base, sorted);
}

std::string describe(const IndexerProblem& p, int K) {
  return p.name + " T=" + std::to_string(p.T) + " N=" + std::to_string(p.N) + " H=" + std::to_string(p.H) +
         " k_row_stride=" + std::to_string(p.k_row_stride) + " K=" + std::to_string(K);
}

// Row t of `p` gets length lengths[t] (clamped to N) at a scattered start.
IndexerProblem with_lengths(IndexerProblem p, const std::vector<std::int64_t>& lengths) {
  EXPECT_EQ(static_cast<std::int64_t>(lengths.size()), p.T);
  for (std::int64_t t = 0; t < p.T; ++t) {
    const std::int64_t len = std::min(lengths[t], p.N);
    const std::int64_t ks = (t * 7919) % (p.N - len + 1);
    p.ks[t] = static_cast<std::int32_t>(ks);
    p.ke[t] = static_cast<std::int32_t>(ks + len);
  }
  return p;
}

std::int64_t row_len(const IndexerProblem& p, std::int64_t t) { return p.ke[t] - p.ks[t]; }

// ------------------------------------------------------------- running ----

// An indexer problem's inputs in device memory.
class DeviceProblem {
 public:
  explicit DeviceProblem(const IndexerProblem& p)
      : host_(p), q_(p.q), k_(p.k), k_scale_(p.k_scale), w_(p.w), ks_(p.ks), ke_(p.ke) {}
  const IndexerProblem& host() const { return host_; }
  // Replaces the inputs by `p`'s, which must have the same shapes.
  void upload(const IndexerProblem& p) {
    ASSERT_EQ(p.q.size(), q_.size());
    ASSERT_EQ(p.k.size(), k_.size());
    ASSERT_EQ(p.ks.size(), ks_.size());
    q_.upload(p.q);
    k_.upload(p.k);
    k_scale_.upload(p.k_scale);
    w_.upload(p.w);
    ks_.upload(p.ks);
    ke_.upload(p.ke);
  }
  // The problem's shapes with device pointers.
  IndexerTopkParams params(std::int32_t* indices, float* values, const SelectOptions& options) const {
    IndexerTopkParams p = host_.params(indices, values, options);
    p.q = q_.get();
    p.k = k_.get();
    p.k_scale = k_scale_.get();
    p.w = w_.get();
    p.ks = ks_.get();
    p.ke = ke_.get();
    return p;
  }

 private:
  const IndexerProblem& host_;
  DeviceArray<std::uint8_t> q_, k_;
  DeviceArray<float> k_scale_, w_;
  DeviceArray<std::int32_t> ks_, ke_;
};

// Poisoned [T, K] outputs in device memory.
struct DeviceOutput {
  DeviceOutput(std::int64_t T, int K, bool want_values)
      : T(T), K(K), indices(static_cast<std::size_t>(T) * K), values(want_values ? static_cast<std::size_t>(T) * K : 0) {
    indices.poison();
    if (want_values) values.poison();
  }
  TopkOutput download() const {
    TopkOutput out;
    out.T = T;
    out.K = K;
    out.indices = indices.download();
    if (values.size() != 0) out.values = values.download();
    return out;
  }
  std::int64_t T;
  int K;
  DeviceArray<std::int32_t> indices;
  DeviceArray<float> values;
};

bool all_poison(const void* data, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(data);
  return std::all_of(b, b + bytes, [](unsigned char c) { return c == testing::kPoison; });
}

// The oracle: the unfused CUDA pipeline on the same device inputs. The score
// matrix ([T, stride], poisoned outside each row's range) is computed once;
// the standalone top-k selects from it with any options.
class Unfused {
 public:
  explicit Unfused(const DeviceProblem& dev)
      : dev_(dev), stride_((dev.host().N + 3) / 4 * 4), scores_(static_cast<std::size_t>(dev.host().T * stride_)) {
    scores_.poison();
    IndexerScoresParams p;
    static_cast<IndexerInputs&>(p) = dev.params(nullptr, nullptr, SelectOptions{});
    p.scores = scores_.get();
    p.score_stride = stride_;
    ExecutionContext ctx;
    ctx.backend = Backend::kCuda;
    const Status st = indexer_scores(p, ctx);
    EXPECT_TRUE(st.ok()) << "unfused indexer_scores: " << st.to_string();
  }

  TopkOutput select(const SelectOptions& options, bool want_values) const {
    const IndexerProblem& prob = dev_.host();
    DeviceOutput out(prob.T, options.k, want_values);
    const IndexerTopkParams in = dev_.params(nullptr, nullptr, options);
    TopkParams p;
    p.scores = scores_.get();
    p.ks = in.ks;
    p.ke = in.ke;
    p.num_rows = prob.T;
    p.num_cols = prob.N;
    p.score_stride = stride_;
    p.indices = out.indices.get();
    p.values = out.values.get();
    p.options = options;
    ExecutionContext ctx;
    ctx.backend = Backend::kCuda;
    const Status st = topk(p, ctx);
    EXPECT_TRUE(st.ok()) << "unfused topk: " << st.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return out.download();
  }

  // The matrix on the host (downloaded once).
  const std::vector<float>& host_scores() {
    if (host_scores_.empty()) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      host_scores_ = scores_.download();
    }
    return host_scores_;
  }
  std::int64_t stride() const { return stride_; }

  // The one checker, against these scores.
  tools::CheckReport check(const SelectOptions& options, const TopkOutput& out) {
    const IndexerProblem& prob = dev_.host();
    tools::CheckInput in;
    in.T = prob.T;
    in.ks = prob.ks.data();
    in.ke = prob.ke.data();
    in.row_scores = tools::dense_row_scores(host_scores().data(), stride_, prob.ks.data(), prob.ke.data());
    in.indices = out.indices.data();
    in.values = out.values.empty() ? nullptr : out.values.data();
    in.options = options;
    return tools::check_topk(in);
  }

 private:
  const DeviceProblem& dev_;
  std::int64_t stride_;
  DeviceArray<float> scores_;
  std::vector<float> host_scores_;
};

struct FusedResult {
  TopkOutput out;
  std::vector<FusedRowTrace> trace;  // [T] when run through hooks
};

// The fused operator: through the public dsa::indexer_topk (workspace from
// indexer_topk_workspace_size; the route by shape) when `hooks` is null,
// else through fused::launch_indexer_topk with the hooks and a trace. Hooks
// whose route is kByShape are pinned to the fused route (tests that observe
// or force the fused stages must run them whatever the shape) unless
// `keep_route`.
FusedResult run_fused(const DeviceProblem& dev, const SelectOptions& options, bool want_values,
                      const FusedHooks* hooks = nullptr, bool keep_route = false) {
  const IndexerProblem& prob = dev.host();
  DeviceOutput out(prob.T, options.k, want_values);
  const IndexerTopkParams p = dev.params(out.indices.get(), out.values.get(), options);
  DeviceArray<FusedRowTrace> trace(hooks ? prob.T : 0);
  std::size_t bytes = 0;
  Status st;
  FusedHooks h;  // with hooks: the ones the launch takes, the route pinned
  if (hooks == nullptr) {
    st = indexer_topk_workspace_size(p, Backend::kCuda, &bytes);
    EXPECT_TRUE(st.ok()) << st.to_string();
  } else {
    st = validate(p, Backend::kCuda);
    EXPECT_TRUE(st.ok()) << st.to_string();
    h = *hooks;
    if (h.route == FusedHooks::Route::kByShape && !keep_route) h.route = FusedHooks::Route::kFused;
    bytes = fused::workspace_size(p, h);
  }
  DeviceArray<unsigned char> workspace(bytes);
  if (hooks == nullptr) {
    ExecutionContext ctx;
    ctx.backend = Backend::kCuda;
    ctx.workspace = workspace.get();
    ctx.workspace_bytes = bytes;
    st = indexer_topk(p, ctx);
  } else {
    trace.poison();
    h.trace = trace.get();
    st = fused::launch_indexer_topk(p, nullptr, workspace.get(), bytes, h);
  }
  EXPECT_TRUE(st.ok()) << "fused: " << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  FusedResult r;
  r.out = out.download();
  if (hooks) r.trace = trace.download();
  return r;
}

// Both routes on problems of at most kUnfusedMaxKeys keys: null runs the
// public operator (the unfused route by shape), the hooks pin the fused one.
const FusedHooks kFusedRoute = [] {
  FusedHooks h;
  h.route = FusedHooks::Route::kFused;
  return h;
}();
const FusedHooks* const kBothRoutes[] = {nullptr, &kFusedRoute};

// ------------------------------------------------------------ judging -----

std::string slot_text(const TopkOutput& o, std::size_t i) {
  std::string s = std::to_string(o.indices[i]);
  if (!o.values.empty()) {
    std::uint32_t bits;
    std::memcpy(&bits, &o.values[i], 4);
    char buf[48];
    std::snprintf(buf, sizeof(buf), " (%.9g, 0x%08X)", static_cast<double>(o.values[i]), bits);
    s += buf;
  }
  return s;
}

// Identical results: indices equal and values bit-equal. With `same_order`
// slot by slot; without, each row as a set of (index, value bits) (the order
// of an unsorted row is free). Reports the first few differing rows.
void expect_same_result(const TopkOutput& got, const TopkOutput& want, bool same_order, const char* what) {
  ASSERT_EQ(got.indices.size(), want.indices.size()) << what;
  ASSERT_EQ(got.values.size(), want.values.size()) << what;
  const bool values = !got.values.empty();
  std::int64_t bad_rows = 0;
  for (std::int64_t t = 0; t < got.T; ++t) {
    using Slot = std::pair<std::int32_t, std::uint32_t>;
    std::vector<Slot> a(got.K), b(got.K);
    for (int i = 0; i < got.K; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * got.K + i;
      std::uint32_t va = 0, vb = 0;
      if (values) {
        std::memcpy(&va, &got.values[at], 4);
        std::memcpy(&vb, &want.values[at], 4);
      }
      a[i] = {got.indices[at], va};
      b[i] = {want.indices[at], vb};
    }
    if (!same_order) {
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
    }
    if (a == b) continue;
    if (++bad_rows <= 4) {
      const auto diff = std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
      const std::size_t at = static_cast<std::size_t>(t) * got.K + diff;
      ADD_FAILURE() << what << ": row " << t << (same_order ? " slot " : " sorted-by-index position ") << diff
                    << ": got " << (same_order ? slot_text(got, at) : std::to_string(a[diff].first)) << ", want "
                    << (same_order ? slot_text(want, at) : std::to_string(b[diff].first));
    }
  }
  EXPECT_EQ(bad_rows, 0) << what << ": rows that differ";
}

// The fused result judged against the unfused pipeline: deterministic ties
// must give exactly its answer (slot by slot when sorted); kAny ties must be a
// valid top-k of the unfused scores.
void expect_matches_unfused(Unfused& oracle, const SelectOptions& options, const TopkOutput& fused_out) {
  if (options.ties == TieBreak::kSmallestIndex) {
    expect_same_result(fused_out, oracle.select(options, !fused_out.values.empty()), options.sorted,
                       "fused vs unfused");
  } else {
    const tools::CheckReport report = oracle.check(options, fused_out);
    EXPECT_TRUE(report.ok()) << report.summary();
  }
}

// -------------------------------------------------------------- sweep -----

// Every distribution x layout x K on small awkward shapes (T, N not multiples
// of the tiles, H = 64 and 32, strided k rows), deterministic sorted output
// with values against the unfused answer exactly, and kAny against the
// unfused scores; index bases and values alternate.
TEST(FusedGpuSweep, EveryDistributionLayoutAndK) {
  constexpr std::int64_t kTs[] = {37, 64, 100, 130, 199, 1, 65};
  constexpr std::int64_t kStrides[] = {0, 144, 0, 256};
  int i = 0;
  for (Distribution dist : tools::all_distributions()) {
    for (Layout layout : tools::all_layouts()) {
      for (int K : kAllK) {
        ++i;
        const std::int64_t N_choices[] = {3 * K + 77, 8191, 12345, 20011, 4 * K + 1};
        const std::int64_t N = N_choices[i % 5];
        const std::int64_t T = kTs[i % 7];
        const int H = i % 3 == 0 ? 32 : 64;
        const IndexerProblem prob = indexer_problem(dist, layout, T, N, K, H, kStrides[i % 4], 100 + i);
        SCOPED_TRACE(describe(prob, K));
        DeviceProblem dev(prob);
        Unfused oracle(dev);
        const IndexBase base = i % 2 ? IndexBase::kRelative : IndexBase::kAbsolute;
        // The select stage's two block widths (by T these small T would all
        // get the wide one): each option set runs on both across the sweep.
        FusedHooks narrow, wide;
        narrow.select_width = FusedHooks::SelectWidth::kNarrow;
        wide.select_width = FusedHooks::SelectWidth::kWide;
        const SelectOptions det = deterministic(K, base);
        expect_matches_unfused(oracle, det, run_fused(dev, det, true, i % 2 ? &narrow : &wide).out);
        const SelectOptions any = make_options(K, TieBreak::kAny, i % 2 ? IndexBase::kAbsolute : IndexBase::kRelative,
                                               i % 3 == 1);
        expect_matches_unfused(oracle, any, run_fused(dev, any, i % 2 == 0, i % 2 ? &wide : &narrow).out);
      }
    }
  }
}

// ------------------------------------------------------------ options -----

// Every combination of ties, index base, sorted and values on a tie-heavy
// problem (small integers: many scores equal to the K-th).
TEST(FusedGpu, OptionMatrix) {
  const IndexerProblem prob = indexer_problem(Distribution::kSmallInteger, Layout::kVarlenBatch, 12, 10007, 1024);
  DeviceProblem dev(prob);
  Unfused oracle(dev);
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    for (IndexBase base : {IndexBase::kAbsolute, IndexBase::kRelative}) {
      for (bool sorted : {false, true}) {
        for (bool values : {false, true}) {
          for (const FusedHooks* route : kBothRoutes) {
            const SelectOptions o = make_options(1024, ties, base, sorted);
            SCOPED_TRACE(::testing::Message() << "ties " << static_cast<int>(ties) << " base "
                                              << static_cast<int>(base) << " sorted " << sorted << " values "
                                              << values << (route == nullptr ? " unfused (by shape)" : " fused"));
            const FusedResult r = run_fused(dev, o, values, route);
            expect_matches_unfused(oracle, o, r.out);
            // The checker as well in deterministic mode: sorted order, padding.
            const tools::CheckReport report = oracle.check(o, r.out);
            EXPECT_TRUE(report.ok()) << report.summary();
          }
        }
      }
    }
  }
}

// Small-integer scores are exact in fp32, so the CPU reference's scores are
// the operator's: the fused result passes the checker against them too.
TEST(FusedGpu, SmallIntegerAgainstCpuReference) {
  for (int K : {512, 1024}) {
    const IndexerProblem prob = indexer_problem(Distribution::kSmallInteger, Layout::kBoundary, 20, 3001, K, 64, 0, 9);
    DeviceProblem dev(prob);
    for (const SelectOptions& o : {deterministic(K, IndexBase::kRelative),
                                   make_options(K, TieBreak::kAny, IndexBase::kAbsolute, false)}) {
      for (const FusedHooks* route : kBothRoutes) {
        const tools::CheckReport report = tools::check_problem(prob, o, run_fused(dev, o, true, route).out);
        EXPECT_TRUE(report.ok()) << "K=" << K << (route == nullptr ? " unfused: " : " fused: ") << report.summary();
      }
    }
  }
}

// The route by shape: keys up to kUnfusedMaxKeys unfused; one more key
// unfused while every row fits one batch of the buffer (T = 40), fused past
// it (T = 600: 600 x 131076 floats > 256 MB); the trace says which. The
// unfused route pinned at a longer N; every answer the oracle's.
TEST(FusedGpu, RouteByShapeAndUnfusedRouteMatchOracle) {
  const int K = 2048;
  const std::int64_t past = fused::kUnfusedMaxKeys + 1;
  for (auto [T, N] : {std::pair<std::int64_t, std::int64_t>{40, fused::kUnfusedMaxKeys}, {40, past}, {600, past}}) {
    const bool want_unfused = fused::unfused_by_shape(T, N);
    EXPECT_EQ(want_unfused, T == 40) << "T=" << T << " N=" << N;  // the rule itself
    const IndexerProblem prob = indexer_problem(Distribution::kModelLike, Layout::kCausalSuffix, T, N, K, 64, 0, 21);
    DeviceProblem dev(prob);
    Unfused oracle(dev);
    SCOPED_TRACE(describe(prob, K));
    FusedHooks by_shape, unfused;  // by_shape: the operator's default route
    unfused.route = FusedHooks::Route::kUnfused;
    for (const SelectOptions& o : {deterministic(K), make_options(K, TieBreak::kAny, IndexBase::kRelative, false)}) {
      const FusedResult a = run_fused(dev, o, true, &by_shape, /*keep_route=*/true);
      expect_matches_unfused(oracle, o, a.out);
      const FusedPath want = want_unfused ? FusedPath::kUnfused : FusedPath::kCertified;
      for (std::int64_t t = 0; t < prob.T; ++t) {
        if (row_len(prob, t) <= K) continue;
        const FusedPath got = a.trace[t].path;
        EXPECT_TRUE(got == want || (want == FusedPath::kCertified && got == FusedPath::kRepaired))
            << "row " << t << " path " << static_cast<int>(got);
      }
      const FusedResult b = run_fused(dev, o, true, &unfused);
      expect_matches_unfused(oracle, o, b.out);
      for (std::int64_t t = 0; t < prob.T; ++t) {
        EXPECT_EQ(static_cast<int>(b.trace[t].path), static_cast<int>(FusedPath::kUnfused)) << "row " << t;
      }
    }
  }
}

// The unfused route in many batches (FusedHooks::unfused_batch_rows): each
// batch's rows, ranges, queries, weights and outputs are offsets into the
// caller's arrays, and every batch reuses one buffer, so an offset off by
// a row or a top-k that read the buffer after the next batch's scoring
// shows as a row that differs from the unfused answer. Batches of 1 row,
// of sizes that leave a short last batch, and of the whole problem.
TEST(FusedGpu, UnfusedRouteBatchesMatchOracle) {
  const std::int64_t T = 67, N = 6100;
  for (auto [dist, layout] : {std::pair{Distribution::kModelLike, Layout::kCausalSuffix},
                              std::pair{Distribution::kTies, Layout::kVarlenBatch},
                              std::pair{Distribution::kModelLike, Layout::kBoundary}}) {
    const IndexerProblem prob = indexer_problem(dist, layout, T, N, 2048, 64, 0, 77);
    DeviceProblem dev(prob);
    Unfused oracle(dev);
    for (std::int64_t rows : {std::int64_t{1}, std::int64_t{5}, std::int64_t{32}, T}) {
      FusedHooks unfused;
      unfused.route = FusedHooks::Route::kUnfused;
      unfused.unfused_batch_rows = rows;
      for (int K : {2048, 512}) {
        SCOPED_TRACE(describe(prob, K) + " batch rows " + std::to_string(rows));
        const SelectOptions det = deterministic(K);
        expect_matches_unfused(oracle, det, run_fused(dev, det, true, &unfused).out);
        const SelectOptions any = make_options(K, TieBreak::kAny, IndexBase::kRelative, false);
        expect_matches_unfused(oracle, any, run_fused(dev, any, false, &unfused).out);
      }
    }
  }
}

// -------------------------------------------------------- forced paths ----

// Row lengths around every boundary: empty, 1, K-1, K, K+1, the candidate
// capacity -1/0/+1, and rows longer than the capacity.
std::vector<std::int64_t> boundary_lengths(int K, std::int64_t capacity, std::int64_t N) {
  return {0, 1, K - 1, K, K + 1, 2 * K + 3, capacity - 1, capacity, capacity + 1, N - 5, N, N / 2 + 7};
}

// The forced threshold replaces every row's tau. Key 0: every key passes;
// rows up to the capacity are certified (count = len), longer ones overflow
// and are repaired. A key above every score (+1e30, 0xFFFFFFFF): nothing
// passes, every row longer than K underflows and is repaired. Both tie modes
// must still give the unfused answer.
TEST(FusedGpu, ForcedFailureClasses) {
  for (Distribution dist : {Distribution::kModelLike, Distribution::kTies, Distribution::kDeadRelu}) {
    for (int K : kAllK) {
      const std::int64_t capacity = fused::candidate_capacity(K);
      const std::int64_t N = std::max<std::int64_t>(20000, 2 * capacity + 77);
      const std::vector<std::int64_t> lengths = boundary_lengths(K, capacity, N);
      const IndexerProblem prob = with_lengths(
          indexer_problem(dist, Layout::kFull, static_cast<std::int64_t>(lengths.size()), N, K, 64, 0, 21 + K),
          lengths);
      DeviceProblem dev(prob);
      Unfused oracle(dev);
      for (std::uint32_t key : {0u, score_key(1e30f), 0xFFFFFFFFu}) {
        FusedHooks hooks;
        hooks.force_threshold = true;
        hooks.forced_threshold_key = key;
        for (const SelectOptions& o : {deterministic(K), make_options(K, TieBreak::kAny, IndexBase::kRelative, false)}) {
          SCOPED_TRACE(::testing::Message() << describe(prob, K) << " forced key 0x" << std::hex << key << std::dec
                                            << (o.ties == TieBreak::kAny ? " any" : " deterministic"));
          const FusedResult r = run_fused(dev, o, true, &hooks);
          expect_matches_unfused(oracle, o, r.out);
          for (std::int64_t t = 0; t < prob.T; ++t) {
            const std::int64_t len = row_len(prob, t);
            if (len <= K) continue;  // never enters the pipeline
            const bool certified = key == 0 && len <= capacity;
            EXPECT_EQ(static_cast<int>(r.trace[t].path),
                      static_cast<int>(certified ? FusedPath::kCertified : FusedPath::kRepaired))
                << "row " << t << " len " << len << " capacity " << capacity;
            EXPECT_EQ(r.trace[t].count, static_cast<std::uint32_t>(key == 0 ? len : 0)) << "row " << t;
            EXPECT_EQ(r.trace[t].threshold_key, key) << "row " << t;
          }
        }
      }
    }
  }
}

// A forced tau inside the score range: each row's count is exact (the
// unfused scores say how many keys reach tau), and the count alone picks the
// path: K <= count <= capacity is certified, anything else repaired.
TEST(FusedGpu, ForcedThresholdCountsAreExact) {
  for (int K : {512, 2048}) {
    const std::int64_t capacity = fused::candidate_capacity(K);
    const std::int64_t N = std::max<std::int64_t>(30000, 3 * capacity);
    const std::int64_t T = 24;
    std::vector<std::int64_t> lengths;
    for (std::int64_t t = 0; t < T; ++t) lengths.push_back(K + 1 + (N - K - 1) * t / (T - 1));
    const IndexerProblem prob =
        with_lengths(indexer_problem(Distribution::kModelLike, Layout::kFull, T, N, K, 64, 0, 5), lengths);
    DeviceProblem dev(prob);
    Unfused oracle(dev);
    const std::vector<float>& scores = oracle.host_scores();
    // tau: the key of rank 2 * capacity / 3 of the middle row.
    const std::int64_t mid = T / 2;
    std::vector<std::uint32_t> keys;
    for (std::int32_t s = prob.ks[mid]; s < prob.ke[mid]; ++s) keys.push_back(score_key(scores[mid * oracle.stride() + s]));
    const std::size_t rank = static_cast<std::size_t>(2 * capacity / 3);
    std::nth_element(keys.begin(), keys.begin() + rank, keys.end(), std::greater<>());
    FusedHooks hooks;
    hooks.force_threshold = true;
    hooks.forced_threshold_key = keys[rank];
    int certified = 0, repaired = 0;
    for (const SelectOptions& o : {deterministic(K, IndexBase::kRelative, false),
                                   make_options(K, TieBreak::kAny, IndexBase::kAbsolute, true)}) {
      SCOPED_TRACE(describe(prob, K) + (o.ties == TieBreak::kAny ? " any" : " deterministic"));
      const FusedResult r = run_fused(dev, o, true, &hooks);
      expect_matches_unfused(oracle, o, r.out);
      for (std::int64_t t = 0; t < T; ++t) {
        std::int64_t count = 0;
        for (std::int32_t s = prob.ks[t]; s < prob.ke[t]; ++s) {
          count += score_key(scores[t * oracle.stride() + s]) >= hooks.forced_threshold_key;
        }
        const bool want_certified = count >= K && count <= capacity;
        (want_certified ? certified : repaired) += 1;
        EXPECT_EQ(r.trace[t].count, static_cast<std::uint32_t>(count)) << "row " << t;
        // Model-like scores tie with tau about once: the tie budget never binds.
        EXPECT_EQ(r.trace[t].unstaged, 0u) << "row " << t;
        EXPECT_EQ(static_cast<int>(r.trace[t].path),
                  static_cast<int>(want_certified ? FusedPath::kCertified : FusedPath::kRepaired))
            << "row " << t << " count " << count;
      }
    }
    // The data must have exercised both outcomes, or the test proves little.
    EXPECT_GT(certified, 0) << "K=" << K;
    EXPECT_GT(repaired, 0) << "K=" << K;
  }
}

// Rows flooded by one tied value: all-equal rows of the ties generator and
// dead ReLU's zeros (~10 % of the keys score above zero here, fewer than K,
// so tau is 0). Their sampled tau is the tied value, so far more than the
// capacity's worth of scores reach it; the filter stages the ties only up to
// its lanes' budgets and counts the rest. With any-index ties such rows are
// certified (every score above tau plus enough ties are staged); with
// smallest-index ties a row that left ties out is repaired. Either way the
// answer is the unfused one, the trace's counts are exact, and its path is
// the certificate's verdict on them.
TEST(FusedGpu, FloodedRowsCertifyWithinTheTieBudget) {
  const int K = 2048;
  const std::int64_t capacity = fused::candidate_capacity(K);
  for (Distribution dist : {Distribution::kTies, Distribution::kDeadRelu}) {
    for (std::int64_t T : {32, 300}) {  // 300: rows split across more units per CTA run
      const IndexerProblem prob = indexer_problem(dist, Layout::kCausalSuffix, T, 2 * capacity + 500, K, 64, 0, 77);
      DeviceProblem dev(prob);
      Unfused oracle(dev);
      const std::vector<float>& scores = oracle.host_scores();
      int flooded_certified = 0, flooded_left_out = 0;
      for (const SelectOptions& o : {make_options(K, TieBreak::kAny, IndexBase::kAbsolute, false), deterministic(K)}) {
        SCOPED_TRACE(describe(prob, K) + (o.ties == TieBreak::kAny ? " any" : " deterministic"));
        FusedHooks observe;
        const FusedResult r = run_fused(dev, o, true, &observe);
        expect_matches_unfused(oracle, o, r.out);
        for (std::int64_t t = 0; t < prob.T; ++t) {
          const std::int64_t len = row_len(prob, t);
          if (len <= K) continue;
          const std::uint32_t tau = r.trace[t].threshold_key;
          std::int64_t count = 0, ties = 0;
          for (std::int32_t s = prob.ks[t]; s < prob.ke[t]; ++s) {
            const std::uint32_t key = score_key(scores[t * oracle.stride() + s]);
            count += key >= tau;
            ties += key == tau;
          }
          EXPECT_EQ(r.trace[t].count, static_cast<std::uint32_t>(count)) << "row " << t;
          const std::int64_t unstaged = r.trace[t].unstaged;
          if (tau <= kNegInfKey) {
            EXPECT_EQ(unstaged, 0) << "row " << t;  // every key passes: no budget
          } else {
            EXPECT_LE(unstaged, ties) << "row " << t;  // only ties are ever left out
          }
          const bool want = fused::fused_certified(count - unstaged, unstaged, len, K, capacity,
                                                   o.ties == TieBreak::kSmallestIndex);
          EXPECT_EQ(r.trace[t].path == FusedPath::kCertified, want)
              << "row " << t << " count " << count << " ties " << ties << " unstaged " << unstaged;
          if (count > capacity && o.ties == TieBreak::kAny) flooded_certified += want ? 1 : 0;
          if (count > capacity) flooded_left_out += unstaged > 0 ? 1 : 0;
        }
      }
      // The data must flood rows past the budget, and the any-ties run must
      // certify them (or the budget proves nothing).
      EXPECT_GT(flooded_left_out, 0) << tools::to_string(dist) << " T " << T;
      EXPECT_GT(flooded_certified, 0) << tools::to_string(dist) << " T " << T;
    }
  }
}

// Unforced, on the same boundary lengths: whatever path each row takes, the
// answer is the unfused one and the trace's path is one of the two.
TEST(FusedGpu, BoundaryLengthsUnforced) {
  for (int K : kAllK) {
    const std::int64_t capacity = fused::candidate_capacity(K);
    const std::int64_t N = std::max<std::int64_t>(20000, 2 * capacity + 77);
    const std::vector<std::int64_t> lengths = boundary_lengths(K, capacity, N);
    for (Distribution dist : {Distribution::kModelLike, Distribution::kShifted, Distribution::kSmallInteger}) {
      const IndexerProblem prob = with_lengths(
          indexer_problem(dist, Layout::kFull, static_cast<std::int64_t>(lengths.size()), N, K, 32, 160, 3 + K),
          lengths);
      DeviceProblem dev(prob);
      Unfused oracle(dev);
      SCOPED_TRACE(describe(prob, K));
      FusedHooks observe;
      const FusedResult r = run_fused(dev, deterministic(K), true, &observe);
      expect_matches_unfused(oracle, deterministic(K), r.out);
      for (std::int64_t t = 0; t < prob.T; ++t) {
        if (row_len(prob, t) <= K) continue;
        const auto path = r.trace[t].path;
        EXPECT_TRUE(path == FusedPath::kCertified || path == FusedPath::kRepaired)
            << "row " << t << " path " << static_cast<int>(path);
      }
      const SelectOptions any = make_options(K, TieBreak::kAny, IndexBase::kAbsolute, false);
      expect_matches_unfused(oracle, any, run_fused(dev, any, false).out);
    }
  }
}

// -------------------------------------------------------- determinism -----

// Smallest-index ties: two runs are bit-identical, sorted or not.
TEST(FusedGpu, DeterministicRunsBitIdentical) {
  const IndexerProblem prob = indexer_problem(Distribution::kTies, Layout::kVarlenBatch, 40, 30000, 1024);
  DeviceProblem dev(prob);
  Unfused oracle(dev);
  for (bool sorted : {false, true}) {
    for (const FusedHooks* route : kBothRoutes) {
      SCOPED_TRACE(route == nullptr ? "unfused (by shape)" : "fused");
      const SelectOptions o = deterministic(1024, IndexBase::kAbsolute, sorted);
      const FusedResult a = run_fused(dev, o, true, route), b = run_fused(dev, o, true, route);
      expect_same_result(a.out, b.out, /*same_order=*/true, sorted ? "sorted run 1 vs 2" : "unsorted run 1 vs 2");
      expect_matches_unfused(oracle, o, a.out);
    }
  }
}

// A problem whose rows are `rows` (q, w, ks, ke of the named problem's row)
// over `keys`' keys; every source has keys.N keys and keys.H heads.
IndexerProblem assemble(const IndexerProblem& keys, const std::vector<std::pair<const IndexerProblem*, std::int64_t>>& rows) {
  IndexerProblem p = keys;
  p.T = static_cast<std::int64_t>(rows.size());
  p.q.clear();
  p.w.clear();
  p.ks.clear();
  p.ke.clear();
  const std::size_t q_row = static_cast<std::size_t>(keys.H) * kHeadDim;
  for (const auto& [src, t] : rows) {
    EXPECT_EQ(src->N, keys.N);
    EXPECT_EQ(src->H, keys.H);
    p.q.insert(p.q.end(), src->q.begin() + t * q_row, src->q.begin() + (t + 1) * q_row);
    p.w.insert(p.w.end(), src->w.begin() + t * keys.H, src->w.begin() + (t + 1) * keys.H);
    p.ks.push_back(src->ks[t]);
    p.ke.push_back(src->ke[t]);
  }
  return p;
}

// A row's deterministic answer does not depend on T or its position: the
// problem alone, reversed, each row alone (T = 1: the key range split across
// CTAs differently), and with other rows prepended and appended.
TEST(FusedGpu, DeterministicRowIndependentOfT) {
  const std::int64_t N = 65536 + 37;
  for (Distribution dist : {Distribution::kTies, Distribution::kModelLike}) {
    const IndexerProblem prob = indexer_problem(dist, Layout::kContextParallel, 24, N, 2048, 64, 0, 77);
    const IndexerProblem other = indexer_problem(dist, Layout::kVarlenBatch, 150, N, 2048, 64, 0, 78);
    SCOPED_TRACE(describe(prob, 2048));
    for (bool sorted : {false, true}) {
      const SelectOptions o = deterministic(2048, IndexBase::kAbsolute, sorted);
      DeviceProblem dev(prob);
      const FusedResult base = run_fused(dev, o, true);
      Unfused oracle(dev);
      expect_matches_unfused(oracle, o, base.out);
      const auto expect_row = [&](const FusedResult& r, std::int64_t at, std::int64_t row, const char* variant) {
        const std::size_t K = 2048;
        const bool same = std::equal(r.out.indices.begin() + at * K, r.out.indices.begin() + (at + 1) * K,
                                     base.out.indices.begin() + row * K) &&
                          std::memcmp(&r.out.values[at * K], &base.out.values[row * K], K * sizeof(float)) == 0;
        EXPECT_TRUE(same) << variant << ": row " << row << " (at " << at << " of T = " << r.out.T << ") differs";
      };
      // Reversed, and embedded between 40 and 110 other rows.
      std::vector<std::pair<const IndexerProblem*, std::int64_t>> reversed, embedded;
      for (std::int64_t t = prob.T - 1; t >= 0; --t) reversed.emplace_back(&prob, t);
      for (std::int64_t t = 0; t < 40; ++t) embedded.emplace_back(&other, t);
      for (std::int64_t t = 0; t < prob.T; ++t) embedded.emplace_back(&prob, t);
      for (std::int64_t t = 40; t < 150; ++t) embedded.emplace_back(&other, t);
      const IndexerProblem rev = assemble(prob, reversed), emb = assemble(prob, embedded);
      DeviceProblem dev_rev(rev), dev_emb(emb);
      const FusedResult r_rev = run_fused(dev_rev, o, true), r_emb = run_fused(dev_emb, o, true);
      for (std::int64_t t = 0; t < prob.T; ++t) {
        expect_row(r_rev, prob.T - 1 - t, t, "reversed");
        expect_row(r_emb, 40 + t, t, "embedded");
      }
      for (std::int64_t t : {std::int64_t{0}, std::int64_t{7}, prob.T - 1}) {
        const IndexerProblem one = assemble(prob, {{&prob, t}});
        DeviceProblem dev_one(one);
        expect_row(run_fused(dev_one, o, true), 0, t, "alone");
      }
    }
  }
}

// ------------------------------------------------------------ runtime -----

// Captured in a CUDA graph (ranges unchecked, as an engine replays) and
// replayed with new data in the same buffers: the direct run's answer.
TEST(FusedGpu, GraphCaptureReplaysWithNewData) {
  const int K = 2048;
  const IndexerProblem a = indexer_problem(Distribution::kModelLike, Layout::kVarlenBatch, 33, 20011, K, 64, 0, 1);
  const IndexerProblem b = indexer_problem(Distribution::kTies, Layout::kVarlenBatch, 33, 20011, K, 64, 0, 2);
  const SelectOptions o = deterministic(K);
  DeviceProblem dev(a);
  DeviceOutput out(a.T, K, true);
  const IndexerTopkParams p = dev.params(out.indices.get(), out.values.get(), o);
  std::size_t bytes = 0;
  ASSERT_TRUE(indexer_topk_workspace_size(p, Backend::kCuda, &bytes).ok());
  DeviceArray<unsigned char> workspace(bytes);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ExecutionContext ctx;
  ctx.backend = Backend::kCuda;
  ctx.stream = stream;
  ctx.workspace = workspace.get();
  ctx.workspace_bytes = bytes;
  ctx.check_ranges = false;
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status st = indexer_topk(p, ctx);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(st.ok()) << "during capture: " << st.to_string();
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const IndexerProblem* prob : {&a, &b}) {
    dev.upload(*prob);
    out.indices.poison();
    out.values.poison();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads ran on the legacy stream
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    DeviceProblem direct(*prob);
    expect_same_result(out.download(), run_fused(direct, o, true).out, true,
                       prob == &a ? "graph replay (capture data)" : "graph replay (new data)");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The control build writes no indices or values; its checksum is the xor of
// every valid score's bits (sinks.cuh), i.e. exactly the unfused scores.
TEST(FusedGpu, MathOnlyControlWritesChecksumOnly) {
  for (int H : {64, 32}) {
    const int K = 2048;
    const IndexerProblem prob =
        indexer_problem(Distribution::kModelLike, Layout::kContextParallel, 70, 20011, K, H, 0, 4);
    SCOPED_TRACE(describe(prob, K));
    DeviceProblem dev(prob);
    DeviceOutput out(prob.T, K, true);
    const IndexerTopkParams p = dev.params(out.indices.get(), out.values.get(), deterministic(K));
    const std::size_t bytes = fused::workspace_size(p);
    DeviceArray<unsigned char> workspace(bytes);
    DeviceArray<std::uint32_t> checksum(1);
    ASSERT_EQ(cudaMemset(checksum.get(), 0, sizeof(std::uint32_t)), cudaSuccess);
    FusedHooks hooks;
    hooks.mode = FusedMode::kMathOnly;
    for (std::uint32_t* word : {static_cast<std::uint32_t*>(nullptr), checksum.get()}) {
      hooks.checksum = word;
      const Status st = fused::launch_indexer_topk(p, nullptr, workspace.get(), bytes, hooks);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    const TopkOutput o = out.download();
    EXPECT_TRUE(all_poison(o.indices.data(), o.indices.size() * sizeof(std::int32_t))) << "indices were written";
    EXPECT_TRUE(all_poison(o.values.data(), o.values.size() * sizeof(float))) << "values were written";
    Unfused oracle(dev);
    const std::vector<float>& scores = oracle.host_scores();
    std::uint32_t want = 0;
    for (std::int64_t t = 0; t < prob.T; ++t) {
      for (std::int32_t s = prob.ks[t]; s < prob.ke[t]; ++s) {
        std::uint32_t bits;
        std::memcpy(&bits, &scores[t * oracle.stride() + s], 4);
        want ^= bits;
      }
    }
    EXPECT_EQ(checksum.download()[0], want) << "checksum is not the xor of the scores";
  }
}

// A workspace smaller than indexer_topk_workspace_size (or, through the
// hooks, than the pinned route needs) is rejected before anything runs,
// naming ctx.workspace; the outputs stay untouched.
TEST(FusedGpu, TooSmallWorkspaceRejected) {
  const int K = 512;
  const IndexerProblem prob = indexer_problem(Distribution::kModelLike, Layout::kFull, 8, 5000, K);
  DeviceProblem dev(prob);
  DeviceOutput out(prob.T, K, true);
  const IndexerTopkParams p = dev.params(out.indices.get(), out.values.get(), deterministic(K));
  std::size_t bytes = 0;
  ASSERT_TRUE(indexer_topk_workspace_size(p, Backend::kCuda, &bytes).ok());
  ASSERT_GT(bytes, 0u);
  DeviceArray<unsigned char> workspace(bytes);
  struct Case {
    void* ptr;
    std::size_t bytes;
  };
  for (const Case& c : {Case{workspace.get(), bytes - 1}, Case{workspace.get(), 0}, Case{nullptr, 0}}) {
    ExecutionContext ctx;
    ctx.backend = Backend::kCuda;
    ctx.workspace = c.ptr;
    ctx.workspace_bytes = c.bytes;
    const Status st = indexer_topk(p, ctx);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.bytes << " bytes: " << st.to_string();
    EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
  }
  // The shape takes the unfused route, whose workspace is its batch buffer
  // (8 rows of 5000 floats) and the checksum word; pinning the fused stages
  // needs their samples, counters and candidates too, and the launch checks
  // the size its hooks need.
  ASSERT_TRUE(fused::unfused_by_shape(prob.T, prob.N));
  EXPECT_EQ(bytes, std::size_t{8 * 5000 * 4 + 256});
  FusedHooks fused_route;
  fused_route.route = FusedHooks::Route::kFused;
  EXPECT_GT(fused::workspace_size(p, fused_route), bytes + std::size_t{8} * 4 * K * 8);
  const Status st = fused::launch_indexer_topk(p, nullptr, workspace.get(), bytes, fused_route);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const TopkOutput o = out.download();
  EXPECT_TRUE(all_poison(o.indices.data(), o.indices.size() * sizeof(std::int32_t))) << "indices were written";
  EXPECT_TRUE(all_poison(o.values.data(), o.values.size() * sizeof(float))) << "values were written";
}

// ------------------------------------------------------------- large ------

// Small T, long rows: each row's key range is split across CTAs and merged.
TEST(FusedGpuLong, Causal64x128K) {
  const IndexerProblem prob = indexer_problem(Distribution::kModelLike, Layout::kCausalSuffix, 64, 131072, 2048);
  DeviceProblem dev(prob);
  Unfused oracle(dev);
  for (int K : {2048, 512}) {
    const SelectOptions det = deterministic(K, IndexBase::kRelative);
    SCOPED_TRACE("K=" + std::to_string(K));
    expect_matches_unfused(oracle, det, run_fused(dev, det, true).out);
    const SelectOptions any = make_options(K, TieBreak::kAny, IndexBase::kAbsolute, false);
    expect_matches_unfused(oracle, any, run_fused(dev, any, true).out);
  }
}

// Rows of a million keys through the public operator: 72 rows of 2^20
// keys pass the 256 MB of unfused_by_shape's one-batch rule, so the route
// by shape is the fused one (16384 samples a row, the threshold's widest
// plan; its repair batches take the 512 MB buffer);
// deterministic sorted output with values slot by slot against the
// unfused pipeline, kAny against its scores.
TEST(FusedGpuLong, MillionKeyRowsFusedRoute) {
  const std::int64_t T = 72, N = std::int64_t{1} << 20;
  ASSERT_FALSE(fused::unfused_by_shape(T, N));
  const IndexerProblem prob = indexer_problem(Distribution::kModelLike, Layout::kCausalSuffix, T, N, 2048);
  DeviceProblem dev(prob);
  Unfused oracle(dev);
  const SelectOptions det = deterministic(2048);
  expect_matches_unfused(oracle, det, run_fused(dev, det, true).out);
  const SelectOptions any = make_options(2048, TieBreak::kAny, IndexBase::kAbsolute, false);
  expect_matches_unfused(oracle, any, run_fused(dev, any, false).out);
}

}  // namespace
}  // namespace dsa
