// The dsa-topk command line tool: check, bench, replay, generate.
#pragma once

#include <string>

#include "args.h"

namespace dsa::cli {

int run_check(const Args& args);
int run_bench(const Args& args);
int run_replay(const Args& args);
int run_generate(const Args& args);
int run_default();

// GPU ceilings measured in the same run as a benchmark (gpu_ceilings.cu).
struct GpuCeilings {
  bool measured = false;
  std::string device;          // name, SM count, clocks
  std::string why_not;         // when !measured
  double copy_tb_s = 0;             // device-to-device copy, bytes read + written
  double read_tb_s = 0;             // a read-only stream of device memory (the HBM read ceiling)
  double fp8_tflops = 0;            // cuBLASLt FP8 e4m3 GEMM 8192^3, bf16 out (a burst of 20)
  double fp8_fast_tflops = 0;       // the same with fast accumulation
  double fp8_sustained_tflops = 0;  // fp8_tflops after 0.3 s of back-to-back GEMMs (the cap's clock)
};
GpuCeilings measure_gpu_ceilings();

}  // namespace dsa::cli
