// Stage 1 of the fused operator: the samples (every step-th key, gathered
// into the workspace and scored by the scoring kernel like any key), and tau
// per row from the samples inside the row's range (selection model step 1).
#pragma once

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "dsa_topk/dsa_topk.h"
#include "fused/config.h"
#include "fused/trace.h"
#include "selection/device/radix.cuh"
#include "selection/threshold.h"

namespace dsa::fused {

struct SamplePrepareArgs {
  const std::uint8_t* k;
  const float* k_scale;
  std::int64_t k_row_stride;
  const std::int32_t* ks;
  const std::int32_t* ke;
  std::int64_t num_queries, num_keys;
  std::int64_t step, offset, count;  // sample i is key i * step + offset, i < count
  std::uint8_t* sample_keys;         // [count, kHeadDim]
  float* sample_scale;               // [count]
  std::int32_t* sample_ks;           // [T]: the row's samples are [sample_ks, sample_ke)
  std::int32_t* sample_ke;
};

// The first sample at or after key x.
__device__ __forceinline__ std::int32_t first_sample_at(std::int64_t x, const SamplePrepareArgs& a) {
  if (x <= a.offset) return 0;
  return static_cast<std::int32_t>(min(a.count, (x - a.offset + a.step - 1) / a.step));
}

__global__ void sample_prepare_kernel(const SamplePrepareArgs a) {
  const std::int64_t items = max(a.count, a.num_queries);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < items;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (i < a.count) {
      const std::int64_t s = i * a.step + a.offset;
      const auto* src = reinterpret_cast<const uint4*>(a.k + s * a.k_row_stride);
      auto* dst = reinterpret_cast<uint4*>(a.sample_keys + i * kHeadDim);
#pragma unroll
      for (int v = 0; v < 8; ++v) dst[v] = __ldg(src + v);
      a.sample_scale[i] = __ldg(a.k_scale + s);
    }
    if (i < a.num_queries) {
      const RowRange r = row_range(a.ks, a.ke, nullptr, i, a.num_keys);
      a.sample_ks[i] = first_sample_at(r.begin, a);
      a.sample_ke[i] = first_sample_at(r.end, a);
    }
  }
}

struct ThresholdArgs {
  const std::int32_t* ks;
  const std::int32_t* ke;
  const std::int32_t* sample_ks;
  const std::int32_t* sample_ke;
  const float* sample_scores;  // [T, sample_stride]
  std::int64_t sample_stride;
  std::int64_t num_queries, num_keys;
  int k;
  bool force_threshold;
  std::uint32_t forced_threshold_key;
  std::uint32_t* tau;    // [T] out
  std::uint32_t* count;     // [T] zeroed for the filter
  std::uint32_t* unstaged;  // [T] zeroed for the filter
  FusedRowTrace* trace;     // [T] or null
};

// One CTA per row: tau = the sample of rank j = ceil(e + guard sqrt(e)) + 1,
// e = m K / len for the row's m samples; 0 (every key passes) when j > m or
// len <= K. Any tau is exact: the select stage's certificate decides.
__global__ void __launch_bounds__(kThresholdThreads) threshold_kernel(const ThresholdArgs a) {
  extern __shared__ std::uint32_t sample_keys[];
  __shared__ selection::device::RadixShared<std::uint32_t> radix;
  __shared__ selection::device::BlockKeyRange<kThresholdThreads> key_range;  // of the samples
  const std::int64_t t = blockIdx.x;
  const RowRange r = row_range(a.ks, a.ke, nullptr, t, a.num_keys);
  const std::int64_t len = r.end - r.begin;
  const std::int32_t first = a.sample_ks[t];
  const std::int32_t m = a.sample_ke[t] - first;
  std::uint32_t tau = 0;
  if (a.force_threshold) {
    tau = a.forced_threshold_key;
  } else if (len > a.k && m > 0) {
    const double e = static_cast<double>(m) * a.k / static_cast<double>(len);
    const double rank = selection::threshold_rank(e);
    if (rank <= m) {
      const float* row = a.sample_scores + t * a.sample_stride + first;
      std::uint32_t lo = 0xFFFFFFFFu, hi = 0;
      for (std::int32_t i = threadIdx.x; i < m; i += kThresholdThreads) {
        const std::uint32_t key = score_key(row[i]);
        sample_keys[i] = key;
        lo = min(lo, key);
        hi = max(hi, key);
      }
      key_range.publish(lo, hi);
      __syncthreads();  // samples and key range visible
      key_range.gather(lo, hi);
      const auto keys = [&](auto&& fn) {
        for (std::int32_t base = 0; base < m; base += kThresholdThreads) {
          const std::int32_t i = base + static_cast<std::int32_t>(threadIdx.x);
          fn(i < m ? sample_keys[i] : 0u, i < m);
        }
      };
      tau = selection::device::block_radix_select(keys, static_cast<std::uint32_t>(rank), radix, lo, hi).kth_key;
    }
  }
  if (threadIdx.x == 0) {
    a.tau[t] = tau;
    a.count[t] = 0;
    a.unstaged[t] = 0;
    if (a.trace != nullptr) {
      a.trace[t].threshold_key = tau;
      a.trace[t].samples = static_cast<std::uint32_t>(m);
    }
  }
}

}  // namespace dsa::fused
