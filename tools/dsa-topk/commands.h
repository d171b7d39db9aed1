// The dsa-topk command line tool: check, bench, replay, generate.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsa::cli {

// One option of a command: "--name VALUE" when `value` names what it takes,
// a flag "--name" when `value` is empty; `help` may hold several lines.
struct OptionSpec {
  std::string name;   // without the leading "--"
  std::string value;  // e.g. "N", "cpu|cuda"; "" for a flag
  std::string help;
};

// A command's arguments, parsed against its options: "--name value",
// "--name=value", "--flag", at most `max_positional` other words, and
// -h/--help anywhere (which wins over every error). Throws
// std::invalid_argument naming the first unknown option, flag given a value,
// option without its value, option given twice or stray word.
class Args {
 public:
  Args(const std::string& command, const std::vector<OptionSpec>& options, int max_positional, int argc,
       char** argv, int first);
  bool help() const { return help_; }
  std::string get(const std::string& name, const std::string& fallback) const;
  std::int64_t get_int(const std::string& name, std::int64_t fallback) const;
  bool flag(const std::string& name) const;  // given (a flag, or an option with its value)
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> options_;
  std::vector<std::string> positional_;
  bool help_ = false;
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
