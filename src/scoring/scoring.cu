#include "scoring/scoring.h"

#include <cuda_runtime.h>

#include <string>

#include "scoring/launch.cuh"

namespace dsa::scoring {

Status launch_indexer_scores(const IndexerScoresParams& p, CUstream_st* stream, const std::uint32_t* row_mask) {
  return launch_scoring(p, row_mask, StoreSink{p.scores, p.score_stride}, stream);
}

}  // namespace dsa::scoring
