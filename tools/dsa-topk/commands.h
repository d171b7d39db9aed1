// The dsa-topk command line tool: check, bench, replay, generate.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsa::cli {

// "--name value" and "--flag" arguments after the command word; positional
// arguments in order. Unknown options are errors (named in the message).
class Args {
 public:
  Args(int argc, char** argv, int first);
  std::string get(const std::string& name, const std::string& fallback) const;
  std::int64_t get_int(const std::string& name, std::int64_t fallback) const;
  bool flag(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Throws std::invalid_argument naming any option not in `known`.
  void expect_only(const std::vector<std::string>& known) const;

 private:
  std::map<std::string, std::string> options_;
  std::vector<std::string> positional_;
};

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
