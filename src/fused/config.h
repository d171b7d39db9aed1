// Sizes of the fused operator's stages that its host plan (plan.h) and its
// kernels share. No CUDA header: CPU tests plan with them.
#pragma once

#include <cstdint>

namespace dsa::fused {

// Stage 1: samples a row (sample_plan, plan.cpp), and the threshold
// kernel's threads (it holds a row's samples in shared memory, hence the
// most samples).
inline constexpr std::int64_t kMinSamples = 256;
inline constexpr std::int64_t kMaxSamples = 16384;
inline constexpr int kThresholdThreads = 256;

// Stage 3, threads per row: 256 lets four rows share an SM; when there are
// too few rows to fill the GPU (small T), a row's latency is the stage's
// time, and a block of K / 2 threads, up to 1024 (two sorted items each:
// with one, K = 1024's block has 64 registers per thread and spills), cuts
// each pass over the candidates by up to 4x.
inline constexpr int kSelectThreads = 256;
constexpr int wide_select_threads(int k) { return k / 2 < 1024 ? k / 2 : 1024; }

}  // namespace dsa::fused
