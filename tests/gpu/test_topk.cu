// The CUDA standalone top-k against the one exact checker: every score
// distribution, K, boundary length, layout and option; every path of the
// kernel forced and observed through its trace; determinism; long rows.
// Tests named TopkGpuLong.* are left out of the sanitizer runs (size).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/keys.h"
#include "device_array.h"
#include "dsa_topk/dsa_topk.h"
#include "gpu_test_util.h"
#include "selection/topk/config.h"
#include "selection/topk/topk.h"
#include "tools/checker.h"
#include "tools/generators.h"
#include "tools/problem.h"

namespace dsa {
namespace {

using selection::topk::TopkPath;
using selection::topk::TopkRowTrace;
using selection::topk::TopkEngine;
using selection::topk::TopkHooks;
using tools::Distribution;
using tools::Layout;
using tools::ScoresProblem;

constexpr int kAllK[] = {512, 1024, 2048};
// The sampled kernel's geometries for K and rows of up to num_cols keys:
// 512 threads a row (LongRows, and LongRows64K's smaller buffers for rows
// it takes), and 1024 (one row per SM) where K allows it, alone and with
// each row split over a cluster (the size the launcher picks for the
// test's few rows, at least 2; SplitRows* pin each size).
std::vector<TopkEngine> sampled_engines(int K, std::int64_t num_cols) {
  std::vector<TopkEngine> e{TopkEngine::kSampled};
  if (num_cols <= selection::topk::LongRows64K::kMaxLen) e.push_back(TopkEngine::kSampled64K);
  if (K % selection::topk::WideRows::kThreads == 0) {
    e.push_back(TopkEngine::kSampledWide);
    e.push_back(TopkEngine::kSampledSplit);
  }
  return e;
}
// The candidate buffer of a sampled engine's geometry.
std::int64_t candidate_capacity(TopkEngine e) {
  namespace tk = selection::topk;
  switch (e) {
    case TopkEngine::kSampled64K: return tk::LongRows64K::kCandidateCapacity;
    case TopkEngine::kSampledWide:
    case TopkEngine::kSampledSplit: return tk::WideRows::kCandidateCapacity;
    default: return tk::LongRows::kCandidateCapacity;
  }
}
// Rows of at most kResidentMaxLen keys can run on every kernel and
// geometry: coverage tests on such rows run each.
std::vector<TopkEngine> all_engines(int K) {
  std::vector<TopkEngine> e = sampled_engines(K, selection::topk::kResidentMaxLen);
  e.push_back(TopkEngine::kResident);
  if (K % selection::topk::ClusterRows::kThreads == 0) e.push_back(TopkEngine::kClusterResident);
  return e;
}
// The most histogram passes the resident kernel takes on rows of up to
// num_cols keys (its geometry's bins per pass).
unsigned resident_max_passes(std::int64_t num_cols) {
  using selection::topk::ResidentConfig;
  return num_cols <= selection::topk::ResidentRows8K::kMaxLen
             ? ResidentConfig<2048, selection::topk::ResidentRows8K>::kMaxPasses
             : ResidentConfig<2048, selection::topk::ResidentRows16K>::kMaxPasses;
}
std::string engine_name(TopkEngine e) {
  switch (e) {
    case TopkEngine::kSampled: return "sampled";
    case TopkEngine::kSampled64K: return "sampled-64k";
    case TopkEngine::kSampledWide: return "sampled-wide";
    case TopkEngine::kSampledSplit: return "sampled-split";
    case TopkEngine::kResident: return "resident";
    case TopkEngine::kClusterResident: return "cluster-resident";
    default: return "auto";
  }
}
using testing::DeviceArray;
using testing::make_options;

struct GpuResult {
  tools::TopkOutput out;
  std::vector<TopkRowTrace> trace;  // [T] when run through the hooks
};

// Runs the problem on the GPU: through the public dsa::topk when `hooks` is
// null and the engine is kAuto, else through the launcher with the hooks
// (if any), the engine (unless kAuto) and a trace. The scores are uploaded
// unless the caller passes them (`scores_in`: prob.scores' copy in memory
// the device reads, e.g. managed memory).
GpuResult run_gpu(const ScoresProblem& prob, const SelectOptions& options, bool want_values,
                  const TopkHooks* hooks = nullptr, TopkEngine engine = TopkEngine::kAuto,
                  const float* scores_in = nullptr) {
  const bool via_launcher = hooks != nullptr || engine != TopkEngine::kAuto;
  const std::size_t out_elems = static_cast<std::size_t>(prob.T) * options.k;
  DeviceArray<float> scores(scores_in != nullptr ? 0 : prob.scores.size()), values(want_values ? out_elems : 0);
  DeviceArray<std::int32_t> ks(prob.ks.size()), ke(prob.ke.size()), indices(out_elems);
  DeviceArray<TopkRowTrace> trace(via_launcher ? prob.T : 0);
  if (scores_in == nullptr) scores.upload(prob.scores);
  ks.upload(prob.ks);
  ke.upload(prob.ke);
  indices.poison();
  if (want_values) values.poison();
  TopkParams p = prob.params(indices.get(), values.get(), options);
  p.scores = scores_in != nullptr ? scores_in : scores.get();
  p.ks = ks.get();
  p.ke = ke.get();
  Status st;
  if (!via_launcher) {
    ExecutionContext ctx;
    ctx.backend = Backend::kCuda;
    st = topk(p, ctx);
  } else {
    trace.poison();
    TopkHooks h = hooks != nullptr ? *hooks : TopkHooks{};
    if (engine != TopkEngine::kAuto) h.engine = engine;
    h.trace = trace.get();
    st = selection::topk::launch_topk(p, nullptr, h);
  }
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  GpuResult r;
  r.out.T = prob.T;
  r.out.K = options.k;
  r.out.indices = indices.download();
  if (want_values) r.out.values = values.download();
  if (via_launcher) r.trace = trace.download();
  return r;
}

#define EXPECT_EXACT(prob, options, out)                                        \
  do {                                                                          \
    const tools::CheckReport report_ = tools::check_problem((prob), (options), (out)); \
    EXPECT_TRUE(report_.ok()) << report_.summary();                             \
  } while (0)

// A problem with `T` rows of `len` scores each (full rows, stride len + pad
// NaN poison), element (t, s) = fill(t, s).
template <typename Fill>
ScoresProblem custom_problem(std::int64_t T, std::int64_t len, Fill fill) {
  ScoresProblem p;
  p.name = "custom";
  p.T = T;
  p.N = len;
  p.stride = len + 4;
  p.scores.assign(T * p.stride, std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t t = 0; t < T; ++t) {
    p.ks.push_back(0);
    p.ke.push_back(static_cast<std::int32_t>(len));
    for (std::int64_t s = 0; s < len; ++s) p.scores[t * p.stride + s] = fill(t, s);
  }
  return p;
}

// Distinct scores in a row-dependent scrambled order.
float scrambled(std::int64_t t, std::int64_t s, std::int64_t len) {
  return static_cast<float>((s * 7919 + t * 104729) % len);
}

// T rows of len scores in which every value comes `copies` times (ties at
// every cut): floor(scrambled / copies), values 0 .. len / copies - 1.
ScoresProblem repeated_values(std::int64_t T, std::int64_t len, std::int64_t copies) {
  return custom_problem(T, len, [len, copies](std::int64_t t, std::int64_t s) {
    return std::floor(scrambled(t, s, len) / static_cast<float>(copies));
  });
}

// T rows of 9000 scores: 1000 distinct large ones, 1500 copies of 5.0, the
// rest below, in a row-dependent order.
constexpr std::int64_t kTiedLen = 9000;
ScoresProblem tied_at_five(std::int64_t T) {
  return custom_problem(T, kTiedLen, [](std::int64_t t, std::int64_t s) {
    const std::int64_t r = (s * 7919 + t * 13) % kTiedLen;
    return r < 1000 ? 100.0f + static_cast<float>(r) : r < 2500 ? 5.0f : -static_cast<float>(r);
  });
}

void expect_paths(const GpuResult& r, const ScoresProblem& prob, int K, TopkPath want) {
  for (std::int64_t t = 0; t < prob.T; ++t) {
    const TopkPath got = r.trace[t].path;
    const TopkPath expected = prob.ke[t] - prob.ks[t] <= K ? TopkPath::kDirect : want;
    EXPECT_EQ(static_cast<int>(got), static_cast<int>(expected)) << "row " << t;
  }
}

// ------------------------------------------------------------ coverage ----

// Every distribution x every K on boundary lengths {0, 1, K-1, K, K+1} and
// random ones, with two option sets that together cover every option.
TEST(TopkGpu, AllDistributionsAllKBoundaryLengths) {
  for (Distribution dist : tools::all_distributions()) {
    for (int K : kAllK) {
      tools::ProblemSpec spec;
      spec.dist = dist;
      spec.layout = Layout::kBoundary;
      spec.T = 24;
      spec.N = 3 * K + 77;
      spec.K = K;
      spec.seed = 11 + K;
      const ScoresProblem prob = tools::make_scores_problem(spec);
      for (const SelectOptions& o : {make_options(K, TieBreak::kAny, IndexBase::kAbsolute, false),
                                     make_options(K, TieBreak::kSmallestIndex, IndexBase::kRelative, true)}) {
        for (TopkEngine engine : all_engines(K)) {
          SCOPED_TRACE(std::string(tools::to_string(dist)) + " K=" + std::to_string(K) +
                       (o.sorted ? " deterministic/relative/sorted " : " any/absolute ") + engine_name(engine));
          EXPECT_EXACT(prob, o, run_gpu(prob, o, true, nullptr, engine).out);
        }
      }
    }
  }
}

// N = 20011 runs the sampled kernel, N = 16384 (kResidentMaxLen) the
// resident one (the operator's own choice).
TEST(TopkGpu, EveryLayout) {
  for (Layout layout : {Layout::kCausalSuffix, Layout::kVarlenBatch, Layout::kContextParallel, Layout::kFull}) {
    for (Distribution dist : {Distribution::kModelLike, Distribution::kTies, Distribution::kDeadRelu}) {
      for (auto [K, N] : {std::pair{512, 20011}, std::pair{2048, 20011}, std::pair{2048, 16384}}) {
        tools::ProblemSpec spec;
        spec.dist = dist;
        spec.layout = layout;
        spec.T = 16;
        spec.N = N;
        spec.K = K;
        spec.seed = 5;
        const ScoresProblem prob = tools::make_scores_problem(spec);
        for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
          const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, false);
          SCOPED_TRACE(std::string(tools::to_string(layout)) + " " + std::string(tools::to_string(dist)) +
                       " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                       (ties == TieBreak::kAny ? " any" : " deterministic"));
          EXPECT_EXACT(prob, o, run_gpu(prob, o, false).out);
        }
      }
    }
  }
}

// Every combination of ties, index base, sorted and values on one problem.
TEST(TopkGpu, OptionMatrix) {
  tools::ProblemSpec spec;
  spec.dist = Distribution::kSmallInteger;  // many ties at the K-th score
  spec.layout = Layout::kVarlenBatch;
  spec.T = 12;
  spec.N = 10007;
  spec.K = 1024;
  const ScoresProblem prob = tools::make_scores_problem(spec);
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    for (IndexBase base : {IndexBase::kAbsolute, IndexBase::kRelative}) {
      for (bool sorted : {false, true}) {
        for (bool values : {false, true}) {
          for (TopkEngine engine : all_engines(spec.K)) {
            const SelectOptions o = make_options(1024, ties, base, sorted);
            SCOPED_TRACE(::testing::Message() << "ties " << static_cast<int>(ties) << " base "
                                              << static_cast<int>(base) << " sorted " << sorted << " values "
                                              << values << " " << engine_name(engine));
            EXPECT_EXACT(prob, o, run_gpu(prob, o, values, nullptr, engine).out);
          }
        }
      }
    }
  }
}

// Row starts at every alignment and lengths around the 16-byte groups: the
// scalar head/tail path of the row reader.
TEST(TopkGpu, UnalignedHeadsAndTails) {
  const int K = 512;
  ScoresProblem prob;
  prob.T = 32;
  prob.N = K + 16;
  prob.stride = prob.N + 3;  // successive rows start at every 16-byte phase too
  prob.scores.assign(prob.T * prob.stride, std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t t = 0; t < prob.T; ++t) {
    const auto ks = static_cast<std::int32_t>(t % 4);
    const auto len = static_cast<std::int32_t>(K - 2 + t / 2);
    prob.ks.push_back(ks);
    prob.ke.push_back(ks + len);
    for (std::int32_t s = 0; s < len; ++s) prob.scores[t * prob.stride + ks + s] = scrambled(t, s, len);
  }
  for (bool sorted : {false, true}) {
    for (TopkEngine engine : all_engines(K)) {
      const SelectOptions o = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, sorted);
      SCOPED_TRACE(engine_name(engine));
      EXPECT_EXACT(prob, o, run_gpu(prob, o, true, nullptr, engine).out);
    }
  }
}

// Scores in managed memory, written by the host (its pages start on the
// host), which validation accepts for the CUDA backend: every kernel reads
// them, and the sampled kernel's bulk L2 prefetch of a row's start must be
// a harmless hint there too. Rows of 9000 keys (the resident kernel) and
// 40000 (the sampled geometries), through the public call and each engine.
TEST(TopkGpu, ManagedMemoryScores) {
  const int K = 2048;
  for (std::int64_t len : {9000, 40000}) {
    const ScoresProblem prob = custom_problem(6, len, [len](std::int64_t t, std::int64_t s) { return scrambled(t, s, len); });
    float* scores = nullptr;
    ASSERT_EQ(cudaMallocManaged(&scores, prob.scores.size() * sizeof(float)), cudaSuccess);
    std::memcpy(scores, prob.scores.data(), prob.scores.size() * sizeof(float));
    std::vector<TopkEngine> engines = sampled_engines(K, len);
    if (len <= selection::topk::kResidentMaxLen) engines.push_back(TopkEngine::kResident);
    engines.push_back(TopkEngine::kAuto);  // the public call
    const SelectOptions o = make_options(K, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
    for (TopkEngine engine : engines) {
      SCOPED_TRACE("len " + std::to_string(len) + ", " + engine_name(engine));
      EXPECT_EXACT(prob, o, run_gpu(prob, o, true, nullptr, engine, scores).out);
    }
    EXPECT_EQ(cudaFree(scores), cudaSuccess);
  }
}

// NaN ranks as -inf, -0 equals +0, infinities; values keep the scores' bits.
TEST(TopkGpu, NonFiniteAndSignedZeroScores) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::int64_t len = 3000;
  const ScoresProblem prob = custom_problem(4, len, [&](std::int64_t t, std::int64_t s) {
    switch ((s * 31 + t) % 7) {
      case 0: return nan;
      case 1: return -0.0f;
      case 2: return 0.0f;
      case 3: return (s % 50 == 0) ? inf : -inf;
      case 4: return -nan;
      default: return (t == 3) ? nan : scrambled(t, s, len) - 1500.0f;  // row 3: almost all NaN
    }
  });
  for (int K : kAllK) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      for (TopkEngine engine : all_engines(K)) {
        const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, true);
        SCOPED_TRACE("K=" + std::to_string(K) + " " + engine_name(engine));
        EXPECT_EXACT(prob, o, run_gpu(prob, o, true, nullptr, engine).out);
      }
    }
  }
}

// With the host's range check off (ExecutionContext::check_ranges = false),
// invalid ranges must not read or write out of bounds (dsa_topk.h): each
// kernel clamps a row to [0, N), so the result is the top K of the clamped
// range (the contract leaves it unspecified; this pins what we do).
TEST(TopkGpu, UncheckedInvalidRangesAreClamped) {
  for (std::int64_t N : {std::int64_t{3000}, std::int64_t{20000}}) {  // resident, sampled
    const int K = 512;
    ScoresProblem prob = custom_problem(6, N, [&](std::int64_t t, std::int64_t s) { return scrambled(t, s, N); });
    const auto n = static_cast<std::int32_t>(N);
    prob.ks = {-7, 5, 100, n + 5, 0, -100};
    prob.ke = {n, n + 1000, 50, n + 10, n, -50};
    ScoresProblem clamped = prob;
    for (std::size_t t = 0; t < prob.ks.size(); ++t) {
      clamped.ks[t] = std::clamp(prob.ks[t], 0, n);
      clamped.ke[t] = std::clamp(prob.ke[t], clamped.ks[t], n);
    }
    const SelectOptions o = make_options(K, TieBreak::kSmallestIndex, IndexBase::kRelative, true);
    const std::size_t out_elems = static_cast<std::size_t>(prob.T) * K;
    DeviceArray<float> scores(prob.scores.size()), values(out_elems);
    DeviceArray<std::int32_t> ks(prob.ks.size()), ke(prob.ke.size()), indices(out_elems);
    scores.upload(prob.scores);
    ks.upload(prob.ks);
    ke.upload(prob.ke);
    indices.poison();
    values.poison();
    TopkParams p = prob.params(indices.get(), values.get(), o);
    p.scores = scores.get();
    p.ks = ks.get();
    p.ke = ke.get();
    ExecutionContext ctx;
    ctx.backend = Backend::kCuda;
    ctx.check_ranges = false;
    const Status st = topk(p, ctx);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    tools::TopkOutput out;
    out.T = prob.T;
    out.K = K;
    out.indices = indices.download();
    out.values = values.download();
    SCOPED_TRACE("N=" + std::to_string(N));
    EXPECT_EXACT(clamped, o, out);
  }
}

// ------------------------------------------------------ forced paths -------

// Threshold too high: no key reaches it (the largest key belongs to a NaN),
// every row is an underflow selected from the keys < tau of the whole row.
TEST(TopkGpu, ForcedUnderflowNoCandidates) {
  tools::ProblemSpec spec;
  spec.dist = Distribution::kSmallInteger;
  spec.layout = Layout::kBoundary;
  spec.T = 12;
  spec.N = 9000;
  for (int K : kAllK) {
    spec.K = K;
    const ScoresProblem prob = tools::make_scores_problem(spec);
    TopkHooks hooks;
    hooks.force_threshold = true;
    hooks.forced_threshold_key = 0xFFFFFFFFu;
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(K, ties, IndexBase::kRelative, false);
      const GpuResult r = run_gpu(prob, o, true, &hooks);
      EXPECT_EXACT(prob, o, r.out);
      expect_paths(r, prob, K, TopkPath::kUnderflow);
    }
  }
}

// Threshold with about K/2 keys above it and 4 equal to it: the underflow
// path takes the candidates, the tie entries and the top of the rest.
TEST(TopkGpu, ForcedUnderflowPartialCandidates) {
  const int K = 2048;
  const std::int64_t len = 50000, copies = 4, top_value = len / copies - 1;
  const ScoresProblem prob = repeated_values(3, len, copies);
  const std::int64_t tau_value = (len - K / 2) / copies;
  TopkHooks hooks;
  hooks.force_threshold = true;
  hooks.forced_threshold_key = score_key(static_cast<float>(tau_value));
  for (TopkEngine engine : sampled_engines(K, len)) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, true);
      SCOPED_TRACE(engine_name(engine));
      const GpuResult r = run_gpu(prob, o, true, &hooks, engine);
      EXPECT_EXACT(prob, o, r.out);
      expect_paths(r, prob, K, TopkPath::kUnderflow);
      for (const TopkRowTrace& tr : r.trace) {
        EXPECT_EQ(tr.count_gt, static_cast<std::uint32_t>(copies * (top_value - tau_value)));
        EXPECT_EQ(tr.count_eq, static_cast<std::uint32_t>(copies));
      }
    }
  }
}

// Threshold too low: every key passes (tau = 0) and rows longer than the
// candidate buffer overflow; the answer is selected from the row itself.
TEST(TopkGpu, ForcedOverflowAllPass) {
  for (Distribution dist : {Distribution::kModelLike, Distribution::kTies}) {
    tools::ProblemSpec spec;
    spec.dist = dist;
    spec.layout = Layout::kFull;
    spec.T = 6;
    spec.N = 20000;  // > every sampled geometry's candidate capacity
    const ScoresProblem prob = tools::make_scores_problem(spec);
    TopkHooks hooks;
    hooks.force_threshold = true;
    hooks.forced_threshold_key = 0;
    for (int K : {512, 2048}) {
      for (TopkEngine engine : sampled_engines(K, spec.N)) {
        for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
          const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, ties == TieBreak::kSmallestIndex);
          SCOPED_TRACE("K=" + std::to_string(K) + " " + engine_name(engine));
          const GpuResult r = run_gpu(prob, o, true, &hooks, engine);
          EXPECT_EXACT(prob, o, r.out);
          expect_paths(r, prob, K, TopkPath::kOverflow);
        }
      }
    }
  }
}

// The same forced tau = 0 on rows that fit the candidate buffer (LongRows
// 8192, LongRows64K 4096): every key is a candidate and the certificate
// holds.
TEST(TopkGpu, ForcedAllPassFitsBuffer) {
  for (TopkEngine engine : {TopkEngine::kSampled, TopkEngine::kSampled64K, TopkEngine::kSampledSplit}) {
    tools::ProblemSpec spec;
    spec.layout = Layout::kFull;
    spec.T = 4;
    spec.N = candidate_capacity(engine) - 96;
    const ScoresProblem prob = tools::make_scores_problem(spec);
    TopkHooks hooks;
    hooks.force_threshold = true;
    const SelectOptions o = make_options(2048, TieBreak::kSmallestIndex, IndexBase::kAbsolute, false);
    SCOPED_TRACE(engine_name(engine));
    const GpuResult r = run_gpu(prob, o, false, &hooks, engine);
    EXPECT_EXACT(prob, o, r.out);
    expect_paths(r, prob, 2048, TopkPath::kCertified);
  }
}

// All-equal rows, unforced. Sampled kernel: tau is the value, count(> tau)
// = 0 and count(== tau) = len; kAny takes ties from the tie buffer,
// smallest-index ties with len > K find them in the row (tie repair).
// Resident kernel: every key in one bin of each pass, so the geometry's
// most passes (at 7000 keys the 8K one: the key's top 10 bits, then 11 and
// 11 more) end at a one-key bin; every key is a tie.
TEST(TopkGpu, AllEqualRows) {
  const ScoresProblem prob = custom_problem(5, 7000, [](std::int64_t t, std::int64_t) {
    return t == 4 ? -0.0f : 1.5f * static_cast<float>(t + 1);
  });
  for (int K : kAllK) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(K, ties, IndexBase::kRelative, true);
      for (TopkEngine engine : sampled_engines(K, prob.N)) {
        SCOPED_TRACE(engine_name(engine));
        const GpuResult r = run_gpu(prob, o, true, nullptr, engine);
        EXPECT_EXACT(prob, o, r.out);
        expect_paths(r, prob, K, ties == TieBreak::kAny ? TopkPath::kThresholdTie : TopkPath::kTieRepair);
      }
      const GpuResult resident = run_gpu(prob, o, true, nullptr, TopkEngine::kResident);
      EXPECT_EXACT(prob, o, resident.out);
      expect_paths(resident, prob, K, TopkPath::kResident);
      for (const TopkRowTrace& tr : resident.trace) {
        EXPECT_EQ(tr.threshold_passes, resident_max_passes(7000));
        EXPECT_EQ(tr.count_gt, 0u);
        EXPECT_EQ(tr.count_eq, 7000u);
      }
    }
  }
}

// Threshold at a tied value with fewer ties than the tie buffer holds: the
// deterministic cut runs over the tie buffer.
TEST(TopkGpu, ForcedThresholdTieInBuffer) {
  const int K = 2048;
  const std::int64_t len = kTiedLen;
  const ScoresProblem prob = tied_at_five(3);
  TopkHooks hooks;
  hooks.force_threshold = true;
  hooks.forced_threshold_key = score_key(5.0f);
  for (TopkEngine engine : sampled_engines(K, len)) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, false);
      SCOPED_TRACE(engine_name(engine));
      const GpuResult r = run_gpu(prob, o, true, &hooks, engine);
      EXPECT_EXACT(prob, o, r.out);
      expect_paths(r, prob, K, TopkPath::kThresholdTie);
    }
  }
}

// The one-compare filter (keys > tau only, for a tau that is a sampled bin's
// bottom) on every forced path: below K keys above tau (underflow, a tied
// K-th value) it filters the row again with both compares, and the counts
// are those of the two-compare filter; with K or more (certified, overflow)
// the ties are not counted.
TEST(TopkGpu, ForcedOneCompareFilter) {
  constexpr std::uint32_t kUncounted = 0xFFFFFFFFu;
  const auto run = [](const ScoresProblem& prob, int K, float tau, TopkPath want, std::uint32_t gt, std::uint32_t eq,
                      const std::vector<TopkEngine>& engines) {
    TopkHooks hooks;
    hooks.force_threshold = true;
    hooks.forced_threshold_key = score_key(tau);
    hooks.forced_tau_tie_free = true;
    for (TopkEngine engine : engines) {
      for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
        const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, ties == TieBreak::kSmallestIndex);
        SCOPED_TRACE("K=" + std::to_string(K) + " tau=" + std::to_string(tau) + " " + engine_name(engine) +
                     (ties == TieBreak::kAny ? " any" : " deterministic"));
        const GpuResult r = run_gpu(prob, o, true, &hooks, engine);
        EXPECT_EXACT(prob, o, r.out);
        expect_paths(r, prob, K, want);
        for (std::int64_t t = 0; t < prob.T; ++t) {
          EXPECT_EQ(r.trace[t].count_gt, gt) << "row " << t;
          EXPECT_EQ(r.trace[t].count_eq, eq) << "row " << t;
        }
      }
    }
  };
  // Every value 4 times; tau with K / 2 keys above it and 4 equal: underflow.
  const std::int64_t len = 50000, copies = 4, top_value = len / copies - 1;
  const ScoresProblem quads = repeated_values(3, len, copies);
  const std::int64_t tau_value = (len - 1024) / copies;
  run(quads, 2048, static_cast<float>(tau_value), TopkPath::kUnderflow,
      static_cast<std::uint32_t>(copies * (top_value - tau_value)), static_cast<std::uint32_t>(copies),
      sampled_engines(2048, len));
  // 1000 distinct large scores and 1500 copies of 5.0: the K-th key is tau
  // (kAny: the tie buffer; smallest-index: its cut, the ties fit the buffer).
  run(tied_at_five(3), 2048, 5.0f, TopkPath::kThresholdTie, 1000, 1500, sampled_engines(2048, kTiedLen));
  // Every key above tau: certified where the buffer holds the row (LongRows
  // and WideRows 8192, LongRows64K 4096), overflow where it does not; the
  // ties are not counted.
  for (std::int64_t n : {3000, 6000, 20000}) {
    const ScoresProblem prob = testing::scores_problem(Distribution::kModelLike, Layout::kFull, 4, n, 2048, 1);
    for (int K : {512, 2048}) {
      for (TopkEngine engine : sampled_engines(K, n)) {
        run(prob, K, -1e30f, n <= candidate_capacity(engine) ? TopkPath::kCertified : TopkPath::kOverflow,
            static_cast<std::uint32_t>(n), kUncounted, {engine});
      }
    }
  }
}

// "One segment flooded": the top values concentrated in one contiguous
// block, so the whole top lies in one stretch of the row (with the row
// split over a cluster, in one CTA's part; SplitRowsFloodedPart pins each
// cluster size).
TEST(TopkGpu, ConcentratedTopValues) {
  const std::int64_t len = 200000;
  const ScoresProblem prob = custom_problem(2, len, [&](std::int64_t t, std::int64_t s) {
    const bool hot = s >= 90000 + t * 1000 && s < 90000 + t * 1000 + 6000;
    return hot ? 1000.0f + static_cast<float>(s % 977) : -static_cast<float>(s % 1009);
  });
  for (TopkEngine engine : sampled_engines(2048, len)) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(2048, ties, IndexBase::kAbsolute, true);
      SCOPED_TRACE(engine_name(engine));
      const GpuResult r = run_gpu(prob, o, true, nullptr, engine);
      EXPECT_EXACT(prob, o, r.out);
    }
  }
}

// ------------------------------------------------------- split rows -------

// A row split over a cluster of 2, 4, 8 or 16 CTAs gives the answer of one CTA
// on the whole row, and the same trace: the same samples and tau, the
// cluster's summed counts, the same path and K-th key. `hooks` may force a
// threshold; the split engine and its cluster size are set here.
void expect_split_matches_whole(const ScoresProblem& prob, const SelectOptions& o, TopkHooks hooks,
                                const std::string& what,
                                const std::vector<int>& cluster_sizes = {2, 4, 8, selection::topk::kMaxSplit}) {
  const GpuResult whole = run_gpu(prob, o, true, &hooks, TopkEngine::kSampled);
  for (int ctas : cluster_sizes) {
    SCOPED_TRACE(what + ", " + std::to_string(ctas) + " CTAs a row");
    hooks.split_ctas = ctas;
    const GpuResult split = run_gpu(prob, o, true, &hooks, TopkEngine::kSampledSplit);
    EXPECT_EXACT(prob, o, split.out);
    for (std::int64_t t = 0; t < prob.T; ++t) {
      const TopkRowTrace& a = whole.trace[t];
      const TopkRowTrace& b = split.trace[t];
      EXPECT_EQ(static_cast<int>(a.path), static_cast<int>(b.path)) << "row " << t;
      EXPECT_EQ(a.threshold_key, b.threshold_key) << "row " << t;
      EXPECT_EQ(a.count_gt, b.count_gt) << "row " << t;
      EXPECT_EQ(a.count_eq, b.count_eq) << "row " << t;
      EXPECT_EQ(a.kth_key, b.kth_key) << "row " << t;
      EXPECT_EQ(a.threshold_passes, b.threshold_passes) << "row " << t;
    }
  }
}

// Every split step in a few launches, for racecheck (SplitRowsForcedPaths
// takes ~6 minutes under it): the one-compare filter's second pass and the
// ties' push (tau forced at the tied value), and the candidates' push.
TEST(TopkGpu, SplitRowsFewLaunches) {
  TopkHooks hooks;
  hooks.force_threshold = true;
  hooks.forced_threshold_key = score_key(5.0f);
  hooks.forced_tau_tie_free = true;
  const SelectOptions o = make_options(2048, TieBreak::kSmallestIndex, IndexBase::kAbsolute, true);
  expect_split_matches_whole(tied_at_five(1), o, hooks, "threshold tie, one-compare filter", {2, 16});
  const ScoresProblem model = testing::scores_problem(Distribution::kModelLike, Layout::kFull, 1, 12000, 2048, 1);
  expect_split_matches_whole(model, o, TopkHooks{}, "model-like", {2, 16});
}

// Every distribution and K the split takes (K >= 1024) on boundary lengths
// (parts of a few keys, and empty parts at 16 CTAs) and on causal rows of
// up to 40000 keys.
TEST(TopkGpu, SplitRowsEveryClusterSize) {
  for (Distribution dist : tools::all_distributions()) {
    for (int K : {1024, 2048}) {
      for (auto [layout, N] : {std::pair{Layout::kBoundary, 3 * K + 77}, std::pair{Layout::kCausalSuffix, 40000}}) {
        const ScoresProblem prob = testing::scores_problem(dist, layout, 12, N, K, 29 + K);
        const SelectOptions o = make_options(K, K == 1024 ? TieBreak::kAny : TieBreak::kSmallestIndex,
                                             IndexBase::kRelative, K != 1024);
        expect_split_matches_whole(prob, o, TopkHooks{},
                                   std::string(tools::to_string(dist)) + " K=" + std::to_string(K) + " N=" +
                                       std::to_string(N));
      }
    }
  }
}

// Every forced path with the row split: underflow with no candidates and
// with some, the tie buffer merged from every part, overflow, the certified
// all-pass row, and the one-compare filter's second pass (the cluster's
// counts decide it, so every CTA filters again or none does).
// Rows of at most 12000 keys (the sanitizers run this test: ~6 minutes
// under racecheck on the H200, 100 launches of up to 16 CTAs a row).
TEST(TopkGpu, SplitRowsForcedPaths) {
  const std::int64_t len = 12000, copies = 4;
  const ScoresProblem quads = repeated_values(3, len, copies);
  const ScoresProblem tied = tied_at_five(3);
  const ScoresProblem model = testing::scores_problem(Distribution::kModelLike, Layout::kFull, 4, len, 2048, 1);
  const ScoresProblem fits = testing::scores_problem(Distribution::kModelLike, Layout::kFull, 4,
                                                     selection::topk::LongRows::kCandidateCapacity - 96, 2048, 1);
  struct Case {
    const ScoresProblem* prob;
    float tau;  // NaN: the key 0xFFFFFFFF (no key reaches it)
    const char* what;
  };
  const Case cases[] = {{&quads, std::nanf(""), "underflow, no candidates"},
                        {&quads, static_cast<float>((len - 1024) / copies), "underflow with candidates and ties"},
                        {&tied, 5.0f, "threshold tie"},
                        {&model, -1e30f, "overflow"},
                        {&fits, -1e30f, "every key a candidate, certified"}};
  for (const Case& c : cases) {
    for (bool tie_free : {false, true}) {
      for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
        TopkHooks hooks;
        hooks.force_threshold = true;
        hooks.forced_threshold_key = std::isnan(c.tau) ? 0xFFFFFFFFu : score_key(c.tau);
        hooks.forced_tau_tie_free = tie_free;
        const SelectOptions o = make_options(2048, ties, IndexBase::kAbsolute, ties == TieBreak::kSmallestIndex);
        expect_split_matches_whole(*c.prob, o, hooks,
                                   std::string(c.what) + (tie_free ? ", one-compare filter" : "") +
                                       (ties == TieBreak::kAny ? ", any" : ", deterministic"));
      }
    }
  }
}

// The whole top in one CTA's part (and, at 8 and 16 CTAs a row, parts with
// no candidate at all), unforced.
TEST(TopkGpu, SplitRowsFloodedPart) {
  const std::int64_t len = 200000;
  const ScoresProblem prob = custom_problem(4, len, [&](std::int64_t t, std::int64_t s) {
    const std::int64_t hot = 10000 + t * 60000;  // a different part in each row
    return s >= hot && s < hot + 6000 ? 1000.0f + static_cast<float>(s % 977) : -static_cast<float>(s % 1009);
  });
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    const SelectOptions o = make_options(2048, ties, IndexBase::kAbsolute, true);
    expect_split_matches_whole(prob, o, TopkHooks{}, ties == TieBreak::kAny ? "any" : "deterministic");
  }
}

// ------------------------------------------------------- threshold ---------

// Every geometry keeps the CTAs per SM its shared plan is sized for; the
// resident kernel and the 64K sampled geometry refuse rows longer than they
// hold.
TEST(TopkGpu, SharedPlanFitsOccupancy) {
  namespace tk = selection::topk;
  for (int K : kAllK) {
    EXPECT_GE(tk::topk_ctas_per_sm(K, 1 << 20, TopkEngine::kSampled), tk::LongRows::kMinCtasPerSm) << "K=" << K;
    for (TopkEngine wide : {TopkEngine::kSampledWide, TopkEngine::kSampledSplit}) {
      if (K % tk::WideRows::kThreads == 0) {
        EXPECT_GE(tk::topk_ctas_per_sm(K, 1 << 20, wide), tk::WideRows::kMinCtasPerSm) << "K=" << K;
      } else {
        EXPECT_EQ(tk::topk_ctas_per_sm(K, 1 << 20, wide), -1) << "K=" << K;
      }
    }
    EXPECT_GE(tk::topk_ctas_per_sm(K, tk::LongRows64K::kMaxLen), tk::LongRows64K::kMinCtasPerSm) << "K=" << K;
    EXPECT_GE(tk::topk_ctas_per_sm(K, 4096, TopkEngine::kSampled64K), tk::LongRows64K::kMinCtasPerSm) << "K=" << K;
    EXPECT_EQ(tk::topk_ctas_per_sm(K, tk::LongRows64K::kMaxLen + 1, TopkEngine::kSampled64K), -1) << "K=" << K;
    EXPECT_GE(tk::topk_ctas_per_sm(K, tk::ResidentRows8K::kMaxLen), tk::ResidentRows8K::kMinCtasPerSm) << "K=" << K;
    EXPECT_GE(tk::topk_ctas_per_sm(K, tk::ResidentRows16K::kMaxLen), tk::ResidentRows16K::kMinCtasPerSm)
        << "K=" << K;
    EXPECT_EQ(tk::topk_ctas_per_sm(K, tk::kResidentMaxLen + 1, TopkEngine::kResident), -1) << "K=" << K;
  }
}

// Model-like 8K rows on the sampled kernel: one histogram pass, or two when the
// samples' key range spans both signs and the first bin is coarse; the
// certificate holds.
TEST(TopkGpu, ThresholdOnePassOnModelLikeRows) {
  tools::ProblemSpec spec;
  spec.layout = Layout::kFull;
  spec.T = 32;
  spec.N = 8192;
  spec.seed = 3;
  const ScoresProblem prob = tools::make_scores_problem(spec);
  const SelectOptions o = make_options(2048, TieBreak::kAny, IndexBase::kAbsolute, false);
  const GpuResult r = run_gpu(prob, o, false, nullptr, TopkEngine::kSampled);
  EXPECT_EXACT(prob, o, r.out);
  expect_paths(r, prob, 2048, TopkPath::kCertified);
  for (const TopkRowTrace& tr : r.trace) {
    EXPECT_GE(tr.threshold_passes, 1u);
    EXPECT_LE(tr.threshold_passes, 2u);  // a first bin too coarse is refined once
  }
}

// A far outlier widens the samples' key range so that the whole top shares
// one bin of the first histogram: the bin is refined (2-3 passes), and tau
// ends close enough to the rank sample that the candidates fit. Ties rows
// refine down to one key per bin and take the threshold-tie path.
// The sampled engine a launch of a few rows takes where no cluster holds
// them (these tests are about its threshold).
TopkEngine threshold_engine(int K) {
  return K % selection::topk::WideRows::kThreads == 0 ? TopkEngine::kSampledWide : TopkEngine::kSampled;
}

TEST(TopkGpu, ThresholdRefinesCoarseBins) {
  const std::int64_t len = 40000;
  const ScoresProblem packed = custom_problem(4, len, [&](std::int64_t t, std::int64_t s) {
    return s % 5 == 0 ? -1e30f : 1000.0f + 0.01f * static_cast<float>((s * 7919 + t) % 977);
  });
  for (int K : kAllK) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, true);
      TopkHooks hooks;
      const GpuResult r = run_gpu(packed, o, true, &hooks, threshold_engine(K));
      EXPECT_EXACT(packed, o, r.out);
      for (const TopkRowTrace& tr : r.trace) {
        EXPECT_GE(tr.threshold_passes, 2u) << "K=" << K;
        EXPECT_LE(tr.threshold_passes, 3u) << "K=" << K;
        EXPECT_NE(static_cast<int>(tr.path), static_cast<int>(TopkPath::kOverflow)) << "K=" << K;
      }
    }
  }
  // 8 distinct values spread over both signs, 5000 copies each.
  const ScoresProblem tied = custom_problem(3, len, [&](std::int64_t t, std::int64_t s) {
    return static_cast<float>((s * 7919 + t) % 8) * 0.75f - 2.5f;
  });
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    const SelectOptions o = make_options(2048, ties, IndexBase::kAbsolute, false);
    TopkHooks hooks;
    const GpuResult r = run_gpu(tied, o, true, &hooks, threshold_engine(2048));
    EXPECT_EXACT(tied, o, r.out);
    expect_paths(r, tied, 2048, ties == TieBreak::kAny ? TopkPath::kThresholdTie : TopkPath::kTieRepair);
  }
}

// The certified rows' select over the candidates ends in one of four ways
// (Emitter::select_and_emit_window): the K-th key's bin taken whole, its bin
// ranked by one warp (at most kResolveCapacity keys, ties among them), a
// one-key bin with more ties than that, or a narrower window first. Rows of
// 1500 large scores spread wide, then a cluster of `distinct` adjacent
// floats with `copies` copies each (the first window's bins are too wide to
// split it), then distinct small scores: the K-th key lies in the cluster
// at K = 2048, in the spread at K = 512 and 1024. Every row certified, its
// trace's kth_key the row's own K-th largest key.
TEST(TopkGpu, CandidateSelectEveryEnding) {
  const std::int64_t len = 40000;
  const std::uint32_t base = score_key(50.0f);
  struct Cluster {
    std::int64_t distinct, copies;
  };
  // 100 x 15: the K-th key's one-key bin holds 15 (resolved by a warp);
  // 20 x 100: 100 ties (the tie path); 1500 x 1: a window of 1500 keys.
  for (const Cluster c : {Cluster{100, 15}, Cluster{20, 100}, Cluster{1500, 1}}) {
    const std::int64_t clustered = c.distinct * c.copies;
    const ScoresProblem prob = custom_problem(3, len, [&](std::int64_t t, std::int64_t s) {
      const std::int64_t r = (s * 7919 + t * 13) % len;  // 7919 is prime to len
      if (r < 1500) return 1000.0f + 10.0f * static_cast<float>(r);
      if (r < 1500 + clustered) return key_score(base + static_cast<std::uint32_t>((r - 1500) % c.distinct));
      return -static_cast<float>(r);
    });
    for (int K : kAllK) {
      for (TopkEngine engine : sampled_engines(K, len)) {
        for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
          const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, ties == TieBreak::kSmallestIndex);
          SCOPED_TRACE(std::to_string(c.distinct) + " x " + std::to_string(c.copies) + " K=" + std::to_string(K) +
                       " " + engine_name(engine) + (ties == TieBreak::kAny ? " any" : " deterministic"));
          const GpuResult r = run_gpu(prob, o, true, nullptr, engine);
          EXPECT_EXACT(prob, o, r.out);
          expect_paths(r, prob, K, TopkPath::kCertified);
          for (std::int64_t t = 0; t < prob.T; ++t) {
            std::vector<std::uint32_t> keys;
            for (std::int64_t i = 0; i < len; ++i) keys.push_back(score_key(prob.scores[t * prob.stride + i]));
            std::nth_element(keys.begin(), keys.begin() + (K - 1), keys.end(), std::greater<>());
            EXPECT_EQ(r.trace[t].kth_key, keys[K - 1]) << "row " << t;
          }
        }
      }
    }
  }
}

// ------------------------------------------------------ resident kernel ---

// The K-th largest key of row t and the counts above it and equal to it.
struct KthKey {
  std::uint32_t key, gt, eq;
};
KthKey kth_key(const ScoresProblem& prob, std::int64_t t, int K) {
  std::vector<std::uint32_t> keys;
  for (std::int32_t s = prob.ks[t]; s < prob.ke[t]; ++s) keys.push_back(score_key(prob.scores[t * prob.stride + s]));
  std::nth_element(keys.begin(), keys.begin() + (K - 1), keys.end(), std::greater<>());
  const std::uint32_t kth = keys[K - 1];
  return {kth, static_cast<std::uint32_t>(std::count_if(keys.begin(), keys.end(), [&](std::uint32_t k) { return k > kth; })),
          static_cast<std::uint32_t>(std::count(keys.begin(), keys.end(), kth))};
}

// The resident kernel's trace against the row itself: the K-th largest key,
// the keys above it and its ties, in at most 3 passes; rows of the largest
// length each geometry holds (num_cols = 8192 and 16384), starting at every
// 16-byte phase.
TEST(TopkGpu, ResidentTraceIsTheKthKey) {
  for (std::int64_t N : {std::int64_t{8192}, std::int64_t{16384}}) {
    for (Distribution dist : {Distribution::kModelLike, Distribution::kTies, Distribution::kMixedSign,
                              Distribution::kShifted}) {
      ScoresProblem prob = testing::scores_problem(dist, Layout::kFull, 8, N, 2048, 29);
      for (std::int64_t t = 0; t < prob.T; ++t) prob.ks[t] = static_cast<std::int32_t>(t % 4);  // every phase
      for (int K : kAllK) {
        const SelectOptions o = make_options(K, TieBreak::kSmallestIndex, IndexBase::kRelative, false);
        const GpuResult r = run_gpu(prob, o, true, nullptr, TopkEngine::kResident);
        SCOPED_TRACE(std::string(tools::to_string(dist)) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
        EXPECT_EXACT(prob, o, r.out);
        expect_paths(r, prob, K, TopkPath::kResident);
        for (std::int64_t t = 0; t < prob.T; ++t) {
          const KthKey want = kth_key(prob, t, K);
          const TopkRowTrace& tr = r.trace[t];
          EXPECT_EQ(tr.kth_key, want.key) << "row " << t;
          EXPECT_EQ(tr.count_gt, want.gt) << "row " << t;
          EXPECT_EQ(tr.count_eq, want.eq) << "row " << t;
          EXPECT_GE(tr.threshold_passes, 1u) << "row " << t;
          EXPECT_LE(tr.threshold_passes, resident_max_passes(N)) << "row " << t;
        }
      }
    }
  }
}

// Many rows of every distribution and K at the lengths each resident
// geometry holds: the narrowing stops at the first bin the top K take whole, which
// only some rows reach in some pass. A stop test that fired on a bin's
// count alone (not counting the keys above it in the window) passed the
// trace test's 8 rows and failed 5 of the fused sweep's 65 shifted rows.
TEST(TopkGpu, ResidentManyRowsEveryDistribution) {
  for (std::int64_t N : {std::int64_t{8191}, std::int64_t{16384}}) {
    for (Distribution dist : tools::all_distributions()) {
      const ScoresProblem prob = testing::scores_problem(dist, Layout::kCausalSuffix, 256, N, 2048, 41);
      for (int K : kAllK) {
        const SelectOptions o = make_options(K, K == 1024 ? TieBreak::kSmallestIndex : TieBreak::kAny,
                                             IndexBase::kAbsolute, false);
        SCOPED_TRACE(std::string(tools::to_string(dist)) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
        const GpuResult r = run_gpu(prob, o, false, nullptr, TopkEngine::kResident);
        EXPECT_EXACT(prob, o, r.out);
        expect_paths(r, prob, K, TopkPath::kResident);
        // Through the operator: no trace, so unsorted any-tie index-only
        // calls take the emission that writes indices directly.
        EXPECT_EXACT(prob, o, run_gpu(prob, o, false).out);
      }
    }
  }
}

// Rows whose K-th largest key sits on an edge of every pass's bins: the
// key 0xC0000000 (score 2.0, a multiple of 2^22 and so of every bin width
// of both geometries) is the K-th largest (even rows: the bottom of its
// bin in the first pass) or the key just below it is (odd rows: the top
// of the bin below, found by the later passes), the other keys distinct
// and spaced 1 or 2049 keys apart (so they fill one first-pass bin or
// straddle many), in both geometries, sorted or not, for every K.
TEST(TopkGpu, ResidentKthOnBinEdges) {
  constexpr std::int64_t kEdge = 0xC0000000;
  for (std::int64_t len : {std::int64_t{8000}, std::int64_t{16000}}) {
    for (int K : kAllK) {
      const ScoresProblem prob = custom_problem(4, len, [&](std::int64_t t, std::int64_t s) {
        const std::int64_t rank = (s * 7919 + t * 13) % len;  // 0 = largest; 7919 is prime to len
        const std::int64_t step = t < 2 ? 1 : 2049;
        return key_score(static_cast<std::uint32_t>(kEdge - t % 2 + (K - 1 - rank) * step));
      });
      for (bool sorted : {false, true}) {
        const SelectOptions o = make_options(K, TieBreak::kAny, IndexBase::kAbsolute, sorted);
        SCOPED_TRACE("len=" + std::to_string(len) + " K=" + std::to_string(K) + (sorted ? " sorted" : ""));
        const GpuResult r = run_gpu(prob, o, true, nullptr, TopkEngine::kResident);
        EXPECT_EXACT(prob, o, r.out);
        expect_paths(r, prob, K, TopkPath::kResident);
        for (std::int64_t t = 0; t < prob.T; ++t) {
          const TopkRowTrace& tr = r.trace[t];
          EXPECT_EQ(tr.kth_key, static_cast<std::uint32_t>(kEdge - t % 2)) << "row " << t;
          EXPECT_EQ(tr.count_gt, static_cast<std::uint32_t>(K - 1)) << "row " << t;
          EXPECT_EQ(tr.count_eq, 1u) << "row " << t;
          EXPECT_LE(tr.threshold_passes, resident_max_passes(len)) << "row " << t;
        }
        // Through the operator: no trace, so unsorted calls take the
        // emission that writes indices directly.
        EXPECT_EXACT(prob, o, run_gpu(prob, o, false).out);
      }
    }
  }
}

// Many ties at the K-th value: smallest-index ties take the smallest tied
// positions (the scan in position order), kAny any of them; every K, sorted
// or not.
TEST(TopkGpu, ResidentTieCutByPosition) {
  const std::int64_t len = 9000;
  // 300 distinct large scores, 3000 copies of 5.0, the rest distinct below.
  const ScoresProblem prob = custom_problem(3, len, [&](std::int64_t t, std::int64_t s) {
    const std::int64_t r = (s * 7919 + t * 13) % len;
    return r < 300 ? 100.0f + static_cast<float>(r) : r < 3300 ? 5.0f : -static_cast<float>(r);
  });
  for (int K : kAllK) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      for (bool sorted : {false, true}) {
        const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, sorted);
        const GpuResult r = run_gpu(prob, o, true, nullptr, TopkEngine::kResident);
        SCOPED_TRACE("K=" + std::to_string(K) + (ties == TieBreak::kAny ? " any" : " deterministic") +
                     (sorted ? " sorted" : ""));
        EXPECT_EXACT(prob, o, r.out);
        for (const TopkRowTrace& tr : r.trace) {
          EXPECT_EQ(tr.kth_key, score_key(5.0f));
          EXPECT_EQ(tr.count_gt, 300u);
          EXPECT_EQ(tr.count_eq, 3000u);
        }
      }
    }
  }
}

// ------------------------------------------------------- determinism -------

// Smallest-index ties: two runs are bit-identical, and a row's result does
// not depend on the other rows of the batch.
// N = 30000 runs the sampled kernel, N = 8000 the resident one.
class TopkGpuDeterministic : public ::testing::TestWithParam<std::int64_t> {};
INSTANTIATE_TEST_SUITE_P(BothKernels, TopkGpuDeterministic, ::testing::Values(30000, 8000));
TEST_P(TopkGpuDeterministic, BitIdenticalAndRowIndependent) {
  tools::ProblemSpec spec;
  spec.dist = Distribution::kTies;
  spec.layout = Layout::kVarlenBatch;
  spec.T = 24;
  spec.N = GetParam();
  const ScoresProblem prob = tools::make_scores_problem(spec);
  const SelectOptions o = make_options(1024, TieBreak::kSmallestIndex, IndexBase::kAbsolute, false);
  const GpuResult a = run_gpu(prob, o, true), b = run_gpu(prob, o, true);
  EXPECT_EXACT(prob, o, a.out);
  EXPECT_EQ(a.out.indices, b.out.indices);
  EXPECT_EQ(0, std::memcmp(a.out.values.data(), b.out.values.data(), a.out.values.size() * sizeof(float)));
  // Each row alone, and the batch reversed.
  ScoresProblem reversed = prob;
  for (std::int64_t t = 0; t < prob.T; ++t) {
    const std::int64_t from = prob.T - 1 - t;
    std::copy_n(&prob.scores[from * prob.stride], prob.stride, &reversed.scores[t * prob.stride]);
    reversed.ks[t] = prob.ks[from];
    reversed.ke[t] = prob.ke[from];
  }
  const GpuResult rev = run_gpu(reversed, o, false);
  for (std::int64_t t = 0; t < prob.T; ++t) {
    const std::int64_t from = prob.T - 1 - t;
    EXPECT_TRUE(std::equal(&rev.out.indices[t * o.k], &rev.out.indices[(t + 1) * o.k], &a.out.indices[from * o.k]))
        << "row " << from;
  }
  ScoresProblem single = prob;
  const std::int64_t row = 7;
  single.T = 1;
  single.scores.assign(&prob.scores[row * prob.stride], &prob.scores[(row + 1) * prob.stride]);
  single.ks = {prob.ks[row]};
  single.ke = {prob.ke[row]};
  const GpuResult one = run_gpu(single, o, false);
  EXPECT_TRUE(std::equal(one.out.indices.begin(), one.out.indices.end(), &a.out.indices[row * o.k]));
}

// ---------------------------------------------------- cluster-resident -----


// The cluster-resident kernel at `ctas` CTAs a row: exact, and its trace
// says the row's K-th key (a cut) or a bin bottom at or below it that
// exactly K keys reach (a whole bin).
void expect_cluster_rows(const ScoresProblem& prob, const SelectOptions& o, int ctas, const std::string& what) {
  SCOPED_TRACE(what + ", " + std::to_string(ctas) + " CTAs a row");
  TopkHooks hooks;
  hooks.split_ctas = ctas;
  const GpuResult r = run_gpu(prob, o, true, &hooks, TopkEngine::kClusterResident);
  EXPECT_EXACT(prob, o, r.out);
  expect_paths(r, prob, o.k, TopkPath::kClusterResident);
  for (std::int64_t t = 0; t < prob.T; ++t) {
    if (prob.ke[t] - prob.ks[t] <= o.k) continue;
    const KthKey want = kth_key(prob, t, o.k);
    const TopkRowTrace& tr = r.trace[t];
    EXPECT_EQ(tr.kth_key, tr.threshold_key) << "row " << t;
    EXPECT_GE(tr.threshold_passes, 1u) << "row " << t;
    EXPECT_LE(tr.threshold_passes, 3u) << "row " << t;
    if (tr.count_eq == 0) {  // a whole bin: its bottom is at or below the K-th key, above the next key
      EXPECT_EQ(tr.count_gt, static_cast<std::uint32_t>(o.k)) << "row " << t;
      EXPECT_LE(tr.threshold_key, want.key) << "row " << t;
      EXPECT_EQ(want.gt + want.eq, static_cast<std::uint32_t>(o.k)) << "row " << t;
    } else {
      EXPECT_EQ(tr.kth_key, want.key) << "row " << t;
      EXPECT_EQ(tr.count_gt, want.gt) << "row " << t;
      EXPECT_EQ(tr.count_eq, want.eq) << "row " << t;
    }
  }
}

// Every distribution, K >= 1024 and cluster size on boundary lengths (parts
// of a few keys, empty parts at 16 CTAs), causal rows of up to 40000 keys
// and ragged batches of up to 150000 (where the parts fit), in both option
// sets; unaligned row starts come from the layouts' ks.
TEST(TopkGpu, ClusterResidentEveryClusterSize) {
  for (Distribution dist : tools::all_distributions()) {
    for (int K : {1024, 2048}) {
      struct Shape {
        Layout layout;
        std::int64_t T, N;
      };
      for (const Shape& shape : {Shape{Layout::kBoundary, 12, 3 * K + 77}, Shape{Layout::kCausalSuffix, 12, 40000},
                                 Shape{Layout::kVarlenBatch, 6, 150000}}) {
        const ScoresProblem prob = testing::scores_problem(dist, shape.layout, shape.T, shape.N, K, 31 + K);
        for (bool deterministic : {false, true}) {
          const SelectOptions o =
              make_options(K, deterministic ? TieBreak::kSmallestIndex : TieBreak::kAny,
                           deterministic ? IndexBase::kRelative : IndexBase::kAbsolute, deterministic);
          for (int ctas : {2, 4, 8, selection::topk::kMaxSplit}) {
            if (selection::topk::cluster_part_keys(shape.N, ctas) > selection::topk::ClusterRows::kMaxPartKeys) {
              continue;  // the parts do not fit (the launcher refuses: ClusterResidentRefusesLongRows)
            }
            expect_cluster_rows(prob, o, ctas,
                                std::string(tools::to_string(dist)) + " K=" + std::to_string(K) + " N=" +
                                    std::to_string(shape.N) + (deterministic ? " deterministic" : " any"));
          }
        }
      }
    }
  }
}

// Rows whose top K are tied (every key equal, -0 among them), rows of
// NaN and infinities, and rows tied at the cut in every part.
TEST(TopkGpu, ClusterResidentTiesAndNonFinite) {
  const std::int64_t len = 50000;
  const ScoresProblem equal = custom_problem(3, len, [](std::int64_t t, std::int64_t) {
    return t == 2 ? -0.0f : 1.5f * static_cast<float>(t + 1);
  });
  const ScoresProblem quads = repeated_values(3, len, 4);
  const ScoresProblem odd = custom_problem(2, len, [](std::int64_t t, std::int64_t s) {
    const std::int64_t r = (s * 7919 + t * 13) % 7;
    return r == 0 ? std::numeric_limits<float>::quiet_NaN()
           : r == 1 ? std::numeric_limits<float>::infinity()
           : r == 2 ? -std::numeric_limits<float>::infinity()
                    : scrambled(t, s, len) * (r == 3 ? -1.0f : 1.0f);
  });
  for (int K : {1024, 2048}) {
    for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
      const SelectOptions o = make_options(K, ties, IndexBase::kRelative, ties == TieBreak::kSmallestIndex);
      for (int ctas : {2, 16}) {
        expect_cluster_rows(equal, o, ctas, "all equal");
        expect_cluster_rows(quads, o, ctas, "four copies of each value");
        expect_cluster_rows(odd, o, ctas, "NaN and infinities");
      }
    }
  }
}

// Every step of the cluster-resident kernel in a few launches, for the
// sanitizers: a whole-bin row and a tie-cut row, written straight out (any
// ties) and through rank 0 (smallest-index ties, sorted), at 2 and 16 CTAs.
TEST(TopkGpu, ClusterResidentFewLaunches) {
  const ScoresProblem model = testing::scores_problem(Distribution::kModelLike, Layout::kFull, 1, 20000, 2048, 7);
  const ScoresProblem quads = repeated_values(1, 20000, 4);
  for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
    const SelectOptions o = make_options(2048, ties, IndexBase::kAbsolute, ties == TieBreak::kSmallestIndex);
    for (int ctas : {2, 16}) {
      expect_cluster_rows(model, o, ctas, "model-like");
      expect_cluster_rows(quads, o, ctas, "four copies of each value");
    }
  }
}

// A pinned cluster size whose parts cannot hold the rows is refused, and
// K = 512 (fewer slots than threads) has no cluster-resident kernel.
TEST(TopkGpu, ClusterResidentRefusesWhatItCannotHold) {
  const ScoresProblem prob = testing::scores_problem(Distribution::kModelLike, Layout::kFull, 1, 100000, 2048, 3);
  DeviceArray<float> scores(prob.scores.size());
  DeviceArray<std::int32_t> ks(prob.ks.size()), ke(prob.ke.size()), indices(2048);
  scores.upload(prob.scores);
  ks.upload(prob.ks);
  ke.upload(prob.ke);
  for (int K : {512, 2048}) {
    TopkParams p = prob.params(indices.get(), nullptr, make_options(K));
    p.scores = scores.get();
    p.ks = ks.get();
    p.ke = ke.get();
    TopkHooks hooks;
    hooks.engine = TopkEngine::kClusterResident;
    hooks.split_ctas = 2;  // 50000 keys a part
    const Status st = selection::topk::launch_topk(p, nullptr, hooks);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  }
}

// ------------------------------------------------------------ long rows -----

// Rows up to 1M keys, every K, unforced; the trace shows the fast path.
TEST(TopkGpuLong, MillionKeyRows) {
  for (Distribution dist : {Distribution::kModelLike, Distribution::kTies, Distribution::kDeadRelu,
                            Distribution::kShifted}) {
    tools::ProblemSpec spec;
    spec.dist = dist;
    spec.layout = Layout::kCausalSuffix;
    spec.T = 3;
    spec.N = 1 << 20;
    const ScoresProblem prob = tools::make_scores_problem(spec);
    for (int K : kAllK) {
      for (TopkEngine engine : sampled_engines(K, spec.N)) {
        for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
          const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, K == 2048);
          TopkHooks hooks;
          const GpuResult r = run_gpu(prob, o, true, &hooks, engine);
          SCOPED_TRACE(std::string(tools::to_string(dist)) + " K=" + std::to_string(K) + " " + engine_name(engine));
          EXPECT_EXACT(prob, o, r.out);
          for (const TopkRowTrace& tr : r.trace) {
            EXPECT_NE(static_cast<int>(tr.path), static_cast<int>(TopkPath::kOverflow));
            EXPECT_NE(static_cast<int>(tr.path), static_cast<int>(TopkPath::kUnderflow));
          }
        }
      }
    }
  }
}

// Launches of few long rows (the decode shapes) take the cluster-resident
// kernel unpinned, up to the longest rows 16 CTAs hold, every K it takes.
TEST(TopkGpuLong, ClusterResidentDecodeShapes) {
  struct Shape {
    std::int64_t T, N;
  };
  for (const Shape& shape : {Shape{1, 131072}, Shape{8, 131072}, Shape{32, 131072}, Shape{2, 300000},
                             Shape{1, 16 * selection::topk::ClusterRows::kMaxPartKeys - 3}}) {
    for (Distribution dist : {Distribution::kModelLike, Distribution::kTies, Distribution::kDeadRelu,
                              Distribution::kShifted}) {
      const ScoresProblem prob = testing::scores_problem(dist, Layout::kCausalSuffix, shape.T, shape.N, 2048, 5);
      for (int K : {1024, 2048}) {
        for (TieBreak ties : {TieBreak::kAny, TieBreak::kSmallestIndex}) {
          const SelectOptions o = make_options(K, ties, IndexBase::kAbsolute, ties == TieBreak::kSmallestIndex);
          TopkHooks hooks;
          const GpuResult r = run_gpu(prob, o, true, &hooks);
          SCOPED_TRACE(std::string(tools::to_string(dist)) + " " + std::to_string(shape.T) + " x " +
                       std::to_string(shape.N) + " K=" + std::to_string(K));
          EXPECT_EXACT(prob, o, r.out);
          // 32 rows take clusters of 4 only where the device holds 32 of
          // them at once (occupancy decides; the sampled kernel otherwise).
          if (shape.T < 32) expect_paths(r, prob, K, TopkPath::kClusterResident);
        }
      }
    }
  }
}

TEST(TopkGpuLong, CausalBatch128K) {
  tools::ProblemSpec spec;
  spec.layout = Layout::kCausalSuffix;
  spec.T = 64;
  spec.N = 131072;
  const ScoresProblem prob = tools::make_scores_problem(spec);
  const SelectOptions o = make_options(2048, TieBreak::kAny, IndexBase::kRelative, false);
  EXPECT_EXACT(prob, o, run_gpu(prob, o, true).out);  // 64 rows: the public call splits each over a cluster
  for (TopkEngine engine : {TopkEngine::kSampled, TopkEngine::kSampledWide}) {
    SCOPED_TRACE(engine_name(engine));
    EXPECT_EXACT(prob, o, run_gpu(prob, o, true, nullptr, engine).out);
  }
}

}  // namespace
}  // namespace dsa
