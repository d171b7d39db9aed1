// The one top-k checker (contract sections 1-2). Every comparison between
// scores goes through dsa::score_key, so NaN ranks as -inf and -0 == +0
// exactly as the operators rank them.
//
// Rows are checked one at a time, in row order, on the calling thread: a
// RowScoresFn may compute a row into a buffer it reuses, so each span is used
// only until the next call.
#include "tools/checker.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <functional>
#include <optional>

#include "common/keys.h"
#include "reference/cpu_reference.h"

namespace dsa::tools {
namespace {

constexpr std::int32_t kPad = -1;
constexpr std::uint32_t kNegInfBits = 0xFF800000u;

// Enough digits (9) that the printed text names exactly one float.
std::string format_score(float score) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(score));
  return buf;
}

std::string format_bits(float value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X",
                static_cast<unsigned>(std::bit_cast<std::uint32_t>(value)));
  return buf;
}

// One row's inputs and result, with the index base already resolved.
struct Row {
  std::span<const float> scores;          // [len], scores[local] for local in [0, len)
  std::span<const std::int32_t> indices;  // [K]
  const float* values = nullptr;          // [K] or null
  std::int64_t base = 0;                  // output index = local + base
  std::int64_t count = 0;                 // min(K, len): slots that must be valid
  SelectOptions options;

  std::int64_t len() const { return static_cast<std::int64_t>(scores.size()); }
  std::int64_t local(std::int64_t slot) const { return indices[slot] - base; }
  std::uint32_t key_at_slot(std::int64_t slot) const { return score_key(scores[local(slot)]); }
};

// Per-row scratch, reused across rows so a large check does not allocate per row.
struct Scratch {
  std::vector<std::int64_t> slot_of;    // [len] slot holding local index, or -1
  std::vector<std::uint32_t> keys;      // [len] reference keys (reordered by nth_element)
  std::vector<std::uint32_t> selected;  // [count] keys of the selected scores
};

// Slots [0, count) hold unique in-range indices; slots [count, K) hold -1.
// Fills scratch.slot_of, which the later checks rely on.
std::optional<std::string> check_slots(const Row& row, Scratch& scratch) {
  scratch.slot_of.assign(static_cast<std::size_t>(row.len()), -1);
  const std::int64_t K = static_cast<std::int64_t>(row.indices.size());
  for (std::int64_t slot = 0; slot < row.count; ++slot) {
    const std::int64_t index = row.indices[slot];
    const std::int64_t local = row.local(slot);
    if (local < 0 || local >= row.len()) {
      return "slot " + std::to_string(slot) + ": index " + std::to_string(index) + " outside [" +
             std::to_string(row.base) + ", " + std::to_string(row.base + row.len()) + ")" +
             (index == kPad ? " (expected " + std::to_string(row.count) + " valid slots)" : "");
    }
    std::int64_t& owner = scratch.slot_of[static_cast<std::size_t>(local)];
    if (owner >= 0) {
      return "slot " + std::to_string(slot) + ": index " + std::to_string(index) +
             " duplicates slot " + std::to_string(owner);
    }
    owner = slot;
  }
  for (std::int64_t slot = row.count; slot < K; ++slot) {
    if (row.indices[slot] != kPad) {
      return "slot " + std::to_string(slot) + ": index " + std::to_string(row.indices[slot]) +
             " where padding -1 is expected (only " + std::to_string(row.count) + " valid slots)";
    }
  }
  return std::nullopt;
}

// The oracle: the key of the count-th highest score of the row, after which
// scratch.keys[0, count) holds the reference top-count keys in some order.
std::uint32_t reference_kth_key(const Row& row, Scratch& scratch) {
  scratch.keys.resize(static_cast<std::size_t>(row.len()));
  std::transform(row.scores.begin(), row.scores.end(), scratch.keys.begin(), score_key);
  const auto kth = scratch.keys.begin() + (row.count - 1);
  std::nth_element(scratch.keys.begin(), kth, scratch.keys.end(), std::greater<>());
  return *kth;
}

// Multiset of selected keys == multiset of the reference top-count keys. This
// leaves free only the choice among scores equal to the K-th score.
std::optional<std::string> check_membership(const Row& row, Scratch& scratch,
                                            std::uint32_t kth_key) {
  for (std::int64_t slot = 0; slot < row.count; ++slot) {
    if (row.key_at_slot(slot) < kth_key) {
      return "slot " + std::to_string(slot) + ": selected score " +
             format_score(row.scores[row.local(slot)]) + " (index " +
             std::to_string(row.indices[slot]) + ") is below the K-th score " +
             format_score(key_score(kth_key));
    }
  }
  auto& reference = scratch.keys;
  auto& selected = scratch.selected;
  selected.resize(static_cast<std::size_t>(row.count));
  for (std::int64_t slot = 0; slot < row.count; ++slot) selected[slot] = row.key_at_slot(slot);
  std::sort(reference.begin(), reference.begin() + row.count, std::greater<>());
  std::sort(selected.begin(), selected.end(), std::greater<>());
  const auto [sel, ref] = std::mismatch(selected.begin(), selected.end(), reference.begin());
  if (sel == selected.end()) return std::nullopt;
  // Everything selected is >= the K-th score, so a higher score was left out.
  return "multiset differs at rank " + std::to_string(sel - selected.begin()) +
         ": selected score " + format_score(key_score(*sel)) + ", reference score " +
         format_score(key_score(*ref)) + " (a score above the K-th score " +
         format_score(key_score(kth_key)) + " was not selected)";
}

// kSmallestIndex: the selection is exactly every score above the K-th plus the
// smallest indices among scores equal to it. Run after check_membership, so
// the number of K-th-score ties to take is count minus the number above.
std::optional<std::string> check_smallest_index(const Row& row, const Scratch& scratch,
                                                std::uint32_t kth_key) {
  std::int64_t ties_left = row.count;
  for (const float score : row.scores) ties_left -= score_key(score) > kth_key;
  for (std::int64_t local = 0; local < row.len(); ++local) {
    const std::uint32_t key = score_key(row.scores[local]);
    bool expected = key > kth_key;
    if (key == kth_key && ties_left > 0) {
      expected = true;
      --ties_left;
    }
    const bool selected = scratch.slot_of[static_cast<std::size_t>(local)] >= 0;
    if (expected != selected) {
      return "index " + std::to_string(local + row.base) + " (score " +
             format_score(row.scores[local]) + ") is " + (selected ? "" : "not ") +
             "selected, but the smallest-index tie break at the K-th score " +
             format_score(key_score(kth_key)) + (selected ? " excludes it" : " includes it");
    }
  }
  return std::nullopt;
}

// values[slot] is bit-equal to the score of indices[slot]; -inf in padding.
std::optional<std::string> check_values(const Row& row) {
  const std::int64_t K = static_cast<std::int64_t>(row.indices.size());
  for (std::int64_t slot = 0; slot < K; ++slot) {
    const float value = row.values[slot];
    const float expected =
        slot < row.count ? row.scores[row.local(slot)] : std::bit_cast<float>(kNegInfBits);
    if (std::bit_cast<std::uint32_t>(value) != std::bit_cast<std::uint32_t>(expected)) {
      const std::string of =
          slot < row.count ? "score of index " + std::to_string(row.indices[slot]) : "padding";
      return "slot " + std::to_string(slot) + ": value " + format_score(value) + " (" +
             format_bits(value) + ") but the " + of + " is " + format_score(expected) + " (" +
             format_bits(expected) + ")";
    }
  }
  return std::nullopt;
}

// Sorted: keys non-increasing; in kSmallestIndex mode also ascending indices
// within equal keys (so the whole order is deterministic).
std::optional<std::string> check_sorted(const Row& row) {
  const bool by_index = row.options.ties == TieBreak::kSmallestIndex;
  for (std::int64_t slot = 1; slot < row.count; ++slot) {
    const std::uint32_t prev = row.key_at_slot(slot - 1);
    const std::uint32_t cur = row.key_at_slot(slot);
    const bool index_order_broken =
        by_index && cur == prev && row.indices[slot] < row.indices[slot - 1];
    if (cur > prev || index_order_broken) {
      return "slot " + std::to_string(slot) + ": score " +
             format_score(row.scores[row.local(slot)]) + " (index " +
             std::to_string(row.indices[slot]) + ") after score " +
             format_score(row.scores[row.local(slot - 1)]) + " (index " +
             std::to_string(row.indices[slot - 1]) + ") breaks the sorted order";
    }
  }
  return std::nullopt;
}

// All checks of one row, stopping at the first failure: later checks assume
// the earlier ones passed (valid unique indices, the right multiset).
std::optional<std::string> check_row(const Row& row, Scratch& scratch) {
  if (auto failure = check_slots(row, scratch)) return failure;
  if (row.count > 0) {
    const std::uint32_t kth_key = reference_kth_key(row, scratch);
    if (auto failure = check_membership(row, scratch, kth_key)) return failure;
    if (row.options.ties == TieBreak::kSmallestIndex) {
      if (auto failure = check_smallest_index(row, scratch, kth_key)) return failure;
    }
  }
  if (row.values != nullptr) {
    if (auto failure = check_values(row)) return failure;
  }
  if (row.options.sorted) return check_sorted(row);
  return std::nullopt;
}

// Builds row t's view, or says why its inputs cannot be checked. The API
// validates ranges, so this only keeps the checker from reading out of bounds
// when handed inconsistent inputs.
std::optional<std::string> make_row(const CheckInput& input, std::int64_t t, Row* row) {
  const std::int64_t K = input.options.k;
  const std::int64_t ks = input.ks[t];
  const std::int64_t len = static_cast<std::int64_t>(input.ke[t]) - ks;
  if (len < 0)
    return "invalid range [" + std::to_string(ks) + ", " + std::to_string(input.ke[t]) + ")";
  row->scores = input.row_scores(t);
  if (static_cast<std::int64_t>(row->scores.size()) != len) {
    return "row_scores gave " + std::to_string(row->scores.size()) + " scores for a range of " +
           std::to_string(len);
  }
  row->indices = std::span<const std::int32_t>(input.indices + t * K, static_cast<std::size_t>(K));
  row->values = input.values != nullptr ? input.values + t * K : nullptr;
  row->base = input.options.index_base == IndexBase::kAbsolute ? ks : 0;
  row->count = std::min(K, len);
  row->options = input.options;
  return std::nullopt;
}

}  // namespace

std::string CheckReport::summary() const {
  std::string text = "checked " + std::to_string(rows_checked) +
                     " rows: " + std::to_string(rows_failed) + " failed";
  for (const RowFailure& failure : failures) {
    text += "\nrow " + std::to_string(failure.row) + ": " + failure.what;
  }
  return text;
}

CheckReport check_topk(const CheckInput& input, std::int64_t max_failures) {
  CheckReport report;
  Scratch scratch;
  for (std::int64_t t = 0; t < input.T; ++t) {
    Row row;
    std::optional<std::string> failure = make_row(input, t, &row);
    if (!failure) failure = check_row(row, scratch);
    ++report.rows_checked;
    if (!failure) continue;
    ++report.rows_failed;
    if (static_cast<std::int64_t>(report.failures.size()) < max_failures) {
      report.failures.push_back({t, std::move(*failure)});
    }
  }
  return report;
}

RowScoresFn dense_row_scores(const float* scores, std::int64_t stride, const std::int32_t* ks,
                             const std::int32_t* ke) {
  return [=](std::int64_t t) {
    return std::span<const float>(scores + t * stride + ks[t],
                                  static_cast<std::size_t>(ke[t] - ks[t]));
  };
}

CheckReport check_problem(const ScoresProblem& prob, const SelectOptions& options, const TopkOutput& out,
                          std::int64_t max_failures) {
  CheckInput in;
  in.T = prob.T;
  in.ks = prob.ks.data();
  in.ke = prob.ke.data();
  in.row_scores = dense_row_scores(prob.scores.data(), prob.stride, prob.ks.data(), prob.ke.data());
  in.indices = out.indices.data();
  in.values = out.values.empty() ? nullptr : out.values.data();
  in.options = options;
  return check_topk(in, max_failures);
}

CheckReport check_problem(const IndexerProblem& prob, const SelectOptions& options, const TopkOutput& out,
                          int num_threads, std::int64_t max_failures) {
  const IndexerTopkParams p = prob.params(nullptr, nullptr, options);
  const reference::DecodedKeys keys(p, num_threads);
  std::vector<float> row;  // check_topk uses each row's span before asking for the next
  CheckInput in;
  in.T = prob.T;
  in.ks = prob.ks.data();
  in.ke = prob.ke.data();
  in.row_scores = [&](std::int64_t t) {
    reference::score_row(p, keys, t, &row);
    return std::span<const float>(row);
  };
  in.indices = out.indices.data();
  in.values = out.values.empty() ? nullptr : out.values.data();
  in.options = options;
  return check_topk(in, max_failures);
}

}  // namespace dsa::tools
