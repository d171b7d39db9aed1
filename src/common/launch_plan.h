// Parts of the operators' host plans (fused/plan.h, decode/plan.h). No CUDA
// header.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dsa {

// A one-dimensional launch: blocks of threads, and its dynamic shared memory.
struct LaunchGrid {
  unsigned blocks = 0;
  unsigned threads = 0;
  int smem_bytes = 0;
};

// Work done batch by batch through a bounded buffer (the scores of a batch of
// rows, or of a batch of requests): batches of `per_batch` items from item 0,
// the last one shorter when per_batch does not divide the items.
struct Batch {
  std::int64_t first = 0;  // its first item
  std::int64_t size = 0;   // its items, >= 1
};

struct Batches {
  std::int64_t items = 0;      // items to cover, >= 0
  std::int64_t per_batch = 0;  // items a batch, >= 1 unless items == 0

  std::int64_t count() const { return items > 0 ? (items + per_batch - 1) / per_batch : 0; }
  Batch operator[](std::int64_t i) const {
    const std::int64_t first = i * per_batch;
    return {first, std::min(per_batch, items - first)};
  }
};

}  // namespace dsa
