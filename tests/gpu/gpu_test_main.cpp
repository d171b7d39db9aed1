// Entry point of the GPU tests: without a usable Hopper GPU it says why and
// exits with 77, which CTest reports as "Skipped" (never as passed).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "dsa_topk/dsa_topk.h"
#include "api/cuda_queries.h"

int main(int argc, char** argv) {
  std::string why;
  if (!dsa::detail::cuda_device_present(&why)) {
    std::printf("SKIPPED: GPU tests need an H100/H200 (sm_90a): %s\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
