// The paged cache's row lengths (dsa_topk.h, PagedIndexerInputs), once for
// the CPU reference, validation and the CUDA prepare kernel.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace dsa {

// Row (b, j)'s length before any clamping to the table: per token, or the
// request's context minus the tokens after j; never negative.
DSA_HD std::int64_t paged_row_length(const std::int32_t* context_lens, bool lens_per_token, std::int64_t b,
                                     int next_n, int j) {
  const std::int64_t len = lens_per_token ? std::int64_t{context_lens[b * next_n + j]}
                                          : std::int64_t{context_lens[b]} - next_n + j + 1;
  return len > 0 ? len : 0;
}

}  // namespace dsa
