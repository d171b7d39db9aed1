// The resident top-k kernel for short rows (docs/design.md, "GPU top-k",
// "Resident rows"): one CTA holds its whole row in shared memory as order
// keys and selects by histogram passes over it, with no candidate buffer
// and no repair path (every answer is exact by construction):
//   1. load the row once (16-byte loads, all in flight) as keys, and count
//      each key in a histogram of its top kFirstBinBits bits (10 at 8K, 11
//      at 16K): the first pass;
//   2. histogram passes over the keys of a window, the first pass's bin of
//      the K-th largest key (2^kBinBits = 2^11 linear bins that tile it
//      exactly, so no key is tested: keys outside count in a spare bin), each
//      narrowing the window to the bin of the K-th largest key, until the
//      top K take the chosen bin whole (usually the second pass: then the
//      top K are the keys at or above its bottom) or the bin is one key
//      wide (at most 3 passes over the 32-bit key: the K-th key, the keys
//      above it and its ties are known exactly);
//   3. one emission pass: the keys at or above the bin's bottom, or the
//      keys above the K-th and then the ties it needs (any, or the smallest
//      positions for smallest-index ties) in a second pass.
// Short rows are where the sampled kernel (topk_kernel.cuh) loses: its
// samples from global memory are a third of the row at 8K, each one
// reading its own sector.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/keys.h"
#include "selection/device/candidates.cuh"
#include "selection/device/emit.cuh"
#include "selection/device/radix.cuh"
#include "selection/topk/config.h"
#include "selection/topk/topk_kernel.cuh"

namespace dsa::selection::topk {

// kWritesOutput: a row whose top K are the keys at or above a bin's bottom
// (no tie cut: most model-like rows) has its winners' indices (position +
// offset) staged in shared memory and copied to the row's K output slots,
// with no order keys and no write-out; wrote_output() then says so. For
// unsorted, any-tie, index-only calls without a trace (the operator's usual
// call). Rows with a tie cut still go through out[]: their direct tie
// stores measured 7 % slower at 4096 x 8K dead-relu (docs/perf-log.md,
// T30, T31).
template <int K, class R, bool kWritesOutput>
class ResidentRow {
 public:
  using Cfg = ResidentConfig<K, R>;
  using Storage = typename Cfg::SharedStorage;

  // indices/offset: the row's K output slots and the index of position 0
  // (kWritesOutput only).
  __device__ ResidentRow(Storage& sh, const KernelParams& p, const float* row, std::int32_t len,
                         std::int32_t* indices = nullptr, std::int32_t offset = 0)
      : sh_(sh), p_(p), row_(row), len_(len), indices_(indices), offset_(offset) {
    // Slot s of sh.keys holds position s - misalign_, so the row's 16-byte
    // aligned body lands on 16-byte aligned slots.
    misalign_ = static_cast<std::int32_t>((reinterpret_cast<std::uintptr_t>(row) / sizeof(float)) % kVec);
  }

  // kWritesOutput: whether select() wrote the output itself (the same for every thread).
  __device__ bool wrote_output() const { return wrote_output_; }

  // Rows with K < len <= R::kMaxLen: leaves the K winners in sh.out (or,
  // when wrote_output(), their indices in the output).
  __device__ TopkRowTrace select() {
    TopkRowTrace trace{TopkPath::kResident, 0, 0, 0, 0, 0};
    // Window [lo, hi] of keys; `above`: keys above the window; `rank`: the
    // K-th largest key is the rank-th largest inside the window. The first
    // window is every key (its bins are the keys' top kFirstBinBits bits),
    // and its histogram is taken while the row loads, so the first pass
    // over the resident row is the second window's. Every window is tiled
    // (KeyWindow::tiled): a pass tests no key, keys outside the window
    // count in a spare bin. Each later window is one bin of the pass before
    // (at most 2^22 keys wide), [bottom, top] with bins 2^shift keys wide.
    load();
    std::uint32_t above = 0, rank = K;
    const FirstWindow first = first_window();
    typename Cfg::BinPick pick = pick_from_histogram<Cfg::kFirstBinsPerThread>(rank);
    trace.threshold_passes = 1;
    std::uint32_t bottom = first.bin_bottom(pick.bin), top = first.bin_top(pick.bin);
    int shift = first.shift;
    // Narrow until the top K take the chosen bin whole (the rank-th largest
    // of the window is the bin's least key: the top K are exactly the keys at
    // or above its bottom, no tie is cut and the keys inside it need no more
    // passes; on model-like rows this usually ends the second pass) or until
    // the bin is one key wide.
    const auto whole = [&] { return pick.above + pick.in == rank; };
    const auto narrow = [&] {
      above += pick.above;
      rank -= pick.above;
      const KeyWindow w = KeyWindow::tiled(bottom, top);
      pick = pick_bin(w, rank);
      bottom = w.bin_bottom(pick.bin);
      top = w.bin_top(pick.bin);
      shift = w.shift;
      ++trace.threshold_passes;
    };
    // The second pass outside the loop of later ones (model-like rows
    // usually stop after it): 16K model-like 0.9 % faster than one loop
    // for both, 8K tie-cut rows 1.5 % slower (docs/perf-log.md, T67).
    if (!whole() && shift != 0) narrow();
    while (!whole() && shift != 0) narrow();
    if (whole()) {
      // The bin holds a key of the row (>= kNegInfKey), so its bottom is
      // above the first window's bottom bin [0, 2^(32 - kFirstBinBits)):
      // > kPadKey.
      append_where<false, kWritesOutput>(AtLeast(bottom), &sh_.emitted);
      if constexpr (kWritesOutput) {
        // The K indices staged in out[]'s storage, copied out coalesced.
        __syncthreads();
        const std::int32_t* const staged = staged_indices();
        for (int slot = threadIdx.x; slot < K; slot += R::kThreads) indices_[slot] = staged[slot];
        wrote_output_ = true;  // the same for every thread
        return trace;          // no trace, nothing reads out[]
      }
      __syncthreads();
      if (p_.trace != nullptr) trace_whole_bin(trace);  // the same for every thread
      return trace;
    }
    // The bin is one key, the K-th, and only some of its ties belong to the
    // top K.
    const std::uint32_t kth = top;
    trace.threshold_key = trace.kth_key = kth;
    trace.count_gt = above + pick.above;
    trace.count_eq = pick.in;
    emit_cut(kth, trace.count_gt);
    return trace;
  }

 private:
  static constexpr int kVec = device::kGroupSize;  // keys per 16-byte slot group

  using KeyWindow = device::KeyWindow<Cfg::kBinBits>;
  using FirstWindow = device::KeyWindow<Cfg::kFirstBinBits>;
  // Every score's key (>= kNegInfKey) lies above the first pass's bottom
  // bin [0, 2^(32 - kFirstBinBits)), so every picked bin's bottom is above
  // kPadKey (AtLeast needs it), and the first pass's bins are at most 2^23
  // keys wide (KeyWindow::tiled's bound for the windows after it).
  static_assert((kNegInfKey >> (32 - Cfg::kFirstBinBits)) != 0, "the first pass's bins are too wide");

  // The first pass's window: every key, its bins the keys' top
  // kFirstBinBits bits (bin(key) = ~key >> (32 - kFirstBinBits), folded at
  // compile time).
  __device__ static FirstWindow first_window() { return FirstWindow::tiled(0, 0xFFFFFFFFu); }

  // Step 1: the row's keys into sh.keys and the first pass's histogram:
  // each key counts in its bin of first_window() (the key's top bits,
  // ~key >> (32 - kFirstBinBits) once folded), which is one shift and a mask
  // beside its atomic, where a window from the row's least and greatest
  // key takes two min/max and a block reduction, and a pass over the row
  // after it (docs/perf-log.md, T43). The padding is not counted. One round
  // of 16-byte loads covers kMaxLen; the histogram is zeroed (bins tid +
  // kThreads * b: one wavefront a store, where kBinsPerThread consecutive
  // bins a thread take 4 wavefronts at 16K and 8 at 8K; 8K -0.2 to -0.8 %,
  // 16K no change, T66) and a barrier passed while they are in flight. Ends
  // with a barrier.
  __device__ void load() {
    static_assert(R::kThreads * R::kLoadGroups * kVec == R::kMaxLen, "one round of loads covers a row");
    const std::int32_t head_len = min(len_, (kVec - misalign_) % kVec);  // positions before the aligned body
    const std::int32_t vectors = (len_ - head_len) / kVec;  // <= kMaxLen / kVec
    // The body's first slot: misalign_ + head_len, which is 0 or kVec.
    const std::int32_t body_slot = misalign_ + head_len;
    const std::int32_t tail_slot = body_slot + kVec * vectors;  // slots past the body: the tail
    slots_ = tail_slot + kVec;
    const float4* body = reinterpret_cast<const float4*>(row_ + head_len);
    uint4* const dst = reinterpret_cast<uint4*>(sh_.row.keys + body_slot);
    const auto tid = static_cast<std::int32_t>(threadIdx.x);
    // Only the groups below `vectors` are loaded, and only they are read
    // below (no zeroing of the others: 2 * kLoadGroups instructions).
    float4 v[R::kLoadGroups];
#pragma unroll
    for (int u = 0; u < R::kLoadGroups; ++u) {
      const std::int32_t i = u * R::kThreads + tid;
      if (i < vectors) v[u] = __ldg(body + i);
    }
    // The first slot group when the row is misaligned (padding, then the
    // head) and the tail's group (the last < kVec positions, then padding).
    const bool first = tid < kVec;
    const std::int32_t edge_slot = first ? tid : tail_slot + (tid - kVec);
    const std::int32_t edge_pos = edge_slot - misalign_;
    const bool edge = tid < 2 * kVec && (!first || misalign_ != 0);
    const bool edge_present = edge && 0 <= edge_pos && edge_pos < len_;
    const float edge_score = edge_present ? __ldg(row_ + edge_pos) : 0.0f;
    std::uint32_t* const histogram = sh_.work.histogram;
#pragma unroll
    for (int b = 0; b < Cfg::kBinsPerThread; ++b) histogram[b * R::kThreads + threadIdx.x] = 0;
    if (threadIdx.x == 0) {
      sh_.emitted = 0;
      sh_.tie_slots = 0;
    }
    __syncthreads();  // the zeroed histogram visible
    // The key's bin of first_window() (shift 32 - kFirstBinBits), ~key >> shift =
    // (kBins - 1) - (key >> shift), taken as an offset below the last bin:
    // ptxas makes the address a shift, a mask and a subtract, where ~key >>
    // shift as an index took a not, a shift, a mask and an add.
    std::uint32_t* const last_bin = histogram + (Cfg::kFirstBins - 1);
    const auto count = [last_bin](std::uint32_t key) {
      atomicAdd(last_bin - (key >> (32 - Cfg::kFirstBinBits)), 1u);
    };
#pragma unroll
    for (int u = 0; u < R::kLoadGroups; ++u) {
      const std::int32_t i = u * R::kThreads + tid;
      if (i < vectors) {
        const uint4 k{score_key_fast(v[u].x), score_key_fast(v[u].y), score_key_fast(v[u].z),
                      score_key_fast(v[u].w)};
        dst[i] = k;
        count(k.x);
        count(k.y);
        count(k.z);
        count(k.w);
      }
    }
    if (edge) {
      const std::uint32_t key = edge_present ? score_key(edge_score) : kPadKey;
      sh_.row.keys[edge_slot] = key;
      if (edge_present) count(key);
    }
    __syncthreads();  // keys and the first pass's histogram visible
  }

  // Calls fn(slot group index, uint4 keys) over the resident row; every
  // thread calls it the same number of times (fn may use warp collectives),
  // past the row's slot groups with kPadKey groups: visited_keys() keys in
  // all, the row's len_ and the rest kPadKey.
  template <class Fn>
  __device__ void for_each_group(Fn&& fn) const {
    const std::int32_t groups = slots_ / kVec;
    const uint4* keys = reinterpret_cast<const uint4*>(sh_.row.keys);
    for (std::int32_t base = 0; base < groups; base += R::kThreads) {
      const std::int32_t g = base + static_cast<std::int32_t>(threadIdx.x);
      fn(g, g < groups ? keys[g] : uint4{kPadKey, kPadKey, kPadKey, kPadKey});
    }
  }

  __device__ std::uint32_t visited_keys() const {
    const std::int32_t groups = slots_ / kVec;
    return static_cast<std::uint32_t>((groups + R::kThreads - 1) / R::kThreads * R::kThreads * kVec);
  }

  // The trace of a row whose top K are the keys at or above a bin's bottom
  // (sh.work.out holds them, a barrier ago): the K-th key is the least of
  // them (BlockKeyRange, which nothing else uses), and
  // its ties in the row are all among them (counted in sh.emitted, which
  // the emission no longer needs). Test hooks only. Ends with a barrier.
  __device__ void trace_whole_bin(TopkRowTrace& trace) {
    constexpr int kSlots = K / R::kThreads;
    std::uint32_t keys[kSlots];
    std::uint32_t least = 0xFFFFFFFFu;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      keys[i] = static_cast<std::uint32_t>(sh_.work.out[i * R::kThreads + threadIdx.x] >> 32);
      least = min(least, keys[i]);
    }
    if (threadIdx.x == 0) sh_.emitted = 0;
    sh_.key_range.publish(least, least);
    __syncthreads();
    std::uint32_t kth = 0, greatest = 0;
    sh_.key_range.gather(kth, greatest);
    std::uint32_t equal = 0;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) equal += keys[i] == kth ? 1u : 0u;
    equal = __reduce_add_sync(device::kFullWarp, equal);
    if (device::lane_id() == 0) atomicAdd(&sh_.emitted, equal);
    __syncthreads();
    trace.threshold_key = trace.kth_key = kth;
    trace.count_eq = sh_.emitted;
    trace.count_gt = K - trace.count_eq;
  }

  // Step 2, one pass after the first (which load() takes): histograms the
  // keys of w, one bin of the pass before, and returns the bin that holds
  // its rank-th largest (rank <= the window's keys); the pick re-zeroes
  // the histogram for the next pass. Every key takes a plain atomic (an
  // add of 1 compiles to ATOMS.POPC.INC). Merging a warp's same-bin lanes
  // first (shuffle, vote, __match_any_sync) measured slower on every
  // distribution, tie-heavy rows included (docs/perf-log.md, T15).
  // w is tiled and at most 2^22 keys wide (one bin of the first pass):
  // no key is tested, those outside the window count in the spare bin
  // kBins; the padding (kPadKey) too, unless the window reaches down to it,
  // and then thread 0 takes its count back out: ~5 instructions a key,
  // where a test and a branch per key take ~11 (docs/perf-log.md, T26).
  // Needs the histogram zero and the keys visible at entry; ends with
  // a barrier, every thread gets the pick.
  __device__ typename Cfg::BinPick pick_bin(const KeyWindow& w, std::uint32_t rank) {
    std::uint32_t* const histogram = sh_.work.histogram;
    constexpr std::uint32_t kSpare = Cfg::kBins;
    for_each_group([&](std::int32_t, const uint4& k) {
      const std::uint32_t key[kVec] = {k.x, k.y, k.z, k.w};
#pragma unroll
      for (int j = 0; j < kVec; ++j) atomicAdd(&histogram[min(w.bin(key[j]), kSpare)], 1u);
    });
    const std::uint32_t pad_bin = min(w.bin(kPadKey), kSpare);
    if (threadIdx.x == 0 && pad_bin != kSpare) atomicSub(&histogram[pad_bin], visited_keys() - len_);
    __syncthreads();
    return pick_from_histogram<Cfg::kBinsPerThread>(rank);
  }

  // The bin of the histogram's first kRows * kThreads bins (complete and
  // visible) that holds the rank-th largest counted key (rank <= the count
  // of all keys), by warps owning stripes of kRows rows of 32 bins
  // (device::pick_striped_bin): every lane reads and re-zeroes its own
  // bins, so the histogram is zero for the next pass. Ends with a barrier;
  // every thread gets the pick.
  template <int kRows>
  __device__ typename Cfg::BinPick pick_from_histogram(std::uint32_t rank) {
    return device::pick_striped_bin<R::kThreads / device::kWarpSize, kRows>(
        sh_.work.histogram, sh_.warp_sums, sh_.pick, rank);
  }

  // Selectors of the emission (append_where): shift_in(mask, k) returns
  // mask << 4 with the four keys of k tested into the low bits, k.x at bit
  // 3 and k.w at bit 0; kPadKey must fail the test.
  //
  // AtLeast: key >= bottom (bottom > kPadKey), as the carry of key +
  // (2^32 - bottom), shifted in by an add-with-carry of the mask to itself:
  // two instructions a key, where a compare, a select and the merge into
  // the mask took about three.
  struct AtLeast {
    std::uint32_t minus_bottom;  // 2^32 - bottom
    __device__ explicit AtLeast(std::uint32_t bottom) : minus_bottom(0u - bottom) {}
    __device__ std::uint32_t shift_in(std::uint32_t mask, const uint4& k) const {
      asm("{\n\t.reg .u32 sum;\n\t"
          "add.cc.u32 sum, %1, %5;\n\taddc.u32 %0, %0, %0;\n\t"
          "add.cc.u32 sum, %2, %5;\n\taddc.u32 %0, %0, %0;\n\t"
          "add.cc.u32 sum, %3, %5;\n\taddc.u32 %0, %0, %0;\n\t"
          "add.cc.u32 sum, %4, %5;\n\taddc.u32 %0, %0, %0;\n\t}"
          : "+r"(mask)
          : "r"(k.x), "r"(k.y), "r"(k.z), "r"(k.w), "r"(minus_bottom));
      return mask;
    }
  };
  // EqualTo: key == key_ (a key of the row, so never kPadKey).
  struct EqualTo {
    std::uint32_t key;
    __device__ std::uint32_t shift_in(std::uint32_t mask, const uint4& k) const {
      return mask << kVec | (k.x == key ? 8u : 0u) | (k.y == key ? 4u : 0u) | (k.z == key ? 2u : 0u) |
             (k.w == key ? 1u : 0u);
    }
  };

  // Step 3, emission: appends the keys of the resident row that `select`
  // takes (AtLeast, EqualTo) to sh.work.out (kToOutput: their indices to
  // staged_indices()): the i-th appended (i from *counter, zero before the
  // first append and a barrier ago) at slot first + i; with kCapped, those
  // with i >= cap are not stored. A thread tests the keys of up to 8 slot
  // groups into one bit mask (past the row's groups, kPadKey groups); its
  // warp scans the lanes' counts and takes one atomic
  // (device::warp_count_scan, warp_claim); each lane then stores only its
  // taken keys, walking the mask's set bits (a taken key a loop turn, where
  // rounds of two groups stored every key under a predicate: 8K -6 to -8 %,
  // 16K -5 to -14 %, docs/perf-log.md, T44, T45). Visits the keys
  // for_each_group does. No barrier.
  template <bool kCapped, bool kToOutput = false, class Select>
  __device__ void append_where(const Select& select, std::uint32_t* counter, std::uint32_t first = 0,
                               std::uint32_t cap = K) {
    constexpr int kGroups = 32 / kVec;  // slot groups a thread tests per mask
    const std::int32_t groups = slots_ / kVec;
    const uint4* const row_keys = reinterpret_cast<const uint4*>(sh_.row.keys);
    const auto tid = static_cast<std::int32_t>(threadIdx.x);
    for (std::int32_t base = 0; base < groups; base += kGroups * R::kThreads) {
      // Bit 31 - (kVec * u + j): key j of slot group base + u * kThreads + tid.
      std::uint32_t mask = 0;
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        const std::int32_t g = base + u * R::kThreads + tid;
        mask = select.shift_in(mask, g < groups ? row_keys[g] : uint4{kPadKey, kPadKey, kPadKey, kPadKey});
      }
      const auto count = static_cast<std::uint32_t>(__popc(mask));
      std::uint32_t total = 0;
      const std::uint32_t inclusive = device::warp_count_scan(count, total);
      if (total == 0) continue;  // the same for the whole warp
      std::uint32_t slot = device::warp_claim(counter, count, inclusive);
      const std::int32_t slot0 = kVec * (base + tid);
      while (mask != 0) {
        const auto e = static_cast<std::uint32_t>(__clz(mask));  // the first taken key: kVec * u + j
        mask ^= 0x80000000u >> e;
        const std::int32_t key_slot = slot0 + static_cast<std::int32_t>((e / kVec) * (kVec * R::kThreads) + e % kVec);
        if (!kCapped || slot < cap) {
          if constexpr (kToOutput) {
            staged_indices()[first + slot] = key_slot - misalign_ + offset_;
          } else {
            sh_.work.out[first + slot] = device::order_key(sh_.row.keys[key_slot], key_slot - misalign_);
          }
        }
        ++slot;
      }
    }
  }

  // kWritesOutput: the whole-bin emission's indices (pos + offset) by slot, in
  // out[]'s storage (a lane's taken keys go to consecutive slots, so stores
  // straight to global memory scatter a warp's store over its whole claim:
  // 8K model-like measured 30 % slower that way, docs/perf-log.md, T44).
  __device__ std::int32_t* staged_indices() const { return reinterpret_cast<std::int32_t*>(sh_.work.out); }

  // Emission when the K-th key kth has more ties than the K - count_gt
  // that belong to the top K: the keys above kth, then the
  // ties (slots from count_gt): any of them (kAny: the slot race), or the
  // smallest positions (a scan of tie counts in slot order, one per round).
  // Ends with a barrier.
  __device__ void emit_cut(std::uint32_t kth, std::uint32_t count_gt) {
    const std::uint32_t take = K - count_gt;
    append_where<false>(AtLeast(kth + 1), &sh_.emitted);  // kth <= score_key(+inf): no wrap
    if (!p_.smallest_index_ties) {
      append_where<true>(EqualTo{kth}, &sh_.tie_slots, count_gt, take);
      __syncthreads();
      return;
    }
    std::uint32_t ties_before = 0;  // ties in earlier rounds
    for_each_group([&](std::int32_t g, const uint4& k) {
      const std::uint32_t key[kVec] = {k.x, k.y, k.z, k.w};
      std::uint32_t tied = 0;
#pragma unroll
      for (int j = 0; j < kVec; ++j) tied |= static_cast<std::uint32_t>(key[j] == kth) << j;
      const std::int32_t pos0 = kVec * g - misalign_;
      // Rank of each tie among all ties in position order (slot order).
      std::uint32_t rank = 0, round_ties = 0;
      typename Cfg::Scan(sh_.scan).ExclusiveSum(static_cast<std::uint32_t>(__popc(tied)), rank, round_ties);
      rank += ties_before;
      ties_before += round_ties;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if ((tied >> j) & 1u) {
          if (rank < take) sh_.work.out[count_gt + rank] = device::order_key(kth, pos0 + j);
          ++rank;
        }
      }
      __syncthreads();  // the scan's storage is reused next round
    });
    __syncthreads();
  }

  Storage& sh_;
  const KernelParams& p_;
  const float* row_;  // scores of positions 0 .. len-1
  std::int32_t len_;
  std::int32_t misalign_;
  std::int32_t slots_ = 0;  // slots [0, slots_) hold the row (padding: kPadKey); a multiple of kVec
  std::int32_t* indices_;   // kWritesOutput: the row's K output slots
  std::int32_t offset_;     // kWritesOutput: index of row position 0
  bool wrote_output_ = false;
};

template <int K, class R>
__global__ void __launch_bounds__(R::kThreads, R::kMinCtasPerSm) topk_resident_kernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  wait_for_producer(p);  // nothing is read before the scores' producer has ended
  using Cfg = ResidentConfig<K, R>;
  auto& sh = *reinterpret_cast<typename Cfg::SharedStorage*>(smem);
  const std::int64_t t = blockIdx.x;
  if (p.row_mask != nullptr && p.row_mask[t] == 0) return;  // the same for every thread
  // The launcher picks this kernel only for num_cols <= kMaxLen, and the
  // range is clamped to [0, num_cols): the row fits shared memory even when
  // the caller turned the host's range check off.
  const RowRange range = row_range(p.ks, p.ke, nullptr, t, p.num_cols);
  const std::int32_t ks = range.begin;
  const std::int32_t len = range.end - range.begin;
  const float* row = p.scores + t * p.stride + ks;
  const std::int32_t offset = p.relative_indices ? 0 : ks;
  TopkRowTrace trace{TopkPath::kDirect, 0, 0, 0, 0, 0};
  if (len <= K) {
    device::emit_whole_row<K, R::kThreads>(sh.work.out, row, len);
    __syncthreads();
  } else if (!p.sorted && !p.smallest_index_ties && p.values == nullptr && p.trace == nullptr) {
    ResidentRow<K, R, true> resident(sh, p, row, len, p.indices + t * K, offset);
    resident.select();
    if (resident.wrote_output()) return;
  } else {
    trace = ResidentRow<K, R, false>(sh, p, row, len).select();
  }
  // Written before the write-out, so the trace's registers are free for the sort.
  if (p.trace != nullptr && threadIdx.x == 0) p.trace[t] = trace;
  if (!p.sorted && !p.smallest_index_ties && p.values == nullptr) {
    device::write_indices<K, R::kThreads>(sh.work.out, p.indices + t * K, offset);
    return;
  }
  device::write_row<K, R::kThreads, typename Cfg::BlockSort>(
      sh.work.out, sh.row.sort, p.indices + t * K, p.values != nullptr ? p.values + t * K : nullptr,
      offset, p.sorted, p.smallest_index_ties,
      // The score's own bits. The row's address is derived again from the
      // parameters (constant bank) rather than kept live through the sort,
      // which at K = 2048 and 64 registers would spill.
      [&p](std::int32_t pos, std::uint32_t) {
        const std::int64_t row_index = blockIdx.x;
        const std::int32_t first = row_range(p.ks, p.ke, nullptr, row_index, p.num_cols).begin;
        return __ldg(p.scores + row_index * p.stride + first + pos);
      });
}

}  // namespace dsa::selection::topk
