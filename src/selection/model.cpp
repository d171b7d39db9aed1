// CPU model of the GPU selection algorithm: the steps and failure classes of
// model.h, one function each. Every step touches data the way the kernels do:
// strided loads, compare-and-append filtering, 256-bin digit histograms walked
// from the top, and sweeps that re-read the row. Nothing here sorts.
#include "selection/model.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>
#include <stdexcept>

#include "common/keys.h"

namespace dsa::selection {
namespace {

constexpr int kKeyBits = 32;
constexpr int kRadixBits = 8;
constexpr int kRadixBins = 1 << kRadixBits;
constexpr std::uint32_t kDigitMask = kRadixBins - 1;
constexpr std::uint32_t kMaxKey = std::numeric_limits<std::uint32_t>::max();

// A score that passed the filter: its key and its position in the row
// (absolute index - base). Positions fit in int32 because indices do.
struct Candidate {
  std::uint32_t key;
  std::int32_t pos;
};

// Closed interval of keys a full-row repair sweep is restricted to.
struct KeyRange {
  std::uint32_t lo;
  std::uint32_t hi;
  bool contains(std::uint32_t key) const { return lo <= key && key <= hi; }
};

// Item sets are visitors: `items(fn)` calls fn(key, pos) once per member, in a
// fixed order, and yields the same members on every call (each call is one
// sweep over memory on the GPU).
auto row_items(std::span<const float> row, KeyRange range) {
  return [row, range](auto&& fn) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::uint32_t key = score_key(row[i]);
      if (range.contains(key)) fn(key, static_cast<std::int32_t>(i));
    }
  };
}

auto candidate_items(std::span<const Candidate> candidates) {
  return [candidates](auto&& fn) {
    for (const Candidate& c : candidates) fn(c.key, c.pos);
  };
}

// The keys of an item set, as a key visitor for radix_select_set.
template <class Items>
auto keys_of(const Items& items) {
  return [&items](auto&& fn) { items([&](std::uint32_t key, std::int32_t) { fn(key); }); };
}

// The key ~pos orders positions so that the largest key is the smallest index.
std::uint32_t index_order_key(std::int32_t pos) { return ~static_cast<std::uint32_t>(pos); }

// The k-th largest key (1 <= k <= size) of the set `for_each_key` visits.
// One sweep per 8-bit digit, most significant first. Invariant after each
// pass: `prefix` holds the digits of the k-th largest key fixed so far, and
// it is the `rank`-th largest among the keys that share those digits.
template <class ForEachKey>
RadixResult radix_select_set(const ForEachKey& for_each_key, std::int64_t k) {
  std::uint32_t prefix = 0;
  std::uint32_t fixed_mask = 0;
  std::int64_t rank = k;
  for (int shift = kKeyBits - kRadixBits; shift >= 0; shift -= kRadixBits) {
    std::array<std::int64_t, kRadixBins> histogram{};
    for_each_key([&](std::uint32_t key) {
      if ((key & fixed_mask) == prefix) ++histogram[(key >> shift) & kDigitMask];
    });
    // Walk down from the top bin; rank <= (keys matching prefix) guarantees
    // the walk stops at a bin >= 0.
    int bin = kRadixBins - 1;
    for (; histogram[bin] < rank; --bin) rank -= histogram[bin];
    prefix |= static_cast<std::uint32_t>(bin) << shift;
    fixed_mask |= kDigitMask << shift;
  }
  // All 32 bits are fixed: `rank` keys equal to prefix complete the top k.
  return {prefix, rank};
}

// Step 1. The sample of rank j = ceil(e + guard * sqrt(e)) + 1, where
// e = S*K/len is the expected number of samples among the row's top K and
// sqrt(e) about its standard deviation, so with high probability at least K
// scores are >= the returned key. j > S means no sample is low enough: the
// smallest key, which every score passes.
std::uint32_t sample_threshold(std::span<const float> row, const ModelConfig& config) {
  if (config.force_threshold) return config.forced_threshold_key;
  const auto len = static_cast<std::int64_t>(row.size());
  const std::int64_t s = std::min<std::int64_t>(config.sample_size, len);
  std::vector<std::uint32_t> samples(static_cast<std::size_t>(s));
  // Midpoints of S equal strides; with S == len this is every position.
  for (std::int64_t i = 0; i < s; ++i) samples[i] = score_key(row[(2 * i + 1) * len / (2 * s)]);
  const double expected = static_cast<double>(s) * config.k / static_cast<double>(len);
  const double j = threshold_rank(expected, config.guard);
  if (j > static_cast<double>(s)) return 0;
  return radix_select(samples, static_cast<std::int64_t>(j)).kth_key;
}

// Step 2's buffers after the filter pass.
struct FilterResult {
  std::vector<std::vector<Candidate>> segment_buffers;  // [segments], each <= segment_capacity
  std::vector<Candidate> spill;                          // <= spill_capacity, any segment
  std::vector<bool> overflowed;                          // [segments]: dropped a candidate
  std::int64_t count = 0;     // scores with key >= tau, stored or not
  std::int64_t dropped = 0;   // of those, how many found no room
  std::int64_t capacity = 0;  // segments * segment_capacity + spill_capacity
};

std::int64_t segment_count(std::int64_t len, const ModelConfig& config) {
  return (len + config.segment_len - 1) / config.segment_len;
}

// Step 2. Segments run one after another here; on the GPU they run at once
// and race for the spill area, which this order is one outcome of.
FilterResult filter(std::span<const float> row, std::uint32_t tau, const ModelConfig& config) {
  const auto len = static_cast<std::int64_t>(row.size());
  const std::int64_t segments = segment_count(len, config);
  FilterResult f;
  f.segment_buffers.resize(static_cast<std::size_t>(segments));
  f.overflowed.assign(static_cast<std::size_t>(segments), false);
  f.capacity = segments * config.segment_capacity + config.spill_capacity;
  for (std::int64_t seg = 0; seg < segments; ++seg) {
    std::vector<Candidate>& buffer = f.segment_buffers[seg];
    const std::int64_t end = std::min(len, (seg + 1) * config.segment_len);
    for (std::int64_t i = seg * config.segment_len; i < end; ++i) {
      const std::uint32_t key = score_key(row[i]);
      if (key < tau) continue;
      ++f.count;
      const Candidate c{key, static_cast<std::int32_t>(i)};
      if (static_cast<std::int64_t>(buffer.size()) < config.segment_capacity) {
        buffer.push_back(c);
      } else if (static_cast<std::int64_t>(f.spill.size()) < config.spill_capacity) {
        f.spill.push_back(c);
      } else {
        ++f.dropped;
        f.overflowed[seg] = true;
      }
    }
  }
  return f;
}

// The stored candidates in reading order: segment buffers, then the spill.
std::vector<Candidate> gather(const FilterResult& f) {
  std::vector<Candidate> out;
  for (const auto& buffer : f.segment_buffers) out.insert(out.end(), buffer.begin(), buffer.end());
  out.insert(out.end(), f.spill.begin(), f.spill.end());
  return out;
}

std::int32_t absolute_index(std::int64_t base, std::int32_t pos) {
  return static_cast<std::int32_t>(base + pos);
}

// Step 5. Appends the top of `items` that `kth` describes: every item with
// key > kth_key and take_equal of those with key == kth_key.
template <class Items>
void emit(const Items& items, const RadixResult& kth, TieBreak ties, std::int64_t base,
          std::vector<std::int32_t>* out) {
  items([&](std::uint32_t key, std::int32_t pos) {
    if (key > kth.kth_key) out->push_back(absolute_index(base, pos));
  });
  if (ties == TieBreak::kAny) {
    std::int64_t left = kth.take_equal;
    items([&](std::uint32_t key, std::int32_t pos) {
      if (key == kth.kth_key && left > 0) {
        out->push_back(absolute_index(base, pos));
        --left;
      }
    });
    return;
  }
  // Smallest indices: the take_equal largest ~pos among the tied items. The
  // ~pos are distinct, so exactly take_equal tied items reach the cut.
  const auto tied_order_keys = [&](auto&& fn) {
    items([&](std::uint32_t key, std::int32_t pos) {
      if (key == kth.kth_key) fn(index_order_key(pos));
    });
  };
  const std::uint32_t cut = radix_select_set(tied_order_keys, kth.take_equal).kth_key;
  items([&](std::uint32_t key, std::int32_t pos) {
    if (key == kth.kth_key && index_order_key(pos) >= cut) {
      out->push_back(absolute_index(base, pos));
    }
  });
}

// Steps 4 and 5 over any item set holding the answer: emits its top k and
// returns the k-th largest key.
template <class Items>
std::uint32_t select_and_emit(const Items& items, std::int64_t k, TieBreak ties, std::int64_t base,
                              std::vector<std::int32_t>* out) {
  const RadixResult kth = radix_select_set(keys_of(items), k);
  emit(items, kth, ties, base, out);
  return kth.kth_key;
}

// Total overflow: the candidates are incomplete and there is no room to
// complete them, so select straight from the row. With count >= K the K-th
// largest key is >= tau and the sweeps only count keys >= tau; count < K is
// possible only when the total capacity is below K, and then the answer
// reaches below tau and the sweeps take the whole row.
std::uint32_t repair_total_overflow(std::span<const float> row, std::uint32_t tau,
                                    std::int64_t count, const ModelConfig& config,
                                    std::int64_t base, std::vector<std::int32_t>* out) {
  const KeyRange range{count >= config.k ? tau : 0u, kMaxKey};
  return select_and_emit(row_items(row, range), config.k, config.ties, base, out);
}

// Segment overflow: the dropped candidates all belong to flagged segments.
// Their stored entries (in their buffers or the spill) are discarded and each
// flagged segment is re-filtered with the same tau into a repair buffer, which
// holds at most `count` entries. Returns the complete candidate set: every
// score with key >= tau exactly once.
std::vector<Candidate> repair_segments(std::span<const float> row, std::uint32_t tau,
                                       const ModelConfig& config, const FilterResult& f) {
  const auto segment_of = [&](std::int32_t pos) { return pos / config.segment_len; };
  std::vector<Candidate> out;
  for (std::size_t seg = 0; seg < f.segment_buffers.size(); ++seg) {
    const std::vector<Candidate>& buffer = f.segment_buffers[seg];
    if (!f.overflowed[seg]) out.insert(out.end(), buffer.begin(), buffer.end());
  }
  for (const Candidate& c : f.spill) {
    if (!f.overflowed[segment_of(c.pos)]) out.push_back(c);
  }
  const auto len = static_cast<std::int64_t>(row.size());
  for (std::size_t seg = 0; seg < f.overflowed.size(); ++seg) {
    if (!f.overflowed[seg]) continue;
    const auto first = static_cast<std::int64_t>(seg) * config.segment_len;
    const std::int64_t end = std::min(len, first + config.segment_len);
    for (std::int64_t i = first; i < end; ++i) {
      const std::uint32_t key = score_key(row[i]);
      if (key >= tau) out.push_back({key, static_cast<std::int32_t>(i)});
    }
  }
  assert(static_cast<std::int64_t>(out.size()) == f.count);
  return out;
}

// Underflow: fewer than K scores reach tau (tau > 0, since len > K). All of
// them are in the answer; the other K - count are the top of the keys < tau.
std::uint32_t repair_underflow(std::span<const float> row, std::uint32_t tau,
                               std::span<const Candidate> candidates, const ModelConfig& config,
                               std::int64_t base, std::vector<std::int32_t>* out) {
  assert(tau > 0);
  for (const Candidate& c : candidates) out->push_back(absolute_index(base, c.pos));
  const std::int64_t missing = config.k - static_cast<std::int64_t>(candidates.size());
  return select_and_emit(row_items(row, KeyRange{0u, tau - 1}), missing, config.ties, base, out);
}

void check_arguments(std::span<const float> row, std::int64_t base, const ModelConfig& config,
                     const std::vector<std::int32_t>* out) {
  if (out == nullptr) throw std::invalid_argument("out_indices: must not be null");
  if (config.k < 1 || config.sample_size < 1 || config.segment_len < 1 ||
      config.segment_capacity < 0 || config.spill_capacity < 0) {
    throw std::invalid_argument(
        "config: need k, sample_size, segment_len >= 1 and capacities >= 0");
  }
  if (base < 0 || base + static_cast<std::int64_t>(row.size()) >
                      std::numeric_limits<std::int32_t>::max()) {
    throw std::invalid_argument("base: need 0 <= base and base + len <= INT32_MAX");
  }
}

}  // namespace

const char* to_string(ModelPath path) {
  switch (path) {
    case ModelPath::kDirect: return "direct";
    case ModelPath::kCertified: return "certified";
    case ModelPath::kUnderflow: return "underflow";
    case ModelPath::kSegmentOverflow: return "segment_overflow";
    case ModelPath::kTotalOverflow: return "total_overflow";
  }
  return "unknown";
}

RadixResult radix_select(std::span<const std::uint32_t> keys, std::int64_t k) {
  if (k < 1 || k > static_cast<std::int64_t>(keys.size())) {
    throw std::invalid_argument("radix_select: need 1 <= k <= keys.size()");
  }
  return radix_select_set(
      [keys](auto&& fn) {
        for (const std::uint32_t key : keys) fn(key);
      },
      k);
}

ModelRowTrace model_select_row(std::span<const float> row, std::int64_t base, const ModelConfig& config,
                               std::vector<std::int32_t>* out_indices) {
  check_arguments(row, base, config, out_indices);
  out_indices->clear();
  ModelRowTrace trace;
  const auto len = static_cast<std::int64_t>(row.size());
  if (len <= config.k) {
    for (std::int64_t i = 0; i < len; ++i) {
      out_indices->push_back(absolute_index(base, static_cast<std::int32_t>(i)));
    }
    return trace;
  }

  const std::uint32_t tau = sample_threshold(row, config);
  const FilterResult f = filter(row, tau, config);
  trace.threshold_key = tau;
  trace.count = f.count;
  trace.dropped = f.dropped;
  trace.overflowed_segments =
      static_cast<int>(std::count(f.overflowed.begin(), f.overflowed.end(), true));

  if (f.count > f.capacity) {
    trace.path = ModelPath::kTotalOverflow;
    trace.kth_key = repair_total_overflow(row, tau, f.count, config, base, out_indices);
    return trace;
  }
  const bool segment_overflow = f.dropped > 0;
  // From here on `candidates` holds every score with key >= tau exactly once.
  const std::vector<Candidate> candidates =
      segment_overflow ? repair_segments(row, tau, config, f) : gather(f);
  const bool underflow = f.count < config.k;
  if (underflow) {
    trace.kth_key = repair_underflow(row, tau, candidates, config, base, out_indices);
  } else {
    // The certificate (or the completed candidate set): count >= K keys >= tau
    // are all present, so the top K of the row is the top K of the candidates.
    trace.kth_key =
        select_and_emit(candidate_items(candidates), config.k, config.ties, base, out_indices);
  }
  trace.path = segment_overflow ? ModelPath::kSegmentOverflow
               : underflow      ? ModelPath::kUnderflow
                                : ModelPath::kCertified;
  trace.underflow_after_repair = segment_overflow && underflow;
  return trace;
}

}  // namespace dsa::selection
