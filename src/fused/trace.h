// What the fused operator's kernels report about a row (FusedHooks::trace),
// and the select stage's certificate that decides it: kernel-side types the
// launcher's hooks, the kernels and the tests share. No CUDA header.
#pragma once

#include <cstdint>

namespace dsa::fused {

// How a row was finished (FusedHooks::trace).
enum class FusedPath : std::uint32_t {
  kCertified = 1,  // fused_certified() held: selected from the staged entries
  kRepaired,       // the certificate failed (underflow or overflow): repair path
  kUnfused,        // the unfused route (plan.h): scored, then the standalone top-k
};

struct FusedRowTrace {
  FusedPath path;
  std::uint32_t threshold_key;  // tau
  std::uint32_t count;          // scores >= tau in the row (exact)
  std::uint32_t samples;        // samples inside the row's range
  std::uint32_t unstaged;       // of them, ties with tau past the filter's budgets (exact)
};

// The select stage's certificate for a row of len keys whose filter staged
// `staged` entries (every score above tau, and the ties with tau within the
// lanes' budgets) and left `unstaged` ties out: the staged entries hold the
// row's top K when none was dropped (staged <= capacity) and either no tie
// was left out and there are K of them or every key, or (any-index ties
// only: smallest-index ties need every tie) there are K of them.
constexpr bool fused_certified(std::int64_t staged, std::int64_t unstaged, std::int64_t len, int k,
                               std::int64_t capacity, bool smallest_index_ties) {
  if (staged > capacity) return false;
  if (unstaged == 0) return staged >= k || staged == len;
  return !smallest_index_ties && staged >= k;
}

}  // namespace dsa::fused
