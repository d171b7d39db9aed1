// Launcher of the FP8 indexer scoring kernel (arguments already validated).
#pragma once

#include <cstdint>

#include "dsa_topk/dsa_topk.h"

namespace dsa::scoring {

// Scores every row (or, with row_mask, the rows whose entry is nonzero) into
// params.scores on `stream`: one launch, no synchronisation.
Status launch_indexer_scores(const IndexerScoresParams& params, CUstream_st* stream,
                             const std::uint32_t* row_mask = nullptr);

}  // namespace dsa::scoring
