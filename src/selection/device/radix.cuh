// Block-wide exact radix select on unsigned keys (32-bit score keys, or the
// decode merge's 64-bit (score key, inverted index) pairs), the device form
// of selection/model.cpp's radix_select_set: one histogram sweep per 8-bit
// digit, most significant first. Shared by the standalone top-k (candidate
// select, tie cut, repairs), the fused threshold and the decode merge.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/warp.h"

namespace dsa::selection::device {

inline constexpr int kRadixBits = 8;
inline constexpr int kRadixBins = 1 << kRadixBits;
inline constexpr std::uint32_t kDigitMask = kRadixBins - 1;
using ::dsa::kFullWarp;
using ::dsa::kWarpSize;
inline constexpr int kBinsPerLane = kRadixBins / kWarpSize;

// The key types the radix select takes: whole digits, and a count of
// leading zeros the device has an instruction for.
template <class Key>
concept RadixKey = std::is_same_v<Key, std::uint32_t> || std::is_same_v<Key, std::uint64_t>;
template <RadixKey Key>
inline constexpr int kKeyBits = std::numeric_limits<Key>::digits;

template <RadixKey Key>
struct RadixResult {
  Key kth_key;               // the k-th largest key of the set
  std::uint32_t take_equal;  // of the keys == kth_key, how many belong to the top k
  // Only from block_radix_select<true>: the sweep stopped at a digit bin that
  // the top k take whole. Then kth_key is the bin's least possible key (the
  // k-th largest is somewhere in the bin): the top k are exactly the keys
  // >= kth_key, and take_equal is the bin's count.
  bool whole_bin = false;
};

// Shared memory of one block_radix_select call (reusable by the next call).
template <RadixKey Key>
struct RadixShared {
  std::uint32_t histogram[kRadixBins];
  Key prefix;            // digits of the k-th key fixed so far (broadcast)
  std::uint32_t rank;    // its rank among the keys sharing `prefix` (broadcast)
  std::uint32_t whole;   // 1: the top k take the chosen bin whole (broadcast)
  // The least key emitted (Emitter, after a whole-bin stop): written while
  // other threads may still read the broadcasts, so it keeps its own 16
  // bytes (racecheck reported stores to it against reads of the fields
  // beside it once a shared plan moved it off a 16-byte boundary).
  alignas(16) Key least;
};

__device__ __forceinline__ unsigned lane_id() { return threadIdx.x % kWarpSize; }

// Warp-aggregated append: every lane of the warp calls it (converged), lane i
// asking for n_i < 2^CountBits consecutive slots of `*counter`. Returns lane
// i's first slot; slots follow lane order. One shared-memory atomic per warp.
template <int CountBits>
__device__ __forceinline__ std::uint32_t warp_append(std::uint32_t n, std::uint32_t* counter) {
  const unsigned lower = (1u << lane_id()) - 1;
  std::uint32_t below = 0, total = 0;
#pragma unroll
  for (int b = 0; b < CountBits; ++b) {
    const unsigned voters = __ballot_sync(kFullWarp, (n >> b) & 1u);
    below += static_cast<std::uint32_t>(__popc(voters & lower)) << b;
    total += static_cast<std::uint32_t>(__popc(voters)) << b;
  }
  std::uint32_t base = 0;
  if (lane_id() == 0 && total != 0) base = atomicAdd(counter, total);
  return __shfl_sync(kFullWarp, base, 0) + below;
}

// Inclusive shuffle scan of v over lanes 0..kLanes-1 (a power of two, or
// kWarpSize for the whole warp); lanes at or past kLanes get partial sums
// that callers must not read.
template <int kLanes = kWarpSize>
__device__ __forceinline__ std::uint32_t warp_inclusive_sum(std::uint32_t v) {
  static_assert(kLanes > 0 && kLanes <= kWarpSize && (kLanes & (kLanes - 1)) == 0, "a power of two lanes");
  const unsigned lane = lane_id();
#pragma unroll
  for (int d = 1; d < kLanes; d *= 2) {
    const std::uint32_t below = __shfl_up_sync(kFullWarp, v, d);
    if (lane >= static_cast<unsigned>(d)) v += below;
  }
  return v;
}

// warp_append's append by an inclusive shuffle scan of the lanes' counts (five
// shuffles and adds where warp_append takes CountBits ballots and twice as
// many popcounts), in two steps so that a caller can skip an empty warp's
// claim: warp_count_scan gives lane i the counts of lanes 0..i and the
// warp's total; warp_claim then takes the total's slots with one atomic,
// from lane 31 (which holds it), and returns lane i's first slot.
__device__ __forceinline__ std::uint32_t warp_count_scan(std::uint32_t n, std::uint32_t& total) {
  const std::uint32_t inclusive = warp_inclusive_sum(n);
  total = __shfl_sync(kFullWarp, inclusive, kWarpSize - 1);
  return inclusive;
}
__device__ __forceinline__ std::uint32_t warp_claim(std::uint32_t* counter, std::uint32_t n, std::uint32_t inclusive) {
  std::uint32_t base = 0;
  if (lane_id() == kWarpSize - 1) base = atomicAdd(counter, inclusive);
  return __shfl_sync(kFullWarp, base, kWarpSize - 1) + inclusive - n;
}

// Warp 0 only: the digit bin (walking down from 255) where the rank-th
// largest key of the histogram lies; writes prefix | bin << shift and the
// rank inside that bin to `sh`. Lane l owns bins 255-8l down to 248-8l.
template <RadixKey Key>
__device__ __forceinline__ void pick_bin(RadixShared<Key>& sh, int shift, Key prefix, std::uint32_t rank) {
  const unsigned lane = lane_id();
  const int top = kRadixBins - 1 - kBinsPerLane * static_cast<int>(lane);
  std::uint32_t counts[kBinsPerLane];
  std::uint32_t sum = 0;
#pragma unroll
  for (int i = 0; i < kBinsPerLane; ++i) {
    counts[i] = sh.histogram[top - i];
    sum += counts[i];
  }
  const std::uint32_t inclusive = warp_inclusive_sum(sum);  // keys in this lane's bins and all higher bins
  const std::uint32_t exclusive = inclusive - sum;
  // Exactly one lane holds the rank-th key (rank <= keys matching prefix).
  if (exclusive < rank && rank <= inclusive) {
    std::uint32_t r = rank - exclusive;
    int bin = top;
    bool found = false, whole = false;
#pragma unroll
    for (int i = 0; i < kBinsPerLane; ++i) {
      if (!found) {
        if (r <= counts[i]) {
          found = true;
          bin = top - i;
          whole = r == counts[i];
        } else {
          r -= counts[i];
        }
      }
    }
    sh.prefix = prefix | (static_cast<Key>(bin) << shift);
    sh.rank = r;
    sh.whole = whole ? 1u : 0u;
  }
}

// The block's least and greatest key, in two halves around a barrier the
// caller places (it usually publishes other shared writes with it):
// publish() reduces each warp's range into its slot, gather() reads every
// slot after the barrier. Every thread calls both; all get the range.
template <int Threads>
struct BlockKeyRange {
  static constexpr int kWarps = Threads / kWarpSize;
  std::uint32_t least[kWarps];
  std::uint32_t greatest[kWarps];
  __device__ __forceinline__ void publish(std::uint32_t lo, std::uint32_t hi) {
    lo = __reduce_min_sync(kFullWarp, lo);
    hi = __reduce_max_sync(kFullWarp, hi);
    if (lane_id() == 0) {
      least[threadIdx.x / kWarpSize] = lo;
      greatest[threadIdx.x / kWarpSize] = hi;
    }
  }
  __device__ __forceinline__ void gather(std::uint32_t& lo, std::uint32_t& hi) const {
    lo = 0xFFFFFFFFu;
    hi = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      lo = min(lo, least[w]);
      hi = max(hi, greatest[w]);
    }
  }
};

// 2^kBinBits linear bins over the keys [lo, hi], bin 0 at the top: bin b
// holds the keys k with (hi - k) >> shift == b, shift the least that fits
// the span into the bins (0: one key per bin). The threshold of the sampled
// top-k and the passes of the resident one narrow a window to one bin.
template <int kBinBits>
struct KeyWindow {
  std::uint32_t lo, hi;
  int shift;
  __device__ KeyWindow(std::uint32_t lo_key, std::uint32_t hi_key) : lo(lo_key), hi(hi_key) {
    const int span_bits = 32 - __clz(static_cast<int>(hi - lo));  // 0 when lo == hi
    shift = max(0, span_bits - kBinBits);
  }
  // The window of the same bins, widened down so that they tile it exactly:
  // lo = hi + 1 - (2^kBinBits << shift), or 0. Then every key below lo has
  // bin() >= 2^kBinBits, and so has every key above hi if the window is at
  // most 2^23 keys wide (keys of scores lie in [2^23 - 1, 2^32 - 2^23], so
  // hi - key wraps to at least 2^24 - 1) or no key lies above hi (a first
  // pass): a pass needs no window test, only bin() clamped to 2^kBinBits,
  // a spare bin.
  __device__ static KeyWindow tiled(std::uint32_t lo_key, std::uint32_t hi_key) {
    KeyWindow w(lo_key, hi_key);
    const std::uint64_t width = std::uint64_t{1} << (w.shift + kBinBits);
    const std::uint64_t end = static_cast<std::uint64_t>(hi_key) + 1;
    w.lo = end >= width ? static_cast<std::uint32_t>(end - width) : 0u;
    return w;
  }
  __device__ bool holds(std::uint32_t key) const { return lo <= key && key <= hi; }
  __device__ std::uint32_t bin(std::uint32_t key) const { return (hi - key) >> shift; }
  __device__ std::uint32_t bin_top(std::uint32_t b) const { return hi - (b << shift); }
  // The lowest key of bin b inside the window (the bottom bin may be cut by lo).
  __device__ std::uint32_t bin_bottom(std::uint32_t b) const {
    const std::int64_t edge = static_cast<std::int64_t>(hi) - (static_cast<std::int64_t>(b + 1) << shift) + 1;
    return static_cast<std::uint32_t>(max(edge, static_cast<std::int64_t>(lo)));
  }
};

// The bin of a KeyWindow histogram that holds a wanted rank, as the block
// finds it (the sampled top-k's threshold, the resident top-k's passes).
struct BinPick {
  std::uint32_t bin;    // 0 = the window's top bin
  std::uint32_t above;  // counted keys in the window's bins above it
  std::uint32_t in;     // counted keys in it
};

// The bin of a complete, visible histogram (bin 0 at the top) that holds
// its rank-th largest counted key, and the count of all keys in `total`.
// Each of the block's Threads threads owns kOwned consecutive bins: it sums
// them, a block scan (Scan: cub::BlockScan of uint32 over the block) gives
// each thread the keys above its bins, the one owning the rank walks its
// bins, and every thread re-zeroes its own bins, so the histogram is zero
// for the next pass. `broadcast` carries the pick; ends with a barrier.
// The pick is undefined when total < rank.
template <class Scan, int kOwned>
__device__ BinPick pick_owned_bin(std::uint32_t* histogram, typename Scan::TempStorage& scan, BinPick& broadcast,
                                  std::uint32_t rank, std::uint32_t& total) {
  std::uint32_t* const mine = histogram + threadIdx.x * kOwned;
  std::uint32_t sum = 0;
#pragma unroll
  for (int b = 0; b < kOwned; ++b) sum += mine[b];
  std::uint32_t before = 0;  // counted keys in lower-numbered threads' bins
  Scan(scan).ExclusiveSum(sum, before, total);
  if (before < rank && rank <= before + sum) {  // exactly one thread
    for (int b = 0; b < kOwned; ++b) {
      const std::uint32_t count = mine[b];
      if (rank <= before + count) {
        broadcast = {threadIdx.x * kOwned + b, before, count};
        break;
      }
      before += count;
    }
  }
#pragma unroll
  for (int b = 0; b < kOwned; ++b) mine[b] = 0;  // each thread's own bins, read above
  __syncthreads();
  return broadcast;
}

// pick_owned_bin with the bins owned by warps in stripes: warp w owns bins
// [w * 32 * kRows, (w + 1) * 32 * kRows), lane l the bins w * 32 * kRows +
// 32 * j + l (j < kRows), so every read and re-zeroing of the histogram is
// one wavefront a warp (a thread's kOwned consecutive bins take two
// 16-byte loads and stores at a 32-byte stride: 8 wavefronts each, and the
// block scan 8 more). The resident top-k's passes use it (16K -4 %); the
// sampled top-k's threshold keeps pick_owned_bin, where this one measured
// 2-3 % slower (docs/perf-log.md, T52, T54). A row's sums come from a
// warp reduction, the warps' sums meet in warp_sums (one barrier), and
// every warp finds the owning warp from them; that warp finds the row (its
// sums, in registers) and the lane (a shuffle scan of the row), and
// broadcasts the pick. The histogram is complete and visible at entry;
// each lane re-zeroes the bins it read, so it is zero for the next pass.
// Ends with a barrier; every thread gets the pick (undefined when the
// histogram holds fewer than rank keys). warp_sums: kWarps entries, not
// read by anyone else until the barrier that ends this call.
template <int kWarps, int kRows>
__device__ BinPick pick_striped_bin(std::uint32_t* histogram, std::uint32_t* warp_sums, BinPick& broadcast,
                                    std::uint32_t rank) {
  static_assert(kWarps <= kWarpSize, "one lane per warp's sum");
  const unsigned lane = lane_id();
  const unsigned warp = threadIdx.x / kWarpSize;
  std::uint32_t* const mine = histogram + warp * (kWarpSize * kRows) + lane;
  std::uint32_t count[kRows], row_sum[kRows];
  std::uint32_t warp_total = 0;
#pragma unroll
  for (int j = 0; j < kRows; ++j) count[j] = mine[j * kWarpSize];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    mine[j * kWarpSize] = 0;
    row_sum[j] = __reduce_add_sync(kFullWarp, count[j]);
    warp_total += row_sum[j];
  }
  if (lane == 0) warp_sums[warp] = warp_total;
  __syncthreads();
  // The owning warp: the first whose inclusive prefix of warp sums reaches rank.
  const std::uint32_t sum = lane < static_cast<unsigned>(kWarps) ? warp_sums[lane] : 0u;
  // Lane kWarps - 1 holds the total (>= rank), so the first lane reaching
  // rank is below kWarps.
  const std::uint32_t inclusive = warp_inclusive_sum<kWarps>(sum);
  const unsigned owner = __ffs(__ballot_sync(kFullWarp, inclusive >= rank)) - 1;
  if (warp == owner) {
    std::uint32_t before = __shfl_sync(kFullWarp, inclusive - sum, owner);  // keys in the warps before
    std::uint32_t in_row = 0;  // this lane's count in the rank's row
    unsigned row = 0;
    bool found = false;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {  // warp-uniform: the row sums are the same in every lane
      if (!found) {
        if (before + row_sum[j] >= rank) {
          found = true;
          row = j;
          in_row = count[j];
        } else {
          before += row_sum[j];
        }
      }
    }
    const std::uint32_t lanes_inclusive = warp_inclusive_sum(in_row);
    const unsigned pick_lane = __ffs(__ballot_sync(kFullWarp, before + lanes_inclusive >= rank)) - 1;
    if (lane == pick_lane) {
      broadcast = {warp * (kWarpSize * kRows) + row * kWarpSize + lane,
                   before + lanes_inclusive - in_row, in_row};
    }
  }
  __syncthreads();
  return broadcast;
}

// The index of the highest set bit of x != 0.
template <RadixKey Key>
__device__ __forceinline__ int highest_bit(Key x) {
  if constexpr (kKeyBits<Key> == 64) {
    return 63 - __clzll(static_cast<long long>(x));
  } else {
    return 31 - __clz(static_cast<int>(x));
  }
}

// The k-th largest key (1 <= k <= set size) of the set that
// `for_each_key(fn)` visits: every thread of the block calls it, and it makes
// every thread call fn(key, present) the same number of times (converged
// warps); the set is the keys with present == true. Every thread gets the result.
// Invariant after each pass: `prefix` holds the fixed digits of the k-th
// largest key, and it is the `rank`-th largest among keys sharing them.
// With bounds lo <= every present key <= hi (block-uniform), the digits lo
// and hi share are fixed from the start and the sweep begins at the first
// digit where they differ (none when lo == hi).
// Begins by writing sh.histogram, so the caller must not read `sh` after its
// own last barrier; ends with a barrier, after which the visited set may be
// overwritten.
// kStopAtWholeBin: stop as soon as the chosen bin is taken whole (usually a
// digit or two early: RadixResult::whole_bin); sh.least is then ~0.
template <bool kStopAtWholeBin = false, RadixKey Key, class ForEachKey>
__device__ RadixResult<Key> block_radix_select(const ForEachKey& for_each_key, std::uint32_t k, RadixShared<Key>& sh,
                                               std::type_identity_t<Key> lo = 0,
                                               std::type_identity_t<Key> hi = std::numeric_limits<Key>::max()) {
  constexpr int kBits = kKeyBits<Key>;
  const Key diff = lo ^ hi;
  if (diff == 0) return {hi, k};  // every key equals hi
  const int start = highest_bit(diff) / kRadixBits * kRadixBits;
  Key fixed = start + kRadixBits >= kBits ? Key{0} : ~((Key{1} << (start + kRadixBits)) - Key{1});
  Key prefix = hi & fixed;
  std::uint32_t rank = k;
  // Written before the first pass's barrier, which publishes it.
  if (kStopAtWholeBin && threadIdx.x == 0) sh.least = std::numeric_limits<Key>::max();
  for (int shift = start; shift >= 0; shift -= kRadixBits) {
    for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) sh.histogram[b] = 0;
    __syncthreads();
    for_each_key([&](Key key, bool present) {
      // A plain atomic (+1 compiles to ATOMS.POPC.INC): faster than merging
      // a warp's same-bin lanes with __match_any_sync first, on every
      // distribution measured (docs/perf-log.md, T15, T18, T76).
      if (present && (key & fixed) == prefix) {
        atomicAdd(&sh.histogram[static_cast<std::uint32_t>(key >> shift) & kDigitMask], 1u);
      }
    });
    __syncthreads();
    if (threadIdx.x < kWarpSize) pick_bin(sh, shift, prefix, rank);
    __syncthreads();
    prefix = sh.prefix;
    rank = sh.rank;
    if (kStopAtWholeBin && sh.whole != 0 && shift > 0) return {prefix, rank, true};  // the same for every thread
    fixed |= Key{kDigitMask} << shift;
  }
  return {prefix, rank};
}

}  // namespace dsa::selection::device
