// The bench's one timing loop (METHOD.md): CUDA events around each call,
// a warm-up first, L2 flushed before every call when cold_l2(); operators
// compared in one run are interleaved call by call. Used for our
// operators (device_run.cu) and the in-run baselines (baselines.cu).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "l2_flush.h"
#include "power_state.h"

namespace dsa::cli {

// One operator timed by timed_rounds: before() runs outside the timing
// (poisoning outputs, zeroing counters), then call(i) -> Status, i = 0 the
// warm-up; the ms of calls 1 .. reps go to *ms.
struct TimedSide {
  std::function<void()> before;
  std::function<Status(int)> call;
  std::vector<double>* ms;
};

// Times the sides side by side: round i calls every side once, in order,
// each alone between two events after its before() and the L2 flush (and,
// with --rest-ms, a rest of the GPU: power_state.h), for i = 0 .. reps.
// Interleaved so every side meets the same power state: run one after the
// other, a side timed after 60 ms of load ran ~10 % slower than the one
// before it only for the clock the 700 W cap left (docs/perf-log.md
// "Session 24"). Stops at the first failure.
inline Status timed_rounds(int reps, const std::vector<TimedSide>& sides, const char* what) {
  const auto failed = [what](cudaError_t err, const char* step) -> Status {
    return {StatusCode::kCudaError, std::string(what) + ": " + step + ": " + cudaGetErrorString(err)};
  };
  L2Flush flush;
  if (Status st = flush.init(); !st.ok()) return st;
  cudaEvent_t start, stop;
  if (const cudaError_t err = cudaEventCreate(&start); err != cudaSuccess) return failed(err, "cudaEventCreate");
  if (const cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess) {
    cudaEventDestroy(start);
    return failed(err, "cudaEventCreate");
  }
  Status st;
  for (int i = 0; i <= reps && st.ok(); ++i) {
    for (const TimedSide& side : sides) {
      rest_before_call();
      side.before();
      st = flush.run();
      if (!st.ok()) break;
      cudaEventRecord(start);
      st = side.call(i);
      cudaEventRecord(stop);
      if (!st.ok()) break;
      if (const cudaError_t err = cudaEventSynchronize(stop); err != cudaSuccess) {
        st = failed(err, "running");
        break;
      }
      float t = 0;
      cudaEventElapsedTime(&t, start, stop);
      if (i > 0) side.ms->push_back(t);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return st;
}

// One side alone: before() and call(i) as in TimedSide.
template <class Before, class Call>
Status timed_calls(int reps, Before&& before, Call&& call, const char* what, std::vector<double>* ms) {
  return timed_rounds(reps, {TimedSide{before, call, ms}}, what);
}

}  // namespace dsa::cli
