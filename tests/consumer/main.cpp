// Links the installed dsa_topk and runs one small CPU top-k: exits 0 when the
// result is exactly the expected one.
#include <dsa_topk/dsa_topk.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <vector>

int main() {
  constexpr int kN = 1000;
  constexpr int kK = 512;
  // Row 0 ranks all N columns, row 1 only [5, 105): fewer than K, so -1 padding.
  const std::vector<std::int32_t> ks = {0, 5};
  const std::vector<std::int32_t> ke = {kN, 105};
  // Distinct scores, a permutation of 0..N-1 (7919 is prime to N).
  std::vector<float> scores(2 * kN);
  for (int t = 0; t < 2; ++t)
    for (int s = 0; s < kN; ++s) scores[t * kN + s] = static_cast<float>((s * 7919) % kN);

  std::vector<std::int32_t> indices(2 * kK, -2);
  dsa::TopkParams p;
  p.scores = scores.data();
  p.ks = ks.data();
  p.ke = ke.data();
  p.num_rows = 2;
  p.num_cols = kN;
  p.score_stride = kN;
  p.indices = indices.data();
  p.options.k = kK;
  p.options.sorted = true;

  std::size_t bytes = 0;
  dsa::Status st = dsa::topk_workspace_size(p, dsa::Backend::kCpu, &bytes);
  std::vector<std::byte> workspace(bytes);
  dsa::ExecutionContext ctx{dsa::Backend::kCpu, nullptr, 1, workspace.data(), bytes};
  if (st.ok()) st = dsa::topk(p, ctx);
  if (!st.ok()) {
    std::cerr << "dsa::topk: " << st.to_string() << "\n";
    return 1;
  }

  for (int t = 0; t < 2; ++t) {
    // Expected: the row's columns by descending score, then -1 padding.
    std::vector<std::int32_t> expected(ke[t] - ks[t]);
    std::iota(expected.begin(), expected.end(), ks[t]);
    std::sort(expected.begin(), expected.end(), [&](std::int32_t a, std::int32_t b) {
      return scores[t * kN + a] > scores[t * kN + b];
    });
    expected.resize(kK, -1);
    if (!std::equal(expected.begin(), expected.end(), indices.begin() + t * kK)) {
      std::cerr << "dsa::topk: row " << t << " differs from the expected top-" << kK << "\n";
      return 1;
    }
  }
  std::cout << "dsa_topk consumer: ok\n";
  return 0;
}
