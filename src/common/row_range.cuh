// A row's key range as every kernel reads it: [ks[t], ke[t]) clamped to
// [0, num_keys), so unvalidated ranges (ExecutionContext::check_ranges =
// false) can never address memory outside the inputs and outputs; such a
// row gets an unspecified in-bounds result (dsa_topk.h). A row whose
// row_mask entry has bit 0 clear gets an empty range: the repairs rescore
// only the rows flagged 1 (the fused operator's, the decode bar
// selection's), and the bar selection's rows flagged 2 (scores already
// stored) go to the top-k alone, which skips only rows whose entry is 0.
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
  if (row_mask != nullptr && (__ldg(row_mask + t) & 1u) == 0) r.end = r.begin;
  return r;
}

}  // namespace dsa
