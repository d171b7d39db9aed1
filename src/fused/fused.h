// The fused indexer top-k on the CUDA backend (docs/design.md, "Fused
// operator"): scoring and exact selection without a [T, N] score matrix.
// Not part of the public API: src/api/operators.cpp validates, then calls
// launch_indexer_topk with default hooks.
//
// Stages, all on the caller's stream, no host synchronisation, no allocation:
//   1. sample: every `step`-th key is gathered and scored for every row with
//      the scoring kernel (a few percent of the work); tau per row from the
//      samples inside its range;
//   2. fused filter: the scoring kernel's main loop with a candidate
//      epilogue: scores >= tau append (key, position) to the row's candidate
//      area in the workspace, every passing score is counted;
//   3. select: per row, the certificate (K <= count <= capacity, or every
//      key a candidate) then radix select and emission over the candidates;
//      a row whose certificate fails is flagged;
//   4. repair: flagged rows are rescored into a bounded buffer, batch by
//      batch, and finished by the standalone top-k (exact by construction).
// Shapes unfused_by_shape() picks (plan.h) take the unfused route instead:
// every row goes the repair path's way (scores of a batch of rows into the
// bounded buffer, then the standalone top-k). Short rows make the fused
// filter stage about half of their scores (K is a third to a half of an 8K
// row), so its candidate traffic is the score matrix's, and the standalone
// top-k's resident kernel selects such rows faster than the select stage.
// make_plan (plan.h) picks the route and sets out every stage's launches and
// the workspace; launch_indexer_topk walks that plan.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa_topk/dsa_topk.h"
#include "fused/trace.h"

namespace dsa::fused {

enum class FusedMode {
  kFull,      // the operator
  kMathOnly,  // control build: stage 2's matrix work and score arithmetic with
              // every score folded into a checksum (nothing optimised away),
              // no filter, no selection, no repair; indices are not written
};

// Test and benchmark hooks; the operator uses the defaults.
struct FusedHooks {
  FusedMode mode = FusedMode::kFull;
  // Replace every row's sampled tau by forced_threshold_key (0: every key
  // passes -> overflow on rows longer than the capacity; a high key ->
  // underflow), so each repair path runs on the GPU.
  bool force_threshold = false;
  std::uint32_t forced_threshold_key = 0;
  FusedRowTrace* trace = nullptr;  // [T] device memory, or null
  // Threads per row of the select stage: by T (default), or forced so tests
  // cover both widths at any T.
  enum class SelectWidth { kByRows, kNarrow, kWide } select_width = SelectWidth::kByRows;
  std::uint32_t* checksum = nullptr;  // kMathOnly: device word the checksum lands in (may be null)
  // The route: by shape (unfused_by_shape, plan.h) unless pinned. Forcing tau
  // implies the fused route (only it has a threshold).
  enum class Route { kByShape, kFused, kUnfused } route = Route::kByShape;
  // Rows a batch of the unfused route scores and selects (0: as many as the
  // buffer holds), so tests run many batches, a short last one included, on
  // small problems.
  std::int64_t unfused_batch_rows = 0;
};

// Candidate entries each row's area holds in the workspace (the select
// stage's shared-memory plan sizes itself from the same function).
constexpr std::int64_t candidate_capacity(int k) { return 4 * static_cast<std::int64_t>(k); }

// Bytes of workspace launch_indexer_topk needs for params with these hooks
// (the route they take: the unfused route needs only its batch buffer): the
// total of make_plan's layout (plan.h).
std::size_t workspace_size(const IndexerTopkParams& params, const FusedHooks& hooks = {});

// Runs the fused operator (arguments already validated; device pointers).
// workspace must hold workspace_size(params, hooks) bytes (256-byte aligned).
Status launch_indexer_topk(const IndexerTopkParams& params, CUstream_st* stream, void* workspace,
                           std::size_t workspace_bytes, const FusedHooks& hooks = {});

}  // namespace dsa::fused
