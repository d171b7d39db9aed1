// The paged cache's row lengths and slot layout (dsa_topk.h,
// PagedIndexerInputs), once for the CPU reference, validation, the CUDA
// prepare kernel and the check_finite scan.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "dsa_topk/dsa_topk.h"

namespace dsa {

// Row (b, j)'s length before any clamping to the table: per token, or the
// request's context minus the tokens after j; never negative.
DSA_HD std::int64_t paged_row_length(const std::int32_t* context_lens, bool lens_per_token, std::int64_t b,
                                     int next_n, int j) {
  const std::int64_t len = lens_per_token ? std::int64_t{context_lens[b * next_n + j]}
                                          : std::int64_t{context_lens[b]} - next_n + j + 1;
  return len > 0 ? len : 0;
}

inline constexpr std::int64_t kPagedScaleBytes = sizeof(float);
inline constexpr std::int64_t kPagedSlotBytes = kHeadDim + kPagedScaleBytes;  // a slot's key and scale

// Byte offsets in kv_cache of a slot's D key bytes and of its fp32 scale: a
// block holds its block_size key rows, then its block_size scales.
DSA_HD std::int64_t paged_key_offset(int block_size, std::int64_t slot) {
  return slot / block_size * block_size * kPagedSlotBytes + slot % block_size * kHeadDim;
}
DSA_HD std::int64_t paged_scale_offset(int block_size, std::int64_t slot) {
  return slot / block_size * block_size * kPagedSlotBytes + std::int64_t{block_size} * kHeadDim +
         slot % block_size * kPagedScaleBytes;
}

}  // namespace dsa
