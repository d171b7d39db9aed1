// What the standalone top-k kernels report about a row (TopkHooks::trace):
// kernel-side types the launcher's hooks, the kernels and the tests share.
// No CUDA header.
#pragma once

#include <cstdint>

namespace dsa::selection::topk {

// Which path finished a row (docs/design.md, "GPU top-k").
enum class TopkPath : std::uint32_t {
  kDirect = 1,    // len <= K: every index, no selection
  kCertified,     // K <= count(key > tau) <= capacity: select among the candidates
  kThresholdTie,  // count(> tau) < K <= count(>= tau): the K-th key is tau; ties
                  //   from the tie buffer
  kTieRepair,     // as kThresholdTie, deterministic ties, tie buffer overflowed:
                  //   smallest tied indices selected from the row
  kUnderflow,     // count(>= tau) < K: all of them, the rest selected from keys < tau
  kOverflow,      // count(> tau) > capacity: selected from the row's keys > tau
  kResident,      // the resident kernel: the row in shared memory, histogram
                  //   passes to the K-th key (threshold_key = kth_key, count_gt
                  //   and count_eq around it, threshold_passes = passes)
  kClusterResident,  // the cluster-resident kernel: the row over a cluster's shared
                     //   memory, radix passes; threshold_key = kth_key = the K-th key,
                     //   or the bottom of a bin the top K take whole (count_gt = K,
                     //   count_eq = 0), threshold_passes = passes
};

// What one row did, written by the kernel when TopkHooks::trace is set.
struct TopkRowTrace {
  TopkPath path;
  std::uint32_t threshold_key;  // tau (0 for kDirect)
  std::uint32_t count_gt;       // keys > tau in the row
  std::uint32_t count_eq;       // keys == tau in the row; 0xFFFFFFFF: not counted (the
                                //   sampled kernel's one-compare filter, count_gt >= K)
  std::uint32_t kth_key;        // key of the K-th largest score (0 for kDirect)
  std::uint32_t threshold_passes;  // histogram passes over the samples (0: forced
                                   //   tau, kDirect, or every key passes)
};

}  // namespace dsa::selection::topk
