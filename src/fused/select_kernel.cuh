// Stage 3 of the fused operator: per row, the certificate over the filter's
// exact count, then the window select and emission over the row's
// candidates (selection/device/emit.cuh, as the standalone top-k). A row whose
// certificate fails is flagged for the repair stage and not written.
#pragma once

#include <cub/block/block_radix_sort.cuh>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_status.h"
#include "common/keys.h"
#include "common/launch_cache.h"
#include "common/row_range.cuh"
#include "common/warp.h"
#include "fused/config.h"
#include "fused/trace.h"
#include "selection/device/candidates.cuh"
#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"

namespace dsa::fused {

// The candidates of rows with up to kSmemCandidates of them are copied to
// shared memory once; larger sets (overflowing rows that still certify) are
// read from the workspace on every pass. tau is the sample of rank j ~ 97 of
// S = 64 N / K (threshold_kernel.cuh), so the count is ~N j / S = 1.52 K
// with a standard deviation of ~N sqrt(j) / S = 0.15 K: 2.25 K covers it by
// ~4.8 sigma (1.5 K left half the rows in the workspace; copying them bought
// only 210 -> 204 us at T = 4096: the stage is bound by its instructions per
// candidate and pass, docs/perf-log.md, F10). Shared memory stays small enough
// for four rows per SM; the emitted order keys share their space with the
// sort.
template <int K, int Threads>
struct SelectConfig {
  static constexpr int kSmemCandidates = 9 * K / 4;
  static constexpr int kWarps = Threads / kWarpSize;
  using BlockSort = cub::BlockRadixSort<std::uint64_t, Threads, K / Threads>;
  struct SharedStorage {
    union {
      std::uint64_t out[K];
      // Rows of more than K candidates: the select's histogram
      // (Emitter::select_and_emit_window), before any emission.
      std::uint32_t histogram[selection::device::kWindowBins];
      typename BlockSort::TempStorage sort;  // the sorted write-out, after out is read
    } emit;
    std::uint32_t keys[kSmemCandidates];
    std::int32_t pos[kSmemCandidates];
    selection::device::RadixShared<std::uint32_t> radix;
    selection::device::WindowSelectShared<kWarps> window;
    std::uint32_t emitted;
    selection::device::BlockKeyRange<Threads> key_range;  // of the candidate keys
  };
};

struct SelectArgs {
  const std::int32_t* ks;
  const std::int32_t* ke;
  std::int64_t num_keys;
  const std::uint32_t* count;         // [T] entries staged (scores > tau, ties within budget)
  const std::uint64_t* candidates;    // [T, capacity] order keys
  std::uint32_t capacity;
  const std::uint32_t* unstaged;      // [T] ties with tau left out
  std::int32_t* indices;              // [T, K]
  float* values;                      // [T, K] or null
  bool relative_indices;
  bool smallest_index_ties;
  bool sorted;
  std::uint32_t* flags;               // [T] out: RowFlag (common/row_range.cuh)
  FusedRowTrace* trace;               // [T] or null
};

template <int K, int Threads>
__global__ void __launch_bounds__(Threads, 1) select_kernel(const SelectArgs a) {
  using Cfg = SelectConfig<K, Threads>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto& sh = *reinterpret_cast<typename Cfg::SharedStorage*>(smem);
  const std::int64_t t = blockIdx.x;
  const RowRange r = row_range(a.ks, a.ke, nullptr, t, a.num_keys);
  const auto len = static_cast<std::uint32_t>(r.end - r.begin);
  const std::uint32_t c = a.count[t];
  const std::uint32_t unstaged = a.unstaged[t];
  const bool certified = fused_certified(c, unstaged, len, K, a.capacity, a.smallest_index_ties);
  if (threadIdx.x == 0) {
    a.flags[t] = certified ? kRowDone : kRowRescore;
    if (a.trace != nullptr) {
      a.trace[t].path = certified ? FusedPath::kCertified : FusedPath::kRepaired;
      a.trace[t].count = c + unstaged;
      a.trace[t].unstaged = unstaged;
    }
  }
  if (!certified) return;  // the same for every thread

  // Rows of at most K candidates emit them all and pad the rest of out[];
  // longer ones select K into it, with the select's histogram in its place
  // until then (the same for every thread).
  if (c <= K) {
    for (int i = threadIdx.x; i < K; i += Threads) sh.emit.out[i] = selection::device::kEmptySlot;
  } else {
    for (int b = threadIdx.x; b < selection::device::kWindowBins; b += Threads) sh.emit.histogram[b] = 0;
  }
  if (threadIdx.x == 0) sh.emitted = 0;
  const std::uint64_t* area = a.candidates + t * a.capacity;
  const bool in_smem = c <= static_cast<std::uint32_t>(Cfg::kSmemCandidates);  // the same for every thread
  std::uint32_t lo = 0xFFFFFFFFu, hi = 0;
#pragma unroll 4
  for (std::uint32_t i = threadIdx.x; i < c; i += Threads) {
    const std::uint64_t v = __ldg(area + i);
    const auto key = static_cast<std::uint32_t>(v >> 32);
    lo = min(lo, key);
    hi = max(hi, key);
    if (in_smem) {
      sh.keys[i] = key;
      sh.pos[i] = selection::device::order_pos(v);
    }
  }
  sh.key_range.publish(lo, hi);
  __syncthreads();  // out[], the counter, the shared-memory candidates and the key range visible
  sh.key_range.gather(lo, hi);
  const auto items = [&](auto&& fn) {
    for (std::uint32_t base = 0; base < c; base += Threads) {
      const std::uint32_t i = base + threadIdx.x;
      const bool present = i < c;
      std::uint32_t key = 0;
      std::int32_t pos = 0;
      if (present) {
        if (in_smem) {
          key = sh.keys[i];
          pos = sh.pos[i];
        } else {
          const std::uint64_t v = __ldg(area + i);
          key = static_cast<std::uint32_t>(v >> 32);
          pos = selection::device::order_pos(v);
        }
      }
      fn(key, pos, present);
    }
  };
  const selection::device::Emitter<K> emitter(sh.emit.out, &sh.emitted, sh.radix, a.smallest_index_ties);
  if (c <= K) {
    emitter.emit_if(items, [](std::uint32_t, std::int32_t) { return true; });
  } else {
    emitter.template select_and_emit_window<Cfg::kWarps>(items, K, lo, hi, sh.emit.histogram, sh.window);
  }
  __syncthreads();  // out complete
  // Values come from the keys: score_key is invertible on every score the
  // kernel can produce except NaN, which ranks (and is reported) as -inf.
  selection::device::write_row<K, Threads, typename Cfg::BlockSort>(
      sh.emit.out, sh.emit.sort, a.indices + t * K, a.values != nullptr ? a.values + t * K : nullptr,
      a.relative_indices ? 0 : r.begin, a.sorted, a.smallest_index_ties,
      [](std::int32_t, std::uint32_t key) { return key_score(key); });
}

// select_kernel<K, Threads> over `rows` rows (a CTA a row), its shared
// memory allowed on `device` once; `what` names the operator in errors.
template <int K, int Threads>
Status launch_select_kernel(const SelectArgs& args, unsigned rows, int device, CUstream_st* stream, const char* what) {
  constexpr int kSmem = static_cast<int>(sizeof(typename SelectConfig<K, Threads>::SharedStorage));
  auto kernel = select_kernel<K, Threads>;
  const Status st = LaunchCache::get().allow_shared_memory(reinterpret_cast<const void*>(kernel), device, kSmem);
  if (!st.ok()) return st;
  kernel<<<rows, Threads, kSmem, stream>>>(args);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : cuda_status(err, std::string(what) + ": select kernel launch");
}

// The instance of K (512, 1024, 2048) at kSelectThreads, or wide
// (wide_select_threads(K)).
template <int K>
Status launch_select_kernel(const SelectArgs& args, unsigned rows, bool wide, int device, CUstream_st* stream,
                            const char* what) {
  constexpr int kWide = wide_select_threads(K);
  return wide ? launch_select_kernel<K, kWide>(args, rows, device, stream, what)
              : launch_select_kernel<K, kSelectThreads>(args, rows, device, stream, what);
}

}  // namespace dsa::fused
