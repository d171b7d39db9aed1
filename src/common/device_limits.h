// What the launch plans read of the device. No CUDA header: the plans are
// pure functions of the shape, these limits and the hooks, and CPU tests
// call them with made-up limits (LaunchCache::current reads the real ones).
#pragma once

namespace dsa {

struct DeviceLimits {
  int sm_count = 0;
  int smem_per_sm = 0;         // bytes of shared memory an SM has
  int reserved_per_block = 0;  // bytes the runtime reserves per CTA
  int l2_bytes = 0;            // bytes of L2
};

}  // namespace dsa
