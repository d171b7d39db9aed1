// A row's key range as every kernel reads it: [ks[t], ke[t]) clamped to
// [0, num_keys), so unvalidated ranges (ExecutionContext::check_ranges =
// false) can never address memory outside the inputs and outputs; such a
// row gets an unspecified in-bounds result (dsa_topk.h). A row whose
// row_mask entry is 0 gets an empty range (the fused operator's repair
// rescores only the rows it flagged).
#pragma once

#include <cstdint>

namespace dsa {

struct RowRange {
  std::int32_t begin = 0, end = 0;
};

__device__ __forceinline__ RowRange row_range(const std::int32_t* __restrict__ ks, const std::int32_t* __restrict__ ke,
                                              const std::uint32_t* __restrict__ row_mask, std::int64_t t,
                                              std::int64_t num_keys) {
  const std::int32_t n = static_cast<std::int32_t>(num_keys);
  RowRange r;
  r.begin = min(max(__ldg(ks + t), 0), n);
  r.end = min(max(__ldg(ke + t), r.begin), n);
  if (row_mask != nullptr && __ldg(row_mask + t) == 0) r.end = r.begin;
  return r;
}

}  // namespace dsa
