// The fused operator's host-side plan (fused.h): from the shape, the device's
// limits and the hooks, the route a call takes, each stage's geometry and
// arguments, the batches of the bounded scores buffer, and the workspace
// layout. A pure function with no CUDA header, so CPU tests check the route
// and size heuristics; launch_indexer_topk walks the plan's stages and
// derives nothing itself, and workspace_size is the plan's total.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/device_limits.h"
#include "common/launch_plan.h"
#include "dsa_topk/dsa_topk.h"
#include "fused/fused.h"

namespace dsa::fused {

// Up to this many keys (num_keys) the operator takes the unfused route. The
// unfused pipeline measures faster than the fused stages up to 32K (4096 x
// 8K 0.553 against 0.858 ms, 16K 1.149 against 1.416, 32K 2.414 against
// 2.508; docs/perf-log.md, F17), and so does the unfused route at 4096 x 64K
// (4.17 against 4.53 ms) and 128K (8.68-8.89 against 8.96; F19). At 4096 x
// 256K the fused route is faster (unfused 1.045x its time, F20), so longer
// rows keep the fused route.
inline constexpr std::int64_t kUnfusedMaxKeys = 131072;

// The route FusedHooks::Route::kByShape takes: unfused when num_keys <=
// kUnfusedMaxKeys, or when every row's scores fit 256 MB (one scoring launch
// and one top-k launch): there the unfused pipeline beats the fused stages
// too (64 x 128K 0.184 against 0.204 ms, 512 x 128K 1.115 against 1.161;
// docs/perf-log.md, F18).
bool unfused_by_shape(std::int64_t num_queries, std::int64_t num_keys);

// The route a call takes (FusedHooks::route asks for one).
enum class FusedRoute {
  kFused,     // stages 1-4 (fused.h)
  kUnfused,   // every row scored into the bounded buffer, then the standalone top-k
  kMathOnly,  // FusedMode::kMathOnly: stage 2's math folded into a checksum
};

// Every step-th key, starting at offset, is a sample: about N/32 of them
// (a target clamped to [min(N, kMinSampledKeys), kMaxSampledKeys]; the step
// rounds up, so the count is at least half the target and at most it), so
// sampling costs ~3 % of the work; e = S*K/N samples fall in a full row's
// top K (64 at K = 2048), which keeps the candidate count near K (1 + guard
// / sqrt(e)).
struct SamplePlan {
  std::int64_t step = 1, offset = 0, count = 0;  // sample i is key i * step + offset, i < count
};

// Byte offsets of the workspace's pieces, laid end to end in this order,
// each 256-byte aligned (WorkspaceLayout). A piece the route does not use
// takes no bytes: the unfused route and the math-only control take only the
// scores buffer and the checksum word. S = samples (SamplePlan::count).
struct FusedWorkspace {
  std::size_t sample_keys = 0;    // [S, kHeadDim] FP8 bytes: the sampled keys
  std::size_t sample_scale = 0;   // [S] float: their scales
  std::size_t sample_ks = 0;      // [T] int32: row t's samples are [sample_ks[t], sample_ke[t])
  std::size_t sample_ke = 0;      // [T] int32
  std::size_t sample_scores = 0;  // [T, S] float
  std::size_t tau = 0;            // [T] uint32: the rows' threshold keys
  std::size_t count = 0;          // [T] uint32: entries the filter staged
  std::size_t unstaged = 0;       // [T] uint32: ties with tau it left out
  std::size_t flags = 0;          // [T] uint32: 1 = the row is repaired
  std::size_t candidates = 0;     // [T, capacity] uint64: the staged order keys
  std::size_t scores = 0;         // [rows a batch, score_stride] float: the bounded scores buffer
  std::size_t checksum = 0;       // one uint32: the math-only checksum without FusedHooks::checksum
  std::size_t total = 0;          // bytes in all
};

// Stage 1: the samples, their scores, tau per row.
struct SampleStage {
  SamplePlan samples;
  LaunchGrid prepare;            // sample_prepare_kernel: a thread per sample and per row
  LaunchGrid threshold;          // threshold_kernel: a CTA a row, the row's sample keys in shared memory
  int threshold_smem_limit = 0;  // its shared-memory attribute: the most samples any call has
};

// Stage 2: the fused filter's candidate sink.
struct FilterStage {
  std::uint32_t capacity = 0;  // candidate entries a row's area holds
  // Ties a flooded row stages: K plus a quarter for lanes that see fewer
  // ties than their share; an all-tie row's entries stay well below the
  // capacity (4 K) unless about 2.7 K scores are above tau as well.
  std::uint32_t tie_target = 0;
};

// Stage 3: a CTA a row of `threads` (kSelectThreads, or
// wide_select_threads(K) when the rows are too few to fill the device); its
// shared memory is the instance's SharedStorage, known at compile time.
struct SelectStage {
  unsigned blocks = 0;
  int threads = 0;
};

// Rows scored into the bounded buffer batch by batch, each batch finished
// by the standalone top-k.
struct ScoreAndSelectStage {
  Batches batches;               // of rows
  std::int64_t score_stride = 0;  // floats between the buffer's rows
};

struct FusedPlan {
  FusedRoute route = FusedRoute::kFused;
  FusedWorkspace workspace;
  LaunchGrid unfused_trace;  // kUnfused: mark_unfused_kernel, run when FusedHooks::trace is set
  SampleStage sample;       // kFused
  FilterStage filter;       // kFused
  SelectStage select;       // kFused
  // kUnfused: every row, in batches of at most FusedHooks::unfused_batch_rows;
  // kFused: stage 4, the repair of the rows stage 3 flagged, in batches of
  // what the buffer holds; kMathOnly: no batches.
  ScoreAndSelectStage score_and_select;
};

// The plan of launch_indexer_topk(params, ..., hooks) on a device with these
// limits (arguments validated; K one of the selection's instances). The
// workspace depends on the shape and the hooks only, never on the limits
// (workspace_size plans without a device); a call with no rows plans no
// stage and no workspace.
FusedPlan make_plan(const IndexerTopkParams& params, const DeviceLimits& limits, const FusedHooks& hooks = {});

}  // namespace dsa::fused
