// Host worker threads, once for every CPU path: the reference backend, the
// generators and the CLI's verification. Work is split by index, so results
// never depend on the split or on the number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace dsa {

// `requested` threads, or every hardware thread for 0 (at least one).
inline int worker_count(int requested) {
  if (requested > 0) return requested;
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

// body(i) for every i in [0, count), handed out one at a time to
// worker_count(threads) threads (the calling thread is one of them): rows of
// very different cost balance themselves.
inline void parallel_items(std::int64_t count, int threads, const std::function<void(std::int64_t)>& body) {
  const int workers = static_cast<int>(std::min<std::int64_t>(worker_count(threads), count));
  if (workers <= 1) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  const auto work = [&] {
    for (std::int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < count;) body(i);
  };
  std::vector<std::jthread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  for (int w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
}

// fn(begin, end) on contiguous blocks covering [0, count), one block per
// worker (at most worker_count(threads) of them, each at least min_block
// items, so tiny jobs stay on the calling thread, which takes the first
// block). Returns when every block is done.
template <class Fn>
void parallel_blocks(std::int64_t count, int threads, std::int64_t min_block, Fn fn) {
  const std::int64_t workers =
      std::clamp<std::int64_t>(count / std::max<std::int64_t>(min_block, 1), 1, worker_count(threads));
  if (workers == 1) {
    fn(std::int64_t{0}, count);
    return;
  }
  const std::int64_t block = (count + workers - 1) / workers;
  std::vector<std::jthread> pool;
  for (std::int64_t begin = block; begin < count; begin += block) {
    pool.emplace_back([=] { fn(begin, std::min(count, begin + block)); });
  }
  fn(std::int64_t{0}, std::min(count, block));
}

}  // namespace dsa
