// Launcher of the FP8 indexer scoring kernel (arguments already validated).
#pragma once

#include <cstdint>

#include "dsa_topk/dsa_topk.h"

namespace dsa::scoring {

// Keys per blockIdx.y chunk: small T splits each row's keys across CTAs so
// every SM has work; large T keeps chunks long so the Q block load and the
// pipeline fill are amortised.
std::int64_t choose_chunk_keys(std::int64_t num_queries, std::int64_t num_keys, int num_heads, int sm_count);

// Scores every row (or, with row_mask, the rows whose entry is nonzero) into
// params.scores on `stream`: one launch, no synchronisation.
Status launch_indexer_scores(const IndexerScoresParams& params, CUstream_st* stream,
                             const std::uint32_t* row_mask = nullptr);

}  // namespace dsa::scoring
