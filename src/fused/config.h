// Sizes of the fused operator's stages that its host plan (plan.h) and its
// kernels share. No CUDA header: CPU tests plan with them.
#pragma once

#include <cstdint>

namespace dsa::fused {

// Stage 1 samples keys, not rows: one set of strided key positions for the
// whole call (sample_plan, plan.cpp), which every row scores and reads
// within its own range; its target count is clamped to [kMinSampledKeys,
// kMaxSampledKeys] (the threshold kernel holds a row's samples in shared
// memory, hence the most). The standalone top-k samples each row instead
// (selection/topk/config.h, kMinRowSamples). kThresholdThreads: the
// threshold kernel's block.
inline constexpr std::int64_t kMinSampledKeys = 256;
inline constexpr std::int64_t kMaxSampledKeys = 16384;
inline constexpr int kThresholdThreads = 256;

// Stage 3, threads per row: 256 lets four rows share an SM; when there are
// too few rows to fill the GPU (small T), a row's latency is the stage's
// time, and a block of K / 2 threads, up to 1024 (two sorted items each:
// with one, K = 1024's block has 64 registers per thread and spills), cuts
// each pass over the candidates by up to 4x.
inline constexpr int kSelectThreads = 256;
constexpr int wide_select_threads(int k) { return k / 2 < 1024 ? k / 2 : 1024; }
// Whether `rows` rows take the wide blocks: fewer than two rows an SM (one
// row's latency is the stage).
constexpr bool select_rows_are_few(std::int64_t rows, int sm_count) {
  return rows <= 2 * static_cast<std::int64_t>(sm_count);
}

}  // namespace dsa::fused
