// Device side of the shared primitives and of the API's device-pointer rules.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/fp8.h"
#include "common/keys.h"
#include "dsa_topk/dsa_topk.h"
#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"

namespace dsa {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

__global__ void decode_all(float* out) { out[threadIdx.x] = fp8_e4m3_to_float(static_cast<std::uint8_t>(threadIdx.x)); }

__global__ void keys_of(const float* in, std::uint32_t* out, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = score_key(in[i]);
    back[i] = key_score(out[i]);
  }
}

// Counts the 32-bit patterns where score_key_fast differs from score_key
// (the first one found lands in first_bad).
__global__ void compare_fast_keys(unsigned long long* mismatches, std::uint32_t* first_bad) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t b = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; b < (1ull << 32);
       b += stride) {
    const float f = __uint_as_float(static_cast<std::uint32_t>(b));
    if (score_key_fast(f) != score_key(f)) {
      if (bad == 0) atomicCAS(first_bad, 0xFFFFFFFFu, static_cast<std::uint32_t>(b));
      ++bad;
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(std::size_t n) { cudaMalloc(&ptr, n * sizeof(T)); }
  ~DeviceArray() { cudaFree(ptr); }
};

// One block per rank: copies the histogram into shared memory, picks the
// bin of ranks[blockIdx.x] with pick_striped_bin, writes the pick, and
// flags 1 when a bin is nonzero afterwards (the pick must re-zero them all)
// and 2 when a thread's pick differs from thread 0's.
template <int kThreads, int kRows>
__global__ void pick_striped(const std::uint32_t* histogram, const std::uint32_t* ranks,
                             selection::device::BinPick* picks, std::uint32_t* left_nonzero) {
  constexpr int kBins = kThreads * kRows;
  __shared__ std::uint32_t bins[kBins];
  __shared__ std::uint32_t warp_sums[kThreads / 32];
  __shared__ selection::device::BinPick broadcast;
  for (int b = threadIdx.x; b < kBins; b += kThreads) bins[b] = histogram[b];
  __syncthreads();
  const selection::device::BinPick pick =
      selection::device::pick_striped_bin<kThreads / 32, kRows>(bins, warp_sums, broadcast, ranks[blockIdx.x]);
  std::uint32_t nonzero = 0;
  for (int b = threadIdx.x; b < kBins; b += kThreads) nonzero |= bins[b];
  if (nonzero != 0) atomicOr(left_nonzero + blockIdx.x, 1u);
  // Every thread must return thread 0's pick.
  __shared__ selection::device::BinPick first;
  if (threadIdx.x == 0) first = pick;
  __syncthreads();
  if (pick.bin != first.bin || pick.above != first.above || pick.in != first.in) {
    atomicOr(left_nonzero + blockIdx.x, 2u);
  }
  if (threadIdx.x == 0) picks[blockIdx.x] = pick;
}

// pick_striped_bin against a scan on the host, for the resident kernels'
// picks (8K: 256 threads x 4 rows in the first pass, x 8 after; 16K:
// 512 x 4), 512 x 8, and the largest block it takes (1024 x 4: 32
// warps), on every rank of small random
// histograms, and on the first and last rank of every nonempty bin of
// sparse ones and of one-bin ones (first, a middle and the last bin).
template <int kThreads, int kRows>
void check_striped_pick() {
  constexpr int kBins = kThreads * kRows;
  std::mt19937 rng(kThreads * 31 + kRows);
  std::vector<std::vector<std::uint32_t>> cases;
  {
    std::vector<std::uint32_t> h(kBins);
    for (auto& c : h) c = rng() % 4;  // every bin, zero or small
    cases.push_back(h);
  }
  {
    std::vector<std::uint32_t> h(kBins, 0);
    for (int i = 0; i < 12; ++i) h[rng() % kBins] += 1 + rng() % 5000;  // few bins, large counts
    h[kBins - 1] += 7;
    cases.push_back(h);
  }
  for (int bin : {0, kBins / 2 + 5, kBins - 1}) {
    std::vector<std::uint32_t> h(kBins, 0);
    h[bin] = 2048;
    cases.push_back(h);
  }
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const std::vector<std::uint32_t>& h = cases[c];
    std::vector<std::uint64_t> before(kBins + 1, 0);
    for (int b = 0; b < kBins; ++b) before[b + 1] = before[b] + h[b];
    std::vector<std::uint32_t> ranks;
    if (c == 0) {
      for (std::uint64_t r = 1; r <= before[kBins]; ++r) ranks.push_back(static_cast<std::uint32_t>(r));
    } else {
      for (int b = 0; b < kBins; ++b) {
        if (h[b] == 0) continue;
        ranks.push_back(static_cast<std::uint32_t>(before[b] + 1));
        ranks.push_back(static_cast<std::uint32_t>(before[b + 1]));
      }
    }
    DeviceArray<std::uint32_t> d_hist(kBins), d_ranks(ranks.size()), d_flags(ranks.size());
    DeviceArray<selection::device::BinPick> d_picks(ranks.size());
    CUDA_OK(cudaMemcpy(d_hist.ptr, h.data(), kBins * sizeof(std::uint32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_ranks.ptr, ranks.data(), ranks.size() * sizeof(std::uint32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_flags.ptr, 0, ranks.size() * sizeof(std::uint32_t)));
    CUDA_OK(cudaMemset(d_picks.ptr, 0xAB, ranks.size() * sizeof(selection::device::BinPick)));
    pick_striped<kThreads, kRows><<<static_cast<unsigned>(ranks.size()), kThreads>>>(d_hist.ptr, d_ranks.ptr,
                                                                                    d_picks.ptr, d_flags.ptr);
    CUDA_OK(cudaGetLastError());
    std::vector<selection::device::BinPick> picks(ranks.size());
    std::vector<std::uint32_t> flags(ranks.size());
    CUDA_OK(cudaMemcpy(picks.data(), d_picks.ptr, picks.size() * sizeof(picks[0]), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(flags.data(), d_flags.ptr, flags.size() * sizeof(flags[0]), cudaMemcpyDeviceToHost));
    int failures = 0;
    for (std::size_t i = 0; i < ranks.size() && failures < 5; ++i) {
      // The bin b with before[b] < rank <= before[b + 1].
      const auto it = std::lower_bound(before.begin() + 1, before.end(), static_cast<std::uint64_t>(ranks[i]));
      const auto bin = static_cast<std::uint32_t>(it - before.begin() - 1);
      const bool ok = picks[i].bin == bin && picks[i].above == before[bin] && picks[i].in == h[bin] && flags[i] == 0;
      if (!ok) ++failures;
      EXPECT_TRUE(ok) << kThreads << " x " << kRows << ", case " << c << ", rank " << ranks[i] << ": got bin "
                      << picks[i].bin << " above " << picks[i].above << " in " << picks[i].in << " flags " << flags[i]
                      << ", want bin " << bin << " above " << before[bin] << " in " << h[bin];
    }
  }
}

TEST(DevicePrimitives, StripedPickMatchesHostScan) {
  check_striped_pick<256, 4>();
  check_striped_pick<256, 8>();
  check_striped_pick<512, 4>();
  check_striped_pick<512, 8>();
  check_striped_pick<1024, 4>();
}

// One block selects the top k of n items (keys[i], position i) with
// Emitter::select_and_emit_window; writes out[] (k order keys) and the
// k-th key thread 0 got.
constexpr int kWindowMaxItems = 3072;
template <int K, int kThreads>
__global__ void window_select(const std::uint32_t* keys, int n, bool smallest_index_ties, std::uint64_t* out,
                              std::uint32_t* kth) {
  namespace sd = selection::device;
  __shared__ union {
    std::uint64_t out[K];
    std::uint32_t histogram[sd::kWindowBins];
  } emit;
  __shared__ std::uint32_t item_keys[kWindowMaxItems];
  __shared__ sd::RadixShared<std::uint32_t> radix;
  __shared__ sd::WindowSelectShared<kThreads / 32> window;
  __shared__ std::uint32_t emitted;
  __shared__ sd::BlockKeyRange<kThreads> range;
  std::uint32_t lo = 0xFFFFFFFFu, hi = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    item_keys[i] = keys[i];
    lo = min(lo, keys[i]);
    hi = max(hi, keys[i]);
  }
  for (int b = threadIdx.x; b < sd::kWindowBins; b += kThreads) emit.histogram[b] = 0;
  if (threadIdx.x == 0) emitted = 0;
  range.publish(lo, hi);
  __syncthreads();
  range.gather(lo, hi);
  const auto items = [&](auto&& fn) {
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const bool present = i < n;
      fn(present ? item_keys[i] : 0u, present ? i : 0, present);
    }
  };
  const sd::Emitter<K> emitter(emit.out, &emitted, radix, smallest_index_ties);
  const std::uint32_t k = emitter.template select_and_emit_window<kThreads / 32>(items, K, lo, hi, emit.histogram,
                                                                                 window);
  __syncthreads();
  for (int i = threadIdx.x; i < K; i += kThreads) out[i] = emit.out[i];
  if (threadIdx.x == 0) *kth = k;
}

// select_and_emit_window against a host sort on item sets built for each of
// its endings: distinct keys spread wide (the K-th key's bin taken whole or
// ranked by a warp), a cluster of adjacent keys under a wide spread (the
// window narrows), more than kResolveCapacity ties at the K-th key (the tie
// ending), every key equal, and n = K. Smallest-index ties must give
// exactly the host's top K by (key descending, position ascending); any
// ties the same keys.
template <int K, int kThreads>
void check_window_select() {
  std::mt19937 rng(K + kThreads);
  std::vector<std::vector<std::uint32_t>> cases;
  const std::uint32_t base = score_key(50.0f);
  for (int n : {K, K + 1, 2 * K + 300, kWindowMaxItems}) {
    if (n > kWindowMaxItems) continue;
    std::vector<std::uint32_t> spread(n), clustered(n), tied(n), equal(n, base);
    for (int i = 0; i < n; ++i) {
      spread[i] = score_key(std::ldexp(1.0f + static_cast<float>(rng() % 1000000) / 1e6f, static_cast<int>(rng() % 9)));
      clustered[i] = i % 3 == 0 ? score_key(1e6f + static_cast<float>(i)) : base + rng() % 300;
      tied[i] = i < K - 100 ? score_key(1e6f + static_cast<float>(i)) : i < K + 200 ? base : base - 1 - rng() % 1000;
    }
    for (auto* c : {&spread, &clustered, &tied, &equal}) {
      std::shuffle(c->begin(), c->end(), rng);
      cases.push_back(*c);
    }
  }
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const std::vector<std::uint32_t>& keys = cases[c];
    const int n = static_cast<int>(keys.size());
    std::vector<std::pair<std::uint32_t, std::int32_t>> want(n);
    for (int i = 0; i < n; ++i) want[i] = {keys[i], i};
    std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    want.resize(K);
    const std::uint32_t kth_want = want.back().first;
    for (bool smallest : {true, false}) {
      DeviceArray<std::uint32_t> d_keys(n), d_kth(1);
      DeviceArray<std::uint64_t> d_out(K);
      CUDA_OK(cudaMemcpy(d_keys.ptr, keys.data(), n * sizeof(std::uint32_t), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(d_out.ptr, 0xFF, K * sizeof(std::uint64_t)));
      window_select<K, kThreads><<<1, kThreads>>>(d_keys.ptr, n, smallest, d_out.ptr, d_kth.ptr);
      CUDA_OK(cudaGetLastError());
      std::vector<std::uint64_t> out(K);
      std::uint32_t kth = 0;
      CUDA_OK(cudaMemcpy(out.data(), d_out.ptr, K * sizeof(std::uint64_t), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(&kth, d_kth.ptr, sizeof(kth), cudaMemcpyDeviceToHost));
      std::vector<std::pair<std::uint32_t, std::int32_t>> got(K);
      for (int i = 0; i < K; ++i) {  // order key: key << 32 | ~pos (selection/device/candidates.cuh)
        got[i] = {static_cast<std::uint32_t>(out[i] >> 32), static_cast<std::int32_t>(~static_cast<std::uint32_t>(out[i]))};
      }
      std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      const std::string what = std::to_string(K) + " x " + std::to_string(kThreads) + ", case " + std::to_string(c) +
                               " (n = " + std::to_string(n) + (smallest ? ", smallest-index ties)" : ", any ties)");
      EXPECT_EQ(kth, kth_want) << what;
      bool same = true, distinct = true;
      for (int i = 0; i < K; ++i) {
        same = same && got[i].first == want[i].first && (!smallest || got[i].second == want[i].second);
        distinct = distinct && got[i].second >= 0 && got[i].second < n && keys[got[i].second] == got[i].first &&
                   (i == 0 || got[i] != got[i - 1]);
      }
      EXPECT_TRUE(same) << what << ": the selected keys (and, smallest-index, positions) differ from the host's";
      EXPECT_TRUE(distinct) << what << ": an emitted item is not an item, or is emitted twice";
    }
  }
}

TEST(DevicePrimitives, WindowSelectMatchesHostSort) {
  check_window_select<512, 256>();
  check_window_select<2048, 256>();
  check_window_select<2048, 512>();
  check_window_select<1024, 1024>();
}

TEST(DevicePrimitives, Fp8DecodeMatchesHostBitForBit) {
  DeviceArray<float> d(256);
  decode_all<<<1, 256>>>(d.ptr);
  CUDA_OK(cudaGetLastError());
  std::vector<float> got(256);
  CUDA_OK(cudaMemcpy(got.data(), d.ptr, 256 * sizeof(float), cudaMemcpyDeviceToHost));
  for (int b = 0; b < 256; ++b) {
    const float want = fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
    std::uint32_t gb, wb;
    std::memcpy(&gb, &got[b], 4);
    std::memcpy(&wb, &want, 4);
    EXPECT_EQ(gb, wb) << "byte " << b;
  }
}

TEST(DevicePrimitives, KeyMapMatchesHost) {
  std::vector<float> in;
  for (std::uint32_t bits = 0; bits < 0xFFFFFFFFu - 0x00FFFFFFu; bits += 0x00FFFFFFu) {
    float f;
    std::memcpy(&f, &bits, 4);
    in.push_back(f);
  }
  in.push_back(-0.0f);
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  in.push_back(-std::numeric_limits<float>::infinity());
  const int n = static_cast<int>(in.size());
  DeviceArray<float> d_in(n), d_back(n);
  DeviceArray<std::uint32_t> d_out(n);
  CUDA_OK(cudaMemcpy(d_in.ptr, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  keys_of<<<(n + 127) / 128, 128>>>(d_in.ptr, d_out.ptr, d_back.ptr, n);
  CUDA_OK(cudaGetLastError());
  std::vector<std::uint32_t> keys(n);
  std::vector<float> back(n);
  CUDA_OK(cudaMemcpy(keys.data(), d_out.ptr, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(back.data(), d_back.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(keys[i], score_key(in[i])) << i;
    EXPECT_EQ(score_key(back[i]), keys[i]) << i;
  }
}

// The hot loops' key map against the definition, on every float bit pattern.
TEST(DevicePrimitives, FastKeyMapEqualsKeyMapOnAllInputs) {
  DeviceArray<unsigned long long> mismatches(1);
  DeviceArray<std::uint32_t> first_bad(1);
  CUDA_OK(cudaMemset(mismatches.ptr, 0, sizeof(unsigned long long)));
  CUDA_OK(cudaMemset(first_bad.ptr, 0xFF, sizeof(std::uint32_t)));
  compare_fast_keys<<<1024, 256>>>(mismatches.ptr, first_bad.ptr);
  CUDA_OK(cudaGetLastError());
  unsigned long long count = 0;
  std::uint32_t first = 0;
  CUDA_OK(cudaMemcpy(&count, mismatches.ptr, sizeof(count), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&first, first_bad.ptr, sizeof(first), cudaMemcpyDeviceToHost));
  EXPECT_EQ(count, 0ull) << "first differing bit pattern 0x" << std::hex << first;
}

// Device memory handed to the CPU backend is refused, and so are device
// ranges that break the rules on the CUDA backend (copied to the host to check).
TEST(DeviceValidation, PointerKindsAndDeviceRanges) {
  constexpr int T = 2, N = 100, K = 512;
  DeviceArray<float> scores(T * N);
  DeviceArray<std::int32_t> ks(T), ke(T), indices(T * K);
  const std::int32_t h_ks[T] = {0, 10}, h_ke[T] = {100, 5};  // row 1: ks > ke
  CUDA_OK(cudaMemcpy(ks.ptr, h_ks, sizeof(h_ks), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ke.ptr, h_ke, sizeof(h_ke), cudaMemcpyHostToDevice));
  TopkParams p;
  p.scores = scores.ptr;
  p.ks = ks.ptr;
  p.ke = ke.ptr;
  p.num_rows = T;
  p.num_cols = N;
  p.score_stride = N;
  p.indices = indices.ptr;
  p.options.k = K;
  const Status on_cpu = validate(p, Backend::kCpu);
  EXPECT_EQ(on_cpu.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(on_cpu.message(), "scores: is device memory; the CPU backend needs host memory");
  const Status ranges = validate(p, Backend::kCuda);
  EXPECT_EQ(ranges.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ranges.message().rfind("ks[1]: must be <= ke[1]", 0), 0u) << ranges.message();
  std::vector<float> host_scores(T * N, 1.0f);
  p.scores = host_scores.data();
  const Status host_on_cuda = validate(p, Backend::kCuda);
  EXPECT_EQ(host_on_cuda.message(), "scores: is host memory; the CUDA backend needs device memory");
}

}  // namespace
}  // namespace dsa
