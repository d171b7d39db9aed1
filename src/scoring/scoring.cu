#include "scoring/scoring.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "scoring/launch.cuh"

namespace dsa::scoring {
namespace {

constexpr int kCtasPerSmTarget = 8;          // enough waves that the tail wave costs little
constexpr std::int64_t kMinChunkKeys = 1024;  // below this the prologue dominates a CTA
constexpr std::int64_t kMaxChunkKeys = 16384;

}  // namespace

std::int64_t choose_chunk_keys(std::int64_t num_queries, std::int64_t num_keys, int num_heads, int sm_count) {
  const std::int64_t queries_per_block = kTileCols / num_heads;
  const std::int64_t blocks = (num_queries + queries_per_block - 1) / queries_per_block;
  const std::int64_t target_ctas = static_cast<std::int64_t>(std::max(sm_count, 1)) * kCtasPerSmTarget;
  // Split each block's keys into equal chunks only as far as the grid needs:
  // a large T keeps whole rows (no small trailing chunk with a full prologue).
  const std::int64_t splits = std::max<std::int64_t>(1, (target_ctas + blocks / 2) / blocks);
  std::int64_t chunk = std::clamp((num_keys + splits - 1) / splits, kMinChunkKeys, kMaxChunkKeys);
  // grid.y is at most 65535 chunks.
  chunk = std::max(chunk, (num_keys + 65534) / 65535);
  return (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
}

Status launch_indexer_scores(const IndexerScoresParams& p, CUstream_st* stream, const std::uint32_t* row_mask) {
  return launch_scoring(p, row_mask, StoreSink{p.scores, p.score_stride}, stream);
}

}  // namespace dsa::scoring
