// The cluster-resident top-k kernel (docs/design.md, "GPU top-k"): a launch
// of few long rows, each row held in the shared memory of a cluster of 2 to
// 16 CTAs (one an SM), selected by radix passes whose histograms are summed
// over the cluster through distributed shared memory. Like the resident
// kernel it has no threshold, no candidate buffer and no repair: every
// answer is exact by construction. What it removes is the sampled kernel's
// serial chain on one SM (samples, threshold, filter, select, write-out),
// which sets a lone long row's time whatever the split (docs/perf-log.md,
// T108, T110):
//   1. each rank loads its part of the row once (16-byte loads,
//      ClusterRows::kLoadUnroll a thread in flight) as keys, counting their
//      top kFirstDigitBits bits;
//   2. per pass: each rank adds its non-zero bins into rank 0's cluster
//      histogram (remote atomics), a cluster barrier, rank 0 picks the bin
//      of the K-th largest key and writes it into every rank, a second
//      barrier; the next pass counts the next digit of the keys in that
//      bin. At most three passes (11 + 11 + 10 bits) fix the K-th key; most
//      rows stop earlier, when the top K take the chosen bin whole;
//   3. each rank counts what it takes (keys at or above the bin's bottom,
//      or above the K-th key and its ties), the ranks exchange the counts
//      (one more barrier), and each writes its winners at its own offset:
//      straight to the output, or, for a sorted or deterministic row, as
//      order keys into rank 0, which sorts and writes the row.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/keys.h"
#include "common/row_range.cuh"
#include "selection/device/candidates.cuh"
#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"
#include "selection/topk/config.h"
#include "selection/topk/topk_kernel.cuh"

namespace dsa::selection::topk {

template <int K>
class ClusterRow {
 public:
  using Cfg = ClusterConfig<K>;
  using Storage = typename Cfg::SharedStorage;
  static constexpr int kThreads = ClusterRows::kThreads;
  static constexpr int kVec = device::kGroupSize;

  // row: the scores of positions [0, len), len > K; keys: this rank's part
  // of the row (cluster_part_keys(num_cols, size) keys, geometry.h).
  __device__ ClusterRow(Storage& sh, std::uint32_t* keys, const KernelParams& p, const float* row, std::int32_t len)
      : sh_(sh), keys_(keys), p_(p), row_(row), len_(len) {
    const auto cluster = cooperative_groups::this_cluster();
    rank_ = cluster.block_rank();
    size_ = cluster.num_blocks();
    // Slot group g of the row starts at the 16-byte boundary at or below
    // position 0 (lead_ positions before it), so every load is aligned and
    // stays inside the 16-byte words that hold the row.
    lead_ = static_cast<std::int32_t>((reinterpret_cast<std::uintptr_t>(row) / sizeof(float)) % kVec);
    const std::int32_t groups = (lead_ + len + kVec - 1) / kVec;
    const std::int32_t per_rank = (groups + static_cast<std::int32_t>(size_) - 1) / static_cast<std::int32_t>(size_);
    first_group_ = per_rank * static_cast<std::int32_t>(rank_);
    groups_ = max(0, min(per_rank, groups - first_group_));
  }

  // Selects the row and writes its K indices (and values) at `indices` /
  // `values` (the row's K slots), positions + offset.
  __device__ void run(std::int32_t* indices, float* values, std::int32_t offset) {
    const auto cluster = cooperative_groups::this_cluster();
    // Rank 0's cluster histogram is zero before any rank adds into it, and
    // no rank writes another's shared memory before that one has started
    // (racecheck: "a block that might not have entered yet"): each thread
    // arrives after its zeroing and waits after the load, which hides the
    // barrier.
#pragma unroll
    for (int b = 0; b < Cfg::kBins / kThreads; ++b) sh_.cluster_histogram[b * kThreads + threadIdx.x] = 0;
    auto started = cluster.barrier_arrive();
    load();
    cluster.barrier_wait(std::move(started));
    TopkRowTrace trace{TopkPath::kClusterResident, 0, 0, 0, 0, 0};
    // The K-th largest key is the rank-th largest of the keys sharing the
    // digits fixed so far (prefix under fixed); `above` keys lie above them.
    std::uint32_t prefix = 0, fixed = 0, rank = K, above = 0;
    bool whole = false;
    int shift = 32;
    for (int pass = 0; pass < Cfg::kMaxPasses; ++pass) {
      const int bits = pass == 0 ? Cfg::kFirstDigitBits : min(Cfg::kDigitBits, shift);
      shift -= bits;
      if (pass > 0) count_digits(prefix, fixed, shift, bits);
      const device::BinPick pick = cluster_pick(rank);
      ++trace.threshold_passes;
      const std::uint32_t digit = static_cast<std::uint32_t>(Cfg::kBins - 1) - pick.bin;
      prefix |= digit << shift;
      fixed |= ((1u << bits) - 1u) << shift;
      above += pick.above;
      rank -= pick.above;
      if (rank == pick.in) {  // the top K are every key at or above the bin's bottom
        whole = true;
        break;
      }
      if (shift == 0) break;  // the bin is one key, the K-th: `rank` of its ties belong to the top K
    }
    // Every key a rank holds is a score's (>= kNegInfKey, whose top digit
    // is not 0) or kPadKey, so the pick's bin never admits the padding.
    const std::uint32_t bottom = prefix;  // whole: the bin's least key; else the K-th key
    const std::uint32_t take_ties = whole ? 0u : rank;
    const std::uint32_t count_gt = whole ? K : above;
    trace.threshold_key = trace.kth_key = bottom;
    trace.count_gt = count_gt;

    // Step 3: this rank's counts, exchanged.
    std::uint32_t mine_gt = 0, mine_eq = 0;
    for_each_group([&](std::int32_t, const uint4& k) {
      const std::uint32_t key[kVec] = {k.x, k.y, k.z, k.w};
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        mine_gt += whole ? (key[j] >= bottom ? 1u : 0u) : (key[j] > bottom ? 1u : 0u);
        mine_eq += !whole && key[j] == bottom ? 1u : 0u;
      }
    });
    mine_gt = __reduce_add_sync(device::kFullWarp, mine_gt);
    mine_eq = __reduce_add_sync(device::kFullWarp, mine_eq);
    if (threadIdx.x == 0) {
      sh_.taken_gt = 0;
      sh_.taken_eq = 0;
      sh_.local_gt = 0;
      sh_.local_eq = 0;
    }
    __syncthreads();
    if (device::lane_id() == 0) {
      atomicAdd(&sh_.local_gt, mine_gt);
      atomicAdd(&sh_.local_eq, mine_eq);
    }
    __syncthreads();
    if (threadIdx.x < size_) {
      Storage* other = cluster.map_shared_rank(&sh_, threadIdx.x);
      other->part_gt[rank_] = sh_.local_gt;
      other->part_eq[rank_] = sh_.local_eq;
    }
    cluster.sync();  // every rank's counts in every table
    std::uint32_t base_gt = 0, base_eq = 0, all_eq = 0;
    for (unsigned q = 0; q < size_; ++q) {
      if (q < rank_) {
        base_gt += sh_.part_gt[q];
        base_eq += sh_.part_eq[q];
      }
      all_eq += sh_.part_eq[q];
    }
    trace.count_eq = whole ? 0u : all_eq;

    const bool gather = p_.sorted || p_.smallest_index_ties;
    std::uint64_t* const root_out = gather ? cluster.map_shared_rank(sh_.work.out, 0) : nullptr;
    const auto store = [&](std::uint32_t slot, std::uint32_t key, std::int32_t pos) {
      if (gather) {
        root_out[slot] = device::order_key(key, pos);
      } else {
        indices[slot] = pos + offset;
        if (values != nullptr) values[slot] = __ldg(row_ + pos);
      }
    };
    // The keys above the cut (or at or above a whole bin's bottom), at
    // base_gt + their order of claim.
    emit_where(whole ? bottom : bottom + 1, base_gt, store);  // bottom + 1: the K-th key is below +inf's key
    if (take_ties > base_eq) emit_ties(bottom, count_gt, base_eq, take_ties, store);
    if (p_.trace != nullptr && rank_ == 0 && threadIdx.x == 0) p_.trace[blockIdx.x / size_] = trace;
    if (!gather) return;
    cluster.sync();  // rank 0 holds the row's K order keys
    if (rank_ != 0) return;
    device::write_row<K, kThreads, typename Cfg::BlockSort>(
        sh_.work.out, sh_.work.sort, indices, values, offset, p_.sorted, p_.smallest_index_ties,
        [this](std::int32_t pos, std::uint32_t) { return __ldg(row_ + pos); });
  }

 private:
  // Step 1: this rank's groups as keys (kPadKey outside [0, len)), and the
  // first digit's local histogram. Rounds of kLoadUnroll 16-byte loads a
  // thread are in flight before their keys are stored. Ends with a barrier.
  __device__ void load() {
    std::uint32_t* const histogram = sh_.local_histogram;
#pragma unroll
    for (int b = 0; b < Cfg::kBins / kThreads; ++b) histogram[b * kThreads + threadIdx.x] = 0;
    __syncthreads();
    const float4* const src = reinterpret_cast<const float4*>(row_ - lead_) + first_group_;
    uint4* const dst = reinterpret_cast<uint4*>(keys_);
    constexpr int kUnroll = ClusterRows::kLoadUnroll;
    for (std::int32_t base = 0; base < groups_; base += kUnroll * kThreads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int32_t g = base + u * kThreads + static_cast<std::int32_t>(threadIdx.x);
        if (g < groups_) v[u] = __ldg(src + g);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int32_t g = base + u * kThreads + static_cast<std::int32_t>(threadIdx.x);
        if (g < groups_) {
          const std::int32_t pos0 = kVec * (first_group_ + g) - lead_;
          const float s[kVec] = {v[u].x, v[u].y, v[u].z, v[u].w};
          std::uint32_t key[kVec];
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const bool present = 0 <= pos0 + j && pos0 + j < len_;
            key[j] = present ? score_key_fast(s[j]) : kPadKey;
            if (present) atomicAdd(&histogram[Cfg::kBins - 1 - (key[j] >> (32 - Cfg::kFirstDigitBits))], 1u);
          }
          dst[g] = uint4{key[0], key[1], key[2], key[3]};
        }
      }
    }
    __syncthreads();
  }

  // Calls fn(g, keys of slot group g) for this rank's groups; every thread
  // the same number of times (fn may use warp collectives), past the part
  // with kPadKey groups.
  template <class Fn>
  __device__ void for_each_group(Fn&& fn) const {
    const uint4* const keys = reinterpret_cast<const uint4*>(keys_);
    for (std::int32_t base = 0; base < groups_; base += kThreads) {
      const std::int32_t g = base + static_cast<std::int32_t>(threadIdx.x);
      uint4 k{kPadKey, kPadKey, kPadKey, kPadKey};
      if (g < groups_) k = keys[g];
      fn(g, k);
    }
  }

  // A later pass's local histogram: the `bits`-bit digit at `shift` of the
  // keys whose fixed digits equal prefix (the padding never does). The
  // histogram is zero at entry (cluster_pick re-zeroed it). Ends with a
  // barrier.
  __device__ void count_digits(std::uint32_t prefix, std::uint32_t fixed, int shift, int bits) {
    std::uint32_t* const histogram = sh_.local_histogram;
    const std::uint32_t digit_mask = (1u << bits) - 1u;
    for_each_group([&](std::int32_t, const uint4& k) {
      const std::uint32_t key[kVec] = {k.x, k.y, k.z, k.w};
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if ((key[j] & fixed) == prefix) atomicAdd(&histogram[Cfg::kBins - 1 - ((key[j] >> shift) & digit_mask)], 1u);
      }
    });
    __syncthreads();
  }

  // The bin (0 = the top digit) of the cluster's histogram holding its
  // rank-th largest counted key, the same in every rank: each rank adds its
  // non-zero bins into rank 0's cluster histogram (one remote atomic a
  // non-zero bin, a warp's lanes on consecutive bins) and re-zeroes them
  // for the next pass; after a barrier rank 0 picks (which re-zeroes its
  // cluster histogram) and writes the pick into every rank; after a second
  // barrier each rank reads its copy. A rank adds into rank 0 only after
  // the barrier that ended the pass before, by when rank 0's pick has
  // re-zeroed the histogram and nobody reads the old pick. The local
  // histogram is complete at entry (a barrier ago).
  __device__ device::BinPick cluster_pick(std::uint32_t rank) {
    const auto cluster = cooperative_groups::this_cluster();
    std::uint32_t* const root = cluster.map_shared_rank(sh_.cluster_histogram, 0);
#pragma unroll
    for (int i = 0; i < Cfg::kBins / kThreads; ++i) {
      const int b = i * kThreads + static_cast<int>(threadIdx.x);
      const std::uint32_t count = sh_.local_histogram[b];
      sh_.local_histogram[b] = 0;  // only this thread reads bin b
      if (count != 0) atomicAdd(root + b, count);
    }
    cluster.sync();  // rank 0 holds the cluster's counts
    if (rank_ == 0) {
      const device::BinPick pick =
          device::pick_striped_bin<Cfg::kWarps, Cfg::kBinRows>(sh_.cluster_histogram, sh_.warp_sums, sh_.pick, rank);
      if (threadIdx.x > 0 && threadIdx.x < size_) *cluster.map_shared_rank(&sh_.pick, threadIdx.x) = pick;
    }
    cluster.sync();  // every rank holds the pick
    return sh_.pick;
  }

  // Stores every key >= least at slot first + its claim order (one shared
  // atomic a warp and round). No barrier.
  template <class Store>
  __device__ void emit_where(std::uint32_t least, std::uint32_t first, const Store& store) {
    for_each_group([&](std::int32_t g, const uint4& k) {
      const std::uint32_t key[kVec] = {k.x, k.y, k.z, k.w};
      std::uint32_t mask = 0;
#pragma unroll
      for (int j = 0; j < kVec; ++j) mask |= static_cast<std::uint32_t>(key[j] >= least) << j;
      const auto count = static_cast<std::uint32_t>(__popc(mask));
      std::uint32_t total = 0;
      const std::uint32_t inclusive = device::warp_count_scan(count, total);
      if (total == 0) return;  // the same for the whole warp
      std::uint32_t slot = first + device::warp_claim(&sh_.taken_gt, count, inclusive);
      const std::int32_t pos0 = kVec * (first_group_ + g) - lead_;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if ((mask >> j) & 1u) store(slot++, key[j], pos0 + j);
      }
    });
  }

  // The ties of the K-th key kth that this rank contributes: the cluster's
  // ties ranked [base, base + this rank's count) (ranks in position order),
  // those below `take` at slots count_gt + tie rank. Smallest-index ties
  // rank them by position (a block scan a round); any ties by claim order.
  template <class Store>
  __device__ void emit_ties(std::uint32_t kth, std::uint32_t count_gt, std::uint32_t base, std::uint32_t take,
                            const Store& store) {
    std::uint32_t ties_before = base;
    for_each_group([&](std::int32_t g, const uint4& k) {
      const std::uint32_t key[kVec] = {k.x, k.y, k.z, k.w};
      std::uint32_t tied = 0;
#pragma unroll
      for (int j = 0; j < kVec; ++j) tied |= static_cast<std::uint32_t>(key[j] == kth) << j;
      const auto count = static_cast<std::uint32_t>(__popc(tied));
      std::uint32_t rank = 0;
      if (p_.smallest_index_ties) {
        std::uint32_t round_ties = 0;
        typename Cfg::Scan(sh_.scan).ExclusiveSum(count, rank, round_ties);
        rank += ties_before;
        ties_before += round_ties;
        __syncthreads();  // the scan's storage is reused next round
      } else {
        std::uint32_t total = 0;
        const std::uint32_t inclusive = device::warp_count_scan(count, total);
        if (total == 0) return;  // the same for the whole warp
        rank = base + device::warp_claim(&sh_.taken_eq, count, inclusive);
      }
      const std::int32_t pos0 = kVec * (first_group_ + g) - lead_;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if ((tied >> j) & 1u) {
          if (rank < take) store(count_gt + rank, kth, pos0 + j);
          ++rank;
        }
      }
    });
  }

  Storage& sh_;
  std::uint32_t* keys_;
  const KernelParams& p_;
  const float* row_;
  std::int32_t len_;
  std::int32_t lead_ = 0;         // positions between the 16-byte boundary below the row and its start
  std::int32_t first_group_ = 0;  // this rank's first slot group of the row
  std::int32_t groups_ = 0;       // this rank's slot groups
  unsigned rank_ = 0, size_ = 1;
};

// One row a cluster (grid = rows x cluster size, launched with the cluster
// dimension). Rows of at most K keys: rank 0 writes every position.
template <int K>
__global__ void __launch_bounds__(ClusterRows::kThreads, 1) topk_cluster_kernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  wait_for_producer(p);  // nothing is read before the scores' producer has ended
  using Cfg = ClusterConfig<K>;
  auto& sh = *reinterpret_cast<typename Cfg::SharedStorage*>(smem);
  auto* const keys = reinterpret_cast<std::uint32_t*>(smem + Cfg::kKeysOffset);
  const auto cluster = cooperative_groups::this_cluster();
  const std::int64_t t = blockIdx.x / cluster.num_blocks();
  if (p.row_mask != nullptr && p.row_mask[t] == 0) return;  // the same for every CTA of the cluster
  // The launcher sizes each rank's part for num_cols keys, and the range is
  // clamped to [0, num_cols): a part fits even when the caller turned the
  // host's range check off.
  const RowRange range = row_range(p.ks, p.ke, nullptr, t, p.num_cols);
  const std::int32_t len = range.end - range.begin;
  const float* row = p.scores + t * p.stride + range.begin;
  const std::int32_t offset = p.relative_indices ? 0 : range.begin;
  std::int32_t* const indices = p.indices + t * K;
  float* const values = p.values != nullptr ? p.values + t * K : nullptr;
  if (len > K) {
    ClusterRow<K>(sh, keys, p, row, len).run(indices, values, offset);
    return;
  }
  if (cluster.block_rank() != 0) return;  // no CTA reads another's memory on this path
  device::emit_whole_row<K, ClusterRows::kThreads>(sh.work.out, row, len);
  __syncthreads();
  if (p.trace != nullptr && threadIdx.x == 0) p.trace[t] = TopkRowTrace{TopkPath::kDirect, 0, 0, 0, 0, 0};
  device::write_row<K, ClusterRows::kThreads, typename Cfg::BlockSort>(
      sh.work.out, sh.work.sort, indices, values, offset, p.sorted, p.smallest_index_ties,
      [row](std::int32_t pos, std::uint32_t) { return __ldg(row + pos); });
}

}  // namespace dsa::selection::topk
