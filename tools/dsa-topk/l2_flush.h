// Cold-cache timing for the bench: every timed call reads its inputs from
// device memory, as a call on fresh data does, instead of from the 50-60 MB
// L2 where the previous call left them (a 64 x 128K score matrix is 32 MB;
// docs/perf-log.md "Session 22").
#pragma once

#include <cstddef>

#include "dsa_topk/dsa_topk.h"

struct CUstream_st;

namespace dsa::cli {

// Whether this process's timed calls start with L2 flushed (the bench's
// default) or warm (bench --warm-l2, and the commands that do not time:
// the inputs stay where the previous call left them, as scores just
// written by the scoring kernel would be). Set once, from the command line.
void set_cold_l2(bool cold);
bool cold_l2();

// Evicts L2 by reading a device buffer four times its size (reads leave
// clean lines, so the timed call that follows pays no write-backs). run()
// goes on the stream before the call's start event.
class L2Flush {
 public:
  L2Flush() = default;
  L2Flush(const L2Flush&) = delete;
  L2Flush& operator=(const L2Flush&) = delete;
  ~L2Flush();

  // Allocates the buffer when cold_l2(); otherwise run() does nothing.
  Status init();
  Status run(CUstream_st* stream = nullptr) const;

 private:
  void* buffer_ = nullptr;
  unsigned* sink_ = nullptr;
  std::size_t vectors_ = 0;  // 16-byte words in buffer_
  int blocks_ = 0;           // the read kernel's grid: 4 CTAs an SM
};

}  // namespace dsa::cli
