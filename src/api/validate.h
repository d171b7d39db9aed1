// Validation with the run-time choices the operators pass along.
#pragma once

#include "dsa_topk/dsa_topk.h"

namespace dsa {

// Whether (and on which stream) the CUDA backend reads its per-row metadata
// back (ks/ke; context_lens and the block table; merge indices) to check every
// row's range; kCpu always checks.
struct RangeCheck {
  bool enabled = true;
  CUstream_st* stream = nullptr;
};

Status validate(const IndexerTopkParams& p, Backend backend, const RangeCheck& ranges);
Status validate(const IndexerScoresParams& p, Backend backend, const RangeCheck& ranges);
Status validate(const TopkParams& p, Backend backend, const RangeCheck& ranges);
Status validate(const PagedIndexerTopkParams& p, Backend backend, const RangeCheck& ranges);
// The rule that a row's non-empty indices are distinct is checked on kCpu
// only: on kCuda a row with duplicates gets an unspecified (in-bounds) result.
Status validate(const MergeTopkParams& p, Backend backend, const RangeCheck& ranges);

}  // namespace dsa
