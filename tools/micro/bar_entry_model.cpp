// The decode bar selection's entry rate, modelled on the CPU
// (decode/bar_select.cuh; docs/perf-log.md D53): what fraction of a row's
// keys the scoring kernel keeps when P pieces of the row are scored tile by
// tile in step, each keeping the keys at or above its bar, and the bar is
// raised every `lag` tiles to the lower edge of the highest 12-bit bin with
// K kept keys at or above it: counted per piece ("own"), or over every
// piece's counts ("row", the route's exchange through the workspace).
// The scores are the CPU reference's for one generated row, so the model
// sees the same distributions as the tests. A second table counts the
// entries written to the row's area as the kernel stages them: each key to
// its stager lane's slots (warp and column as the scoring kernel's tile
// layout gives them), a warp's lanes sifted against the bar when one of
// them fills, and written when one still holds more than `write_above`
// (D59, D60); every staged entry at the bar written at the piece's end.
//
//   micro_bar_entry_model [N [DIST [K]]]   (N keys, default 131072; DIST a
//   generator name, default model-like; K default 2048)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/keys.h"
#include "reference/cpu_reference.h"
#include "tools/generators.h"

namespace {

constexpr int kBinBits = 12;  // decode/plan.h, kSelectBinBits
constexpr int kBins = 1 << kBinBits;
constexpr int kTileKeys = 64;  // scoring/tile.h: keys a tile

std::uint32_t bin_of(std::uint32_t key) { return key >> (32 - kBinBits); }

// The highest bin at or above `floor` with k counts in it and above, or floor.
std::uint32_t bar_bin(const std::vector<std::uint64_t>& bins, int k, std::uint32_t floor) {
  std::uint64_t sum = 0;
  for (int b = kBins - 1; b >= static_cast<int>(floor); --b) {
    sum += bins[b];
    if (sum >= static_cast<std::uint64_t>(k)) return static_cast<std::uint32_t>(b);
  }
  return floor;
}

// Keys kept of the row's `keys` by P pieces with bars from their own or the
// row's counts, raised every `lag` tiles.
std::int64_t kept_keys(const std::vector<std::uint32_t>& keys, int k, int pieces, bool row_counts, int lag) {
  const auto n = static_cast<std::int64_t>(keys.size());
  const std::int64_t piece = n / pieces;
  std::vector<std::vector<std::uint64_t>> own(pieces, std::vector<std::uint64_t>(kBins, 0));
  std::vector<std::uint64_t> row(kBins, 0);
  std::vector<std::uint32_t> bar(pieces, 0);
  std::int64_t kept = 0;
  for (std::int64_t t = 0; t * kTileKeys < piece; ++t) {
    for (int p = 0; p < pieces; ++p) {
      const std::int64_t end = std::min((t + 1) * kTileKeys, piece);
      for (std::int64_t i = p * piece + t * kTileKeys; i < p * piece + end; ++i) {
        if (bin_of(keys[i]) < bar[p]) continue;
        ++kept;
        ++own[p][bin_of(keys[i])];
        ++row[bin_of(keys[i])];
      }
    }
    if ((t + 1) % lag != 0) continue;
    for (int p = 0; p < pieces; ++p) bar[p] = bar_bin(row_counts ? row : own[p], k, bar[p]);
  }
  return kept;
}

// Keys kept and entries written by P pieces in step (the row's counts,
// bars raised every `lag` tiles), each piece staging its entries as
// BarFilterSink does: 8 math warps (two warpgroups taking alternate tiles,
// a warp 16 of a tile's 64 rows), 8 stager lanes a warp (rows j and j + 8
// of the warp's 16), `slots` entries a lane. write_above = 0: written at
// every fill with no sift (the route before D59).
struct Staged {
  std::int64_t kept = 0;
  std::int64_t written = 0;
};
Staged staged_keys(const std::vector<std::uint32_t>& keys, int k, int pieces, int lag, int slots, int write_above) {
  constexpr int kWarps = 8, kStagers = 8;
  const auto n = static_cast<std::int64_t>(keys.size());
  const std::int64_t piece = n / pieces;
  std::vector<std::uint64_t> row(kBins, 0);
  std::uint32_t bar = 0;  // one bar: every piece reads the row's counts
  // [piece][warp][stager]: the staged entries' bins
  std::vector<std::vector<std::vector<std::vector<std::uint32_t>>>> lanes(
      pieces, std::vector<std::vector<std::vector<std::uint32_t>>>(kWarps, std::vector<std::vector<std::uint32_t>>(kStagers)));
  Staged out;
  const auto sift = [&](std::vector<std::vector<std::uint32_t>>& warp) {
    for (auto& lane : warp) lane.erase(std::remove_if(lane.begin(), lane.end(), [&](std::uint32_t b) { return b < bar; }), lane.end());
  };
  const auto write = [&](std::vector<std::vector<std::uint32_t>>& warp) {
    for (auto& lane : warp) {
      out.written += static_cast<std::int64_t>(lane.size());
      lane.clear();
    }
  };
  for (std::int64_t t = 0; t * kTileKeys < piece; ++t) {
    for (int p = 0; p < pieces; ++p) {
      const std::int64_t begin = p * piece + t * kTileKeys, end = p * piece + std::min((t + 1) * kTileKeys, piece);
      for (std::int64_t i = begin; i < end; ++i) {
        const std::uint32_t b = bin_of(keys[i]);
        if (b < bar) continue;
        ++out.kept;
        ++row[b];
        const auto r = static_cast<int>(i - begin);
        lanes[p][4 * static_cast<int>(t % 2) + r / 16][r % 8].push_back(b);
      }
      for (int w = 4 * static_cast<int>(t % 2); w < 4 * static_cast<int>(t % 2) + 4; ++w) {
        auto& warp = lanes[p][w];
        const auto fullest = [&] {
          std::size_t most = 0;
          for (const auto& lane : warp) most = std::max(most, lane.size());
          return static_cast<int>(most);
        };
        if (fullest() <= slots - 2) continue;
        if (write_above > 0) sift(warp);
        if (write_above == 0 || fullest() > write_above) write(warp);
      }
    }
    if ((t + 1) % lag == 0) bar = bar_bin(row, k, bar);
  }
  for (auto& p : lanes) {
    for (auto& warp : p) {
      sift(warp);
      write(warp);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsa;
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 131072;
  tools::Distribution dist = tools::Distribution::kModelLike;
  if (argc > 2 && !tools::parse_distribution(argv[2], &dist)) {
    std::fprintf(stderr, "unknown distribution '%s'\n", argv[2]);
    return 2;
  }
  const int k = argc > 3 ? std::atoi(argv[3]) : 2048;
  if (n <= k || k <= 0) {
    std::fprintf(stderr, "N must exceed K > 0\n");
    return 2;
  }
  tools::ProblemSpec spec;
  spec.dist = dist;
  spec.layout = tools::Layout::kFull;
  spec.T = 1;
  spec.N = n;
  const tools::IndexerProblem prob = tools::make_indexer_problem(spec);
  std::vector<float> scores(static_cast<std::size_t>(n));
  IndexerScoresParams sp;
  static_cast<IndexerInputs&>(sp) = prob.params(nullptr, nullptr, SelectOptions{});
  sp.scores = scores.data();
  sp.score_stride = n;
  if (const Status st = reference::indexer_scores_cpu(sp, 0); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  std::vector<std::uint32_t> keys(scores.size());
  std::transform(scores.begin(), scores.end(), keys.begin(), [](float s) { return score_key(s); });
  std::vector<std::uint32_t> sorted = keys;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const std::uint32_t kth_bin = bin_of(sorted[k - 1]);
  const auto at_edge = std::count_if(keys.begin(), keys.end(), [&](std::uint32_t x) { return bin_of(x) >= kth_bin; });
  // The same inside a zoomed bin (decode/plan.h, kBarZoomBits = 11): the
  // keys at or above the K-th key's sub-bin edge, a floor for a crowded row.
  constexpr int kZoomShift = 32 - kBinBits - 11;
  const std::uint32_t kth_sub = sorted[k - 1] >> kZoomShift;
  const auto at_sub_edge =
      std::count_if(keys.begin(), keys.end(), [&](std::uint32_t x) { return (x >> kZoomShift) >= kth_sub; });
  std::printf("%s, N %lld, K %d: keys at or above the K-th key's bin edge %lld (%.2fx K), "
              "its sub-bin's edge %lld (%.2fx K)\n",
              std::string(tools::to_string(dist)).c_str(), static_cast<long long>(n), k,
              static_cast<long long>(at_edge), static_cast<double>(at_edge) / k, static_cast<long long>(at_sub_edge),
              static_cast<double>(at_sub_edge) / k);
  std::printf("%6s %6s %5s %9s %8s\n", "pieces", "counts", "lag", "kept", "% keys");
  for (int pieces : {1, 2, 4, 8, 33, 132}) {
    for (bool row_counts : {false, true}) {
      for (int lag : {4, 16, 64}) {
        const std::int64_t kept = kept_keys(keys, k, pieces, row_counts, lag);
        std::printf("%6d %6s %5d %9lld %8.2f\n", pieces, row_counts ? "row" : "own", lag, static_cast<long long>(kept),
                    100.0 * static_cast<double>(kept) / static_cast<double>(n));
      }
    }
  }
  std::printf("\nstaged as the kernel stages them (the row's counts; write above 0: no sift)\n");
  std::printf("%6s %5s %5s %6s %9s %8s %9s %8s\n", "pieces", "lag", "slots", "above", "kept", "% keys", "written",
              "% keys");
  for (int pieces : {1, 2, 4}) {
    for (int lag : {4, 16, 64}) {
      for (const auto& [slots, above] : {std::pair{64, 0}, {64, 32}, {64, 48}, {96, 48}, {128, 96}}) {
        const Staged s = staged_keys(keys, k, pieces, lag, slots, above);
        std::printf("%6d %5d %5d %6d %9lld %8.2f %9lld %8.2f\n", pieces, lag, slots, above,
                    static_cast<long long>(s.kept), 100.0 * static_cast<double>(s.kept) / static_cast<double>(n),
                    static_cast<long long>(s.written), 100.0 * static_cast<double>(s.written) / static_cast<double>(n));
      }
    }
  }
  return 0;
}
