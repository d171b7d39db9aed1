#include "power_state.h"

#include <cuda_runtime.h>

#include <chrono>
#include <thread>

namespace dsa::cli {
namespace {

int g_rest_ms = 0;

}  // namespace

void set_rest_ms(int ms) { g_rest_ms = ms > 0 ? ms : 0; }
int rest_ms() { return g_rest_ms; }

void rest_before_call() {
  if (g_rest_ms <= 0) return;
  cudaDeviceSynchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(g_rest_ms));
}

}  // namespace dsa::cli
