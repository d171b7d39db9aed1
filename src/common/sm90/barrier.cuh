// mbarrier-based pipeline stages (PTX ISA "Parallel Synchronization and
// Communication Instructions: mbarrier"), through CCCL's cuda::ptx wrappers.
//
// A Pipeline<kStages> is a ring of stages, each with a `full` barrier (the
// producer's TMA bytes landed) and an `empty` barrier (the consumers are done
// with the buffer). Both sides walk the ring with a PipelineState.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace dsa::sm90 {

__device__ __forceinline__ void barrier_init(std::uint64_t* bar, std::uint32_t arrivals) {
  cuda::ptx::mbarrier_init(bar, arrivals);
}

// Makes barrier initialisation visible to the async proxy (TMA) and the CTA.
__device__ __forceinline__ void barrier_init_fence() { cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster); }

// Blocks until the phase with parity `parity` of `bar` has completed.
__device__ __forceinline__ void barrier_wait(std::uint64_t* bar, std::uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

__device__ __forceinline__ void barrier_arrive(std::uint64_t* bar) { cuda::ptx::mbarrier_arrive(bar); }

// Hardware named barrier `id` (1-15; 0 is __syncthreads') over `threads`
// threads, whole warps: a subset of the CTA waits for itself alone.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// One arrival that also announces `bytes` of transaction (TMA) to expect.
__device__ __forceinline__ void barrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, bar,
                                       bytes);
}

// Position in a ring of kStages stages; `phase` flips each time it wraps.
template <int kStages>
struct PipelineState {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance(int steps = 1) {
    stage += steps;
    while (stage >= kStages) {
      stage -= kStages;
      phase ^= 1u;
    }
  }
};

// Use n (counted from 0) of a ring of kSlots barrier-guarded slots, for
// loops that count their uses instead of carrying a PipelineState: the slot,
// and the parity of the phase that use completes (a producer's wait on the
// slot's "empty" barrier takes parity ^ 1, which a fresh barrier counts as
// complete, as in Pipeline::producer_acquire).
struct RingSlot {
  std::uint32_t slot;
  std::uint32_t parity;
};
template <int kSlots>
__device__ __forceinline__ RingSlot ring_slot(std::uint32_t n) {
  return {n % kSlots, (n / kSlots) & 1u};
}

template <int kStages>
struct Pipeline {
  std::uint64_t full[kStages];
  std::uint64_t empty[kStages];

  // One thread: `consumers` arrivals free a stage.
  __device__ void init(std::uint32_t consumers) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], consumers);
    }
  }
  // A fresh empty barrier counts as released (parity 1 of a new barrier is
  // complete), so the producer's first lap never waits.
  __device__ __forceinline__ void producer_acquire(const PipelineState<kStages>& st) {
    barrier_wait(&empty[st.stage], st.phase ^ 1u);
  }
  __device__ __forceinline__ std::uint64_t* producer_commit(const PipelineState<kStages>& st, std::uint32_t bytes) {
    barrier_arrive_expect_tx(&full[st.stage], bytes);
    return &full[st.stage];
  }
  __device__ __forceinline__ void consumer_wait(const PipelineState<kStages>& st) {
    barrier_wait(&full[st.stage], st.phase);
  }
  __device__ __forceinline__ void consumer_release(const PipelineState<kStages>& st) {
    barrier_arrive(&empty[st.stage]);
  }
};

}  // namespace dsa::sm90
