// The paged indexer's host-side plan (decode.h): the launch rows per
// request and the scoring block's columns, the batches of requests through
// the scores buffer, every launch's grid and the workspace layout. A pure
// function of the shape and K (no device limit enters), with no CUDA
// header, so CPU tests check it; launch_indexer_topk_paged walks the plan.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/launch_plan.h"
#include "dsa_topk/dsa_topk.h"

namespace dsa::decode {

// Byte offsets of the workspace's pieces, laid end to end in this order,
// each 256-byte aligned; a piece the call does not use takes no bytes.
// Launch rows: B x rows_per_request; batch rows: a batch's launch rows.
struct PagedWorkspace {
  std::size_t ks = 0;       // [launch rows] int32: each launch row's range [0, len) (not ranges_from_lengths)
  std::size_t ke = 0;       // [launch rows] int32
  std::size_t w = 0;        // [launch rows, H] float: the weights, zero on padding rows (padded only)
  std::size_t scores = 0;   // [batch rows, score_stride] float: the bounded scores buffer
  std::size_t indices = 0;  // [batch rows, K] int32: the top-k's output (mapped only)
  std::size_t values = 0;   // [batch rows, K] float (mapped, with values asked for)
  // The fused selection (PagedPlan::fused_select). A row's state is its
  // histogram (kSelectBins counts, which the scoring kernel adds its score
  // keys' top bits into) and then its counters (SelectCounter), zeroed
  // before each batch's scoring.
  std::size_t select_state = 0;  // [batch rows, kSelectStateWords] uint32
  std::size_t candidates = 0;    // [batch rows, select_capacity] uint64: keys of the K-th key's bin
  // The streaming selection (PagedPlan::stream_select): a row's counters
  // (entries listed, keys scored; zeroed before each batch's scoring) and
  // its list of the pieces' top K entries.
  std::size_t stream_state = 0;  // [batch rows, kStreamStateWords] uint32
  std::size_t stream_list = 0;   // [batch rows, stream_list_capacity] uint64
  // The bar selection (PagedPlan::bar_select): a row's state (entries
  // claimed, the floor its pieces' last bars certify, its kept entries'
  // histogram; zeroed before each batch's scoring), its flag (RowFlag: how
  // the select stage took it, for tools) and its candidate area (a short
  // row's scores, as floats, over it).
  std::size_t bar_state = 0;       // [batch rows * kBarStateWords] uint32 (BarState)
  std::size_t bar_flags = 0;       // [batch rows] uint32
  std::size_t bar_candidates = 0;  // [batch rows, bar_capacity] uint64
  std::size_t total = 0;    // bytes in all
};

// The fused selection's histogram: the top kSelectBinBits bits of each score
// key (score_key, common/keys.h), counted by the scoring kernel.
inline constexpr int kSelectBinBits = 12;
inline constexpr int kSelectBins = 1 << kSelectBinBits;
// A row's counters: slots taken so far, candidates appended, CTAs done.
enum SelectCounter : int { kTakenCounter = 0, kCandidateCounter = 1, kDoneCounter = 2, kSelectCounters = 4 };
inline constexpr int kSelectStateWords = kSelectBins + kSelectCounters;
// The streaming selection (PagedPlan::stream_select): a row's counters in
// the workspace (entries in its list, keys scored), and the largest K its
// shared-memory buffers allow (decode/stream_select.cuh).
enum StreamCounter : int { kListCount = 0, kKeysDone = 1, kStreamStateWords = 2 };
inline constexpr int kStreamMaxK = 2048;
// The bar selection's state, rows words apart: entries claimed, floors,
// the histograms' highest bins with a count, their counts in all, the bins
// the rows zoomed into and the highest sub-bins there with a count (a word
// a row each), then the rows' histograms of kept entries (kSelectBins
// words a row), then their histograms inside the zoomed bin (kBarZoomBins
// words a row, at kBarZoomSub * rows); kBarStateWords words a row in all.
enum BarState : int {
  kBarCount = 0,
  kBarFloor = 1,
  kBarTop = 2,
  kBarTotal = 3,
  kBarZoom = 4,
  kBarZoomTop = 5,
  kBarBins = 6
};
// A row whose bar's bin alone holds K kept entries (scores crowded into a
// few bins: shifted rows, near-ties) is counted again inside that bin, by
// the key's next kBarZoomBits bits, so its bar can rise inside the bin.
inline constexpr int kBarZoomBits = 11;
inline constexpr int kBarZoomBins = 1 << kBarZoomBits;
inline constexpr int kBarZoomSub = kBarBins + kSelectBins;
inline constexpr int kBarStateWords = kBarZoomSub + kBarZoomBins;
// Keys a CTA of the select kernel filters at most (its part of a row: 16
// loads a thread, 512 threads), and the most CTAs a row gets: contexts of
// up to 1M keys select in the fused way.
inline constexpr std::int64_t kSelectPartKeys = 8192;
inline constexpr std::int64_t kSelectMaxParts = 128;
// Rows of at most this many parts select as one cluster a row (16 CTAs:
// past the portable cluster size, allowed per kernel).
inline constexpr std::int64_t kSelectClusterParts = 16;
// Where the fused selection is faster than the standalone top-k (A/B,
// docs/perf-log.md D12-D14, D46): contexts of at least kFusedSelectMinKeys
// keys and at most kFusedSelectMaxCtas select CTAs a batch (1 x 64K to
// 2 x 1M measured; 32 x 128K and 4 x 1M, 512 CTAs, were slower, and so was
// 1 x 16K, where the standalone top-k holds a row in one CTA; 32K contexts
// were mixed).
inline constexpr std::int64_t kFusedSelectMinKeys = 65536;
inline constexpr std::int64_t kFusedSelectMaxCtas = 256;
// The bar selection's rows of fewer keys store their scores for the
// standalone top-k instead of keeping entries (PagedPlan::bar_stored_below):
// a row that short keeps most of its keys before any bar rises, and under
// an engine's wide table such rows ran 1.05-1.37x the unfused route
// (docs/perf-log.md D66); at 64K keys the bar was already 0.98x of it.
inline constexpr std::int64_t kBarStoredBelowKeys = 65536;
// Where the bar selection is faster than the unfused pipeline (A/B on an
// H100, docs/perf-log.md D59, D60, D65, D72, D73): at least
// kBarSelectMinRows rows a batch and a table of at least kBarSelectMinKeys
// keys a request, so that a long row is one or two CTAs' pieces and its bar
// rises early (128 and 256 x 128K measured 0.95x and 0.93x; 32 x 128K was
// level). The table's width is not the rows' lengths: rows shorter than
// kBarStoredBelowKeys store their scores and the same top-k launch selects
// them, so a table wider than the batch's contexts costs the zero kernel
// and little else (256 x 8K 1.02x, 128 x 32K 1.00-1.01x under a 128K
// table). A row whose query is zero (every score equal) stores its scores
// too; the ties generator's batch runs 1.066x at 256 x 128K (D74), its
// other rows' eight distinct keys crowding the bar's bin.
inline constexpr std::int64_t kBarSelectMinKeys = 131072;
inline constexpr std::int64_t kBarSelectMinRows = 128;

// Requests a launch can give the same zero range starts (a constant device
// array of this many zeros, decode.cu) when the plan reads lengths as ranges.
inline constexpr std::int64_t kZeroStartRows = 4096;

struct PagedPlan {
  // A query block of the scoring kernel holds block_columns (query, head)
  // columns: H x (next_n rounded up to a power of two), 64 to 256 (so one
  // token of H = 64 is a 64-column block, not a quarter of a 256-column
  // one). A request's next_n rows are padded to rows_per_request launch
  // rows, a power of two (PagedKeys shifts by its log): whole blocks, a
  // block never spanning two requests.
  int block_columns = 0;
  std::int64_t rows_per_request = 0;
  int rows_per_request_shift = 0;  // log2(rows_per_request)
  int block_shift = 0;             // log2(block_size): PagedKeys and the map kernel
  std::int32_t max_row_length = 0;  // lengths clamp to it: max_context(), 0 when the cache has no blocks
  std::int64_t score_stride = 0;   // floats between the scores buffer's rows
  bool padded = false;             // launch rows differ from the output's rows
  bool mapped = false;             // the top-k writes the workspace, the map kernel the output
  // One token a request, unpadded, a cache with blocks: a row's range is
  // [0, context_lens[b]) as it stands (the kernels clamp it to
  // max_context() as the prepare kernel would), so the kernels read
  // context_lens as ke and kZeroStartRows zeros as ks, and the call
  // launches no prepare kernel and takes no ks / ke workspace.
  bool ranges_from_lengths = false;
  // H = 64 and unpadded rows, any-tie unsorted positions: the scoring
  // kernel (blocks of one query) also counts each row's score keys by their
  // top bits (HistStoreSink, decode/select.cuh), and the select kernel
  // takes every key above the K-th key's bin and resolves that bin from the
  // candidates its CTAs appended; no standalone top-k. Taken by shape for
  // one-token requests of long contexts and few rows (kFusedSelectMinKeys,
  // kFusedSelectMaxCtas); with more tokens a request only when pinned.
  bool fused_select = false;
  std::int64_t select_parts = 0;      // the select kernel's CTAs a row
  // A cluster of select_parts CTAs a row (at most kSelectClusterParts)
  // where the device holds every row's cluster at once (the launch reads
  // the cluster occupancy and runs the counters' kernel otherwise).
  bool select_cluster = false;
  std::int64_t select_capacity = 0;   // candidates a row holds (more: the bin is resolved from the scores)
  // The same calls (one token a request read as its range, H = 64, any-tie
  // unsorted positions), pinned by PagedHooks: the scoring kernel keeps
  // each row piece's top K in shared memory (StreamSelectSink,
  // decode/stream_select.cuh) and the piece that completes a row merges
  // the row's list into the output; no scores buffer, no top-k launch.
  // Pinned only: slower than the unfused route at every measured shape
  // (docs/perf-log.md D27).
  bool stream_select = false;
  std::int64_t stream_list_capacity = 0;  // entries a row's list holds: its keys at most
  // The same calls (one token a request read as its range, H = 64), any
  // tie rule, sorted or not: the scoring kernel keeps only the scores at
  // or above a bar its helper warp raises from the counts of what it kept
  // (BarFilterSink, decode/bar_select.cuh), and the standalone top-k takes
  // each row's top K from them (TopkHooks::entries). A row's area holds an
  // entry for each of its keys, so none outruns it and nothing is repaired;
  // rows of fewer than bar_stored_below keys store their scores over their
  // areas instead, and the same top-k launch selects them from those as
  // the unfused route would. No scores buffer; batches count the areas.
  // Three launches: the zero kernel, the scoring kernel, the top-k (both
  // programmatic). Taken by shape for many rows under a wide table
  // (kBarSelectMinRows, kBarSelectMinKeys), or pinned by PagedHooks.
  bool bar_select = false;
  std::int64_t bar_capacity = 0;  // entries a row's area holds: the table's keys
  std::int64_t bar_stored_below = 0;  // kBarStoredBelowKeys, or PagedHooks::bar_stored_below
  Batches batches;                 // of requests, as many as the scores buffer holds (at least one)
  LaunchGrid prepare;              // paged_prepare_kernel: a thread per launch row (per row and head when padded)
  std::int64_t map_items_per_request = 0;  // the map kernel's threads a request: next_n x K
  PagedWorkspace workspace;

  // The map kernel's grid for a batch of `requests`.
  LaunchGrid map_grid(std::int64_t requests) const;
};

// What tools and tests may pin in a plan. The route: by shape (the fused
// selection where kFusedSelectMinKeys and kFusedSelectMaxCtas say it is
// faster, the bar selection where kBarSelectMinRows and kBarSelectMinKeys
// do), or pinned to the fused selection (wherever the select kernel
// can take the call: fused_select_possible) or to the unfused pipeline, so
// one build can time both routes at any row and tests can run the fused
// one at small shapes. kMathOnly is the control, not a route: the unfused
// plan's scoring launches with every score folded into a checksum
// (scoring::ChecksumSink), no score stored, no top-k, the outputs not
// written; the operator's time less its time is what the selection and
// the scores' round trip expose (a fused selection can win at most that).
struct PagedHooks {
  enum class Route { kByShape, kFusedSelect, kUnfused, kMathOnly, kStreamSelect, kBarSelect } route = Route::kByShape;
  // The bar selection's rows of fewer keys store their scores (-1:
  // kBarStoredBelowKeys; 0: none does, so tests and tools can run the
  // bar on short rows).
  std::int64_t bar_stored_below = -1;
};

// Whether the fused selection can take a call of these params: one token a
// request read as its range (plan.ranges_from_lengths), H = 64 in 64-column
// blocks, any-tie unsorted positions, contexts past K of at most
// kSelectMaxParts parts.
bool fused_select_possible(const PagedIndexerTopkParams& params, const PagedPlan& plan);
// Whether the streaming selection can take a call: one token a request read
// as its range, H = 64 in 64-column blocks, any-tie unsorted positions.
bool stream_select_possible(const PagedIndexerTopkParams& params, const PagedPlan& plan);

// Whether the bar selection can take a call: one token a request read as
// its range, H = 64 in 64-column blocks, positions (not physical slots).
bool bar_select_possible(const PagedIndexerTopkParams& params, const PagedPlan& plan);

// The plan of launch_indexer_topk_paged(params, ...) (arguments validated);
// a call with no rows plans no launch and no workspace.
PagedPlan make_plan(const PagedIndexerTopkParams& params, const PagedHooks& hooks = {});

// merge_topk's kernel holds a row's num_parts x part_k entries, as 64-bit
// keys, in this much dynamic shared memory when they fit: its radix passes,
// count and take then read shared memory, and the parts are read from
// global memory once; larger rows are read from global memory on every pass
// (docs/perf-log.md, D10).
inline constexpr int kMergeCacheBytes = 160 * 1024;
inline constexpr std::int64_t kMergeCacheEntries = kMergeCacheBytes / sizeof(std::uint64_t);
// Whether a merge of num_parts x part_k entries a row runs the cached kernel.
constexpr bool merge_caches_entries(std::int64_t num_parts, std::int64_t part_k) {
  return num_parts * part_k <= kMergeCacheEntries;
}

}  // namespace dsa::decode
