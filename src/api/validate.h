// Validation with the run-time choices the operators pass along.
#pragma once

#include "dsa_topk/dsa_topk.h"

namespace dsa {

// Whether (and on which stream) the CUDA backend reads ks/ke back to check
// every row's range; kCpu always checks.
struct RangeCheck {
  bool enabled = true;
  CUstream_st* stream = nullptr;
};

Status validate(const IndexerTopkParams& p, Backend backend, const RangeCheck& ranges);
Status validate(const IndexerScoresParams& p, Backend backend, const RangeCheck& ranges);
Status validate(const TopkParams& p, Backend backend, const RangeCheck& ranges);

}  // namespace dsa
