// The bench's one timing loop (METHOD.md): CUDA events around each call,
// a warm-up first, L2 flushed before every call when cold_l2(). Used for
// our operators (device_run.cu) and the in-run baselines (baselines.cu).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "l2_flush.h"
#include "power_state.h"

namespace dsa::cli {

// Runs before() and then call(i) -> Status for i = 0 .. reps (i = 0 is the
// warm-up), each call alone between two events after before() (outside
// the timing: poisoning outputs, zeroing counters) and the L2 flush, and
// appends the ms of calls 1 .. reps to *ms. Stops at the first failure.
// With --rest-ms each call follows a rest of the GPU (power_state.h),
// outside the events.
template <class Before, class Call>
Status timed_calls(int reps, Before&& before, Call&& call, const char* what, std::vector<double>* ms) {
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
    rest_before_call();
    before();
    st = flush.run();
    if (!st.ok()) break;
    cudaEventRecord(start);
    st = call(i);
    cudaEventRecord(stop);
    if (!st.ok()) break;
    if (const cudaError_t err = cudaEventSynchronize(stop); err != cudaSuccess) {
      st = failed(err, "running");
      break;
    }
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (i > 0) ms->push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return st;
}

}  // namespace dsa::cli
