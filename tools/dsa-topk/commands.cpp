#include "commands.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "baselines.h"
#include "common/parallel.h"
#include "decode/plan.h"
#include "device_run.h"
#include "l2_flush.h"
#include "power_state.h"
#include "reference/cpu_reference.h"
#include "tools/checker.h"
#include "tools/generators.h"
#include "tools/paged.h"
#include "tools/safetensors.h"

namespace dsa::cli {
namespace {

using tools::Distribution;
using tools::IndexerProblem;
using tools::Layout;
using tools::ScoresProblem;

// FLOP per (query, key) pair: 2 * H * D (16384 at H = 64).
double flop_per_pair(int heads) { return 2.0 * heads * kHeadDim; }

// ------------------------------------------------------------ arguments ----

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  throw std::invalid_argument("--backend: expected cpu or cuda, got '" + name + "'");
}

// "all", one name, or a comma-separated list of names.
std::vector<Distribution> parse_distributions(const std::string& names) {
  if (names == "all") return tools::all_distributions();
  std::vector<Distribution> out;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = names.find(',', at);
    const std::string name = names.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    Distribution d;
    if (!tools::parse_distribution(name, &d)) throw std::invalid_argument("--dist: unknown distribution '" + name + "'");
    out.push_back(d);
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

std::vector<Layout> parse_layouts(const std::string& name) {
  if (name == "all") return tools::all_layouts();
  Layout l;
  if (!tools::parse_layout(name, &l)) throw std::invalid_argument("--layout: unknown layout '" + name + "'");
  return {l};
}

// "a, b, c or d".
std::string one_of(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return out;
}

// --op (default indexer), one of `allowed` (the command's ops).
std::string parse_op(const Args& args, const std::vector<std::string>& allowed) {
  const std::string op = args.get("op", "indexer");
  if (std::find(allowed.begin(), allowed.end(), op) != allowed.end()) return op;
  throw std::invalid_argument("--op: expected " + one_of(allowed) + ", got '" + op + "'");
}

SelectOptions parse_options(const Args& args) {
  SelectOptions o;
  o.k = static_cast<int>(args.get_int("K", 2048));
  o.ties = args.flag("deterministic") ? TieBreak::kSmallestIndex : TieBreak::kAny;
  o.index_base = args.flag("relative") ? IndexBase::kRelative : IndexBase::kAbsolute;
  o.sorted = args.flag("sorted");
  return o;
}

// --name as an integer in [lo, hi] (`fallback` when not given), or an error
// naming the option.
std::int64_t int_in(const Args& args, const std::string& name, std::int64_t fallback, std::int64_t lo,
                    std::int64_t hi) {
  const std::int64_t v = args.get_int(name, fallback);
  if (v < lo || v > hi) {
    const std::string range = hi == std::numeric_limits<std::int64_t>::max()
                                  ? std::to_string(lo) + " or more"
                                  : std::to_string(lo) + " to " + std::to_string(hi);
    throw std::invalid_argument("--" + name + ": expected " + range + ", got " + std::to_string(v));
  }
  return v;
}

// --name as one of `allowed` (`fallback` when not given), or an error naming
// the option and the values it takes.
int int_one_of(const Args& args, const std::string& name, int fallback, std::span<const int> allowed) {
  const std::int64_t v = args.get_int(name, fallback);
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return static_cast<int>(v);
  std::vector<std::string> names;
  for (int a : allowed) names.push_back(std::to_string(a));
  throw std::invalid_argument("--" + name + ": expected " + one_of(names) + ", got " + std::to_string(v));
}

// Rows (--T) and keys (--N): the library indexes keys with int32.
constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();

std::uint64_t seed_of(const Args& args) {
  return static_cast<std::uint64_t>(int_in(args, "seed", 1, 0, std::numeric_limits<std::int64_t>::max()));
}

// CPU worker threads (0: every hardware thread) of the CPU backend and the
// verification.
constexpr std::int64_t kMaxThreads = 4096;
int threads_of(const Args& args) { return static_cast<int>(int_in(args, "threads", 0, 0, kMaxThreads)); }

// --backend cuda needs a usable GPU: without one the command stops before it
// generates anything, saying why (exit code 1: the machine, not the usage).
void require_backend(Backend backend) {
  std::string why;
  if (backend == Backend::kCuda && !cuda_backend_available(Operator::kIndexerTopk, &why)) {
    throw std::runtime_error("--backend cuda: " + why + "; --backend cpu runs the CPU reference");
  }
}

// --------------------------------------------------------------- running ---

struct RunResult {
  Status status;
  tools::TopkOutput out;
  std::vector<double> ms;  // one entry per timed repetition
  double median_ms() const {
    if (ms.empty()) return 0;
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};

// The operator each problem is for, on host pointers; its output rows.
Status run_host(const IndexerProblem& prob, std::int32_t* indices, float* values, const SelectOptions& options,
                const ExecutionContext& ctx) {
  return indexer_topk(prob.params(indices, values, options), ctx);
}
Status run_host(const ScoresProblem& prob, std::int32_t* indices, float* values, const SelectOptions& options,
                const ExecutionContext& ctx) {
  return topk(prob.params(indices, values, options), ctx);
}
Status run_host(const tools::PagedProblem& prob, std::int32_t* indices, float* values, const SelectOptions& options,
                const ExecutionContext& ctx) {
  return indexer_topk_paged(prob.params(indices, values, options, /*physical_slots=*/false), ctx);
}
Status run_host(const tools::MergeProblem& prob, std::int32_t* indices, float* values, const SelectOptions& options,
                const ExecutionContext& ctx) {
  return merge_topk(prob.params(indices, values, options), ctx);
}
std::int64_t rows_of(const IndexerProblem& prob) { return prob.T; }
std::int64_t rows_of(const ScoresProblem& prob) { return prob.T; }
std::int64_t rows_of(const tools::PagedProblem& prob) { return prob.rows(); }
std::int64_t rows_of(const tools::MergeProblem& prob) { return prob.R; }

template <typename Problem>
RunResult run_operator(const Problem& prob, const SelectOptions& options, bool want_values, Backend backend,
                       int threads, int reps) {
  RunResult r;
  r.out.T = rows_of(prob);
  r.out.K = options.k;
  if (backend == Backend::kCuda) {
    r.status = run_on_device(prob, options, want_values, reps, &r.out, &r.ms);
    return r;
  }
  r.out.indices.assign(static_cast<std::size_t>(r.out.T * options.k), -2);  // poison
  if (want_values) r.out.values.assign(r.out.indices.size(), 0.0f);
  ExecutionContext ctx;
  ctx.num_threads = threads;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    r.status = run_host(prob, r.out.indices.data(), want_values ? r.out.values.data() : nullptr, options, ctx);
    r.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (!r.status.ok()) break;
  }
  return r;
}

// ---------------------------------------------------------------- tables ---

struct Row {
  std::string op, dist, layout, backend, result;
  std::int64_t T = 0, N = 0;
  int K = 0;
  std::int64_t pairs = 0;
  double ms = 0;       // median; for the CUDA indexer, the fused operator (every stage)
  double cub_ms = 0;   // in-run baseline (topk --baselines): CUB segmented radix sort
  double read_ms = 0;  // in-run baseline (topk --baselines): one read of the rows (time_read_once)
  int heads = 64;      // H, for the FLOP count of scoring ops
  // CUDA indexer only, same inputs in the same run (0 = not measured):
  double unfused_ms = 0;  // indexer_scores + topk
  double math_ms = 0;     // the fused kernel's math-only control
  std::string route = "";  // the operator's route: "fused" (its stages) or "unfused" (batches + standalone top-k)
};

bool is_topk(const Row& r) { return r.op == "topk"; }

// Scoring ops: TFLOP/s; top-k: TB/s of scores read (4 bytes per pair).
double rate_of(const Row& r) {
  if (r.ms <= 0) return 0;
  return is_topk(r) ? 4.0 * r.pairs / (r.ms * 1e9) : r.pairs * flop_per_pair(r.heads) / (r.ms * 1e9);
}

// Percent of the in-run ceiling (FP8 GEMM for scoring ops, copy bandwidth
// for top-k), or 0 when not measured.
double percent_of_ceiling(const Row& r, const GpuCeilings* ceilings) {
  if (!ceilings || !ceilings->measured) return 0;
  const double ceiling = is_topk(r) ? ceilings->copy_tb_s : ceilings->fp8_tflops;
  return ceiling > 0 ? 100.0 * rate_of(r) / ceiling : 0;
}

// A table cell: `v` with `precision` decimals, or "-" where there is nothing
// to show.
std::string cell(bool shown, double v, int precision) { return shown ? fmt::format("{:.{}f}", v, precision) : "-"; }

// The columns every row has; baselines and the fused indexer's add theirs.
constexpr const char* kRowColumns = "{:<8} {:<14} {:<17} {:<5} {:>6} {:>8} {:>5} {:>10} {:>9} {:>10} {:>9} {:<8} {:>7}";
constexpr const char* kBaselineColumns = " {:>9} {:>7} {:>9} {:>6}";
constexpr const char* kFusedColumns = " {:>10} {:>6} {:>9} {:>9} {:<6}";

// Scoring ops report TFLOP/s against the FP8 ceiling; top-k reports the rate
// it reads the scores (4 bytes per pair) against the copy ceiling. CUDA
// indexer rows add the unfused pipeline and the math-only control.
void print_table(const std::vector<Row>& rows, const GpuCeilings* ceilings) {
  const bool baselines = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.cub_ms > 0; });
  const bool fused = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.unfused_ms > 0; });
  if (fused) {
    fmt::print("\nindexer on cuda: ms = fused operator (every stage); unfused = indexer_scores + topk; "
               "xunf = unfused / fused;\nmath = fused math-only control; sel = ms - math (exposed selection);\n"
               "route: the operator's route by shape (unfused: rows scored in bounded batches, then the standalone "
               "top-k; sel is then ms less the fused kernel's matrix work)\n");
  }
  fmt::print("\n");
  fmt::print(kRowColumns, "op", "dist", "layout", "back", "T", "N", "K", "pairs", "ms", "Mpairs/s", "rate", "unit",
             "%ceil");
  if (baselines) fmt::print(kBaselineColumns, "CUB ms", "xCUB", "read ms", "xread");
  if (fused) fmt::print(kFusedColumns, "unfused ms", "xunf", "math ms", "sel ms", "route");
  fmt::print("  result\n");
  for (const Row& r : rows) {
    const bool timed = r.ms > 0;
    const double rate = rate_of(r);
    const double percent = percent_of_ceiling(r, ceilings);
    fmt::print(kRowColumns, r.op, r.dist, r.layout, r.backend, r.T, r.N, r.K, r.pairs, cell(timed, r.ms, 3),
               cell(timed, r.pairs / (r.ms * 1e3), 2), cell(timed, rate, rate < 1 ? 4 : 1),
               is_topk(r) ? "TB/s rd" : "TFLOP/s", cell(timed && percent > 0, percent, 1));
    if (baselines) {
      fmt::print(kBaselineColumns, cell(r.cub_ms > 0, r.cub_ms, 3), cell(r.cub_ms > 0 && timed, r.cub_ms / r.ms, 2),
                 cell(r.read_ms > 0, r.read_ms, 4), cell(r.read_ms > 0 && timed, r.ms / r.read_ms, 2));
    }
    if (fused) {
      fmt::print(kFusedColumns, cell(r.unfused_ms > 0, r.unfused_ms, 3),
                 cell(timed && r.unfused_ms > 0, r.unfused_ms / r.ms, 2), cell(r.math_ms > 0, r.math_ms, 3),
                 cell(timed && r.math_ms > 0, r.ms - r.math_ms, 3), r.route.empty() ? "-" : r.route);
    }
    fmt::print("  {}\n", r.result);
  }
}

// The bench's JSON file: the in-run ceilings, the rest setting, the rows.
void write_bench_json(const std::string& path, const GpuCeilings& ceilings, nlohmann::json rows) {
  nlohmann::json j;
  j["ceilings"] = {{"measured", ceilings.measured},     {"device", ceilings.device},
                   {"why_not", ceilings.why_not},       {"copy_tb_s", ceilings.copy_tb_s},
                   {"read_tb_s", ceilings.read_tb_s},   {"fp8_tflops", ceilings.fp8_tflops},
                   {"fp8_fast_tflops", ceilings.fp8_fast_tflops},
                   {"fp8_sustained_tflops", ceilings.fp8_sustained_tflops}};
  j["rest_ms"] = rest_ms();
  j["rows"] = std::move(rows);
  std::ofstream(path) << j.dump(2) << "\n";
}

void write_json(const std::string& path, const std::vector<Row>& rows, const GpuCeilings& ceilings) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json row = {{"op", r.op},         {"dist", r.dist},   {"layout", r.layout},
                          {"backend", r.backend}, {"T", r.T},         {"N", r.N},
                          {"K", r.K},           {"heads", r.heads}, {"pairs", r.pairs},
                          {"ms", r.ms},         {"cub_ms", r.cub_ms}, {"read_ms", r.read_ms},
                          {"rate", rate_of(r)},
                          {"rate_unit", is_topk(r) ? "TB/s read" : "TFLOP/s"},
                          {"pct_ceiling", percent_of_ceiling(r, &ceilings)}, {"result", r.result}};
    if (r.unfused_ms > 0) {
      row["fused_ms"] = r.ms;
      row["unfused_ms"] = r.unfused_ms;
      row["unfused_over_fused"] = r.ms > 0 ? r.unfused_ms / r.ms : 0.0;
      row["tflops"] = rate_of(r);
      row["pct_fp8_ceiling"] = percent_of_ceiling(r, &ceilings);
      row["math_only_ms"] = r.math_ms;
      row["exposed_selection_ms"] = r.ms - r.math_ms;
      row["route"] = r.route;
    }
    out.push_back(row);
  }
  write_bench_json(path, ceilings, std::move(out));
}

std::string backend_name(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

// --------------------------------------------------------- generating ---

// "12.5 GiB".
std::string bytes_text(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  for (; bytes >= 1024 && unit + 1 < std::size(kUnits); ++unit) bytes /= 1024;
  return fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

// What std::bad_alloc meant while generating `what`: how much it asked for
// and what to change.
std::string out_of_memory(const std::string& what, double bytes, const std::string& change) {
  return "out of host memory generating " + what + " (about " + bytes_text(bytes) + "): " + change;
}

constexpr const char* kSmallerRows = "a smaller --T or --N needs less";

IndexerProblem generate_indexer(const tools::ProblemSpec& spec) {
  try {
    return tools::make_indexer_problem(spec);
  } catch (const std::bad_alloc&) {
    const double row_bytes = static_cast<double>(spec.H) * (kHeadDim + sizeof(float));  // q, w
    const double key_bytes = kHeadDim + sizeof(float);                                    // k, k_scale
    throw std::runtime_error(out_of_memory("the indexer inputs q, w, k, k_scale for T=" + std::to_string(spec.T) +
                                               " N=" + std::to_string(spec.N) + " H=" + std::to_string(spec.H),
                                           spec.T * row_bytes + spec.N * key_bytes, kSmallerRows));
  }
}

ScoresProblem generate_scores(const tools::ProblemSpec& spec) {
  try {
    return tools::make_scores_problem(spec);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(out_of_memory("the fp32 score matrix [T, N] for T=" + std::to_string(spec.T) +
                                               " N=" + std::to_string(spec.N),
                                           static_cast<double>(spec.T) * spec.N * sizeof(float), kSmallerRows));
  }
}

// ---------------------------------------------------------- verifying ---

// A line on stderr every kPeriod while a long step runs, with the elapsed
// time and an estimate of the time left; none while it is younger than kQuiet.
class Progress {
 public:
  Progress(const char* what, std::int64_t total) : what_(what), total_(total) {}
  // `done` of the total are done: prints a line when one is due.
  void update(std::int64_t done) {
    const Clock::time_point now = Clock::now();
    if (now < next_ || done <= 0) return;
    next_ = now + kPeriod;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "  %s: %lld/%lld rows, %.0f s elapsed, ETA %.0f s\n", what_, static_cast<long long>(done),
                 static_cast<long long>(total_), elapsed, elapsed * static_cast<double>(total_ - done) / done);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kQuiet = std::chrono::seconds(2);
  static constexpr auto kPeriod = std::chrono::seconds(5);
  const char* what_;
  std::int64_t total_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point next_ = start_ + kQuiet;
};

// The scores of the rows from `first` on as the checker reads them (row t
// of the function is problem row first + t); called once per block, on the
// block's thread.
using BlockScoresFn = std::function<tools::RowScoresFn(std::int64_t first)>;

// The one checker over T rows split into blocks on `threads` threads (0:
// every hardware thread; the h200 grid's verification reads up to 512M
// scores per row of the table), with a progress line while it runs long;
// failures keep their row numbers.
tools::CheckReport check_in_parallel(std::int64_t T, const std::int32_t* ks, const std::int32_t* ke,
                                     const BlockScoresFn& block_scores, const SelectOptions& options,
                                     const tools::TopkOutput& out, int threads) {
  constexpr std::int64_t kMaxFailures = 8;
  constexpr auto kPoll = std::chrono::milliseconds(250);
  const std::int64_t block = std::max<std::int64_t>(1, (T + worker_count(threads) - 1) / worker_count(threads));
  const std::int64_t blocks = (T + block - 1) / block;
  std::vector<tools::CheckReport> reports(static_cast<std::size_t>(blocks));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(blocks));
  std::atomic<std::int64_t> rows_started{0};  // what the progress line counts
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;  // guarded by mutex
  // The blocks run on the shared workers (common/parallel.h) from a thread of
  // their own, so this one can print the progress line meanwhile.
  std::jthread runner([&] {
    parallel_items(blocks, threads, [&](std::int64_t b) {
      try {
        const std::int64_t first = b * block;
        const tools::RowScoresFn scores = block_scores(first);
        tools::CheckInput in;
        in.T = std::min(block, T - first);
        in.ks = ks + first;
        in.ke = ke + first;
        in.row_scores = [&](std::int64_t t) {
          ++rows_started;
          return scores(t);
        };
        in.indices = out.indices.data() + first * options.k;
        in.values = out.values.empty() ? nullptr : out.values.data() + first * options.k;
        in.options = options;
        reports[b] = tools::check_topk(in, kMaxFailures);
        for (tools::RowFailure& f : reports[b].failures) f.row += first;
      } catch (...) {
        errors[b] = std::current_exception();
      }
    });
    const std::lock_guard<std::mutex> lock(mutex);
    done = true;
    finished.notify_one();
  });
  Progress progress("verifying", T);
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (!finished.wait_for(lock, kPoll, [&] { return done; })) progress.update(rows_started);
  }
  runner.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  tools::CheckReport total;
  for (tools::CheckReport& r : reports) {
    total.rows_checked += r.rows_checked;
    total.rows_failed += r.rows_failed;
    for (tools::RowFailure& f : r.failures) {
      if (static_cast<std::int64_t>(total.failures.size()) < kMaxFailures) total.failures.push_back(std::move(f));
    }
  }
  return total;
}

// The checker against a dense [T, stride] score matrix: row t's candidates
// at columns [ks[t], ke[t]).
tools::CheckReport check_dense_in_parallel(std::int64_t T, const std::int32_t* ks, const std::int32_t* ke,
                                           const float* scores, std::int64_t stride, const SelectOptions& options,
                                           const tools::TopkOutput& out, int threads) {
  const BlockScoresFn block_scores = [&](std::int64_t first) {
    return tools::dense_row_scores(scores + first * stride, stride, ks + first, ke + first);
  };
  return check_in_parallel(T, ks, ke, block_scores, options, out, threads);
}

// Judges an indexer result against the operator's own fp32 scores (contract
// section 2): the CPU reference's on the CPU backend, row by row; on the CUDA
// backend the scoring kernel's, which are bit-identical to the fused
// operator's and differ from the CPU's in the last bits (tensor-core
// accumulation).
tools::CheckReport check_indexer(const IndexerProblem& prob, const SelectOptions& options,
                                 const tools::TopkOutput& out, Backend backend, int threads) {
  if (backend == Backend::kCuda) {
    std::vector<float> scores;
    std::vector<double> ms;
    const Status st = run_scores_on_device(prob, 1, &scores, &ms);
    if (!st.ok()) {
      tools::CheckReport failed;
      failed.rows_failed = 1;
      failed.failures.push_back({0, "scoring the judge's scores on the device: " + st.to_string()});
      return failed;
    }
    return check_dense_in_parallel(prob.T, prob.ks.data(), prob.ke.data(), scores.data(), prob.N, options, out,
                                   threads);
  }
  const IndexerTopkParams p = prob.params(nullptr, nullptr, options);
  const reference::DecodedKeys keys(p, threads);
  const BlockScoresFn block_scores = [&](std::int64_t first) -> tools::RowScoresFn {
    // check_topk uses each row's span before it asks for the next.
    auto row = std::make_shared<std::vector<float>>();
    return [&p, &keys, first, row](std::int64_t t) {
      reference::score_row(p, keys, first + t, row.get());
      return std::span<const float>(*row);
    };
  };
  return check_in_parallel(prob.T, prob.ks.data(), prob.ke.data(), block_scores, options, out, threads);
}

// One problem: run (timed), verify; progress on stderr.
template <typename Problem>
Row run_case(const Problem& prob, const std::string& op, Distribution dist, Layout layout,
             const SelectOptions& options, bool values, Backend backend, int threads, int reps, bool check,
             int index, int total) {
  std::fprintf(stderr, "[%d/%d] %s %s/%s T=%lld N=%lld K=%d on %s ...\n", index, total, op.c_str(),
               std::string(tools::to_string(dist)).c_str(), std::string(tools::to_string(layout)).c_str(),
               static_cast<long long>(prob.T), static_cast<long long>(prob.N), options.k,
               backend_name(backend).c_str());
  Row row{op, std::string(tools::to_string(dist)), std::string(tools::to_string(layout)), backend_name(backend),
          "", prob.T, prob.N, options.k, prob.valid_pairs(), 0};
  if constexpr (std::is_same_v<Problem, IndexerProblem>) row.heads = prob.H;
  const RunResult r = run_operator(prob, options, values, backend, threads, reps);
  if (!r.status.ok()) {
    row.result = r.status.to_string();
    return row;
  }
  row.ms = r.median_ms();
  if (!check) {
    row.result = "not verified";
    return row;
  }
  tools::CheckReport report;
  if constexpr (std::is_same_v<Problem, IndexerProblem>) {
    report = check_indexer(prob, options, r.out, backend, threads);
  } else {
    report = check_dense_in_parallel(prob.T, prob.ks.data(), prob.ke.data(), prob.scores.data(), prob.stride,
                                     options, r.out, threads);
  }
  row.result = report.ok() ? "exact" : "WRONG: " + report.summary();
  return row;
}

// The CUDA scoring kernel alone, timed; its exactness is the GPU tests'
// business (bit-exact on small integers, bounded error otherwise).
Row run_scores_case(const IndexerProblem& prob, Distribution dist, int reps, int index, int total) {
  std::fprintf(stderr, "[%d/%d] scores %s T=%lld N=%lld ...\n", index, total,
               std::string(tools::to_string(dist)).c_str(), static_cast<long long>(prob.T),
               static_cast<long long>(prob.N));
  Row row{"scores", std::string(tools::to_string(dist)), "causal-suffix", "cuda", "", prob.T, prob.N,
          0, prob.valid_pairs(), 0};
  row.heads = prob.H;
  std::vector<double> ms;
  const Status st = run_scores_on_device(prob, reps, nullptr, &ms);
  if (!st.ok()) {
    row.result = st.to_string();
    return row;
  }
  std::sort(ms.begin(), ms.end());
  row.ms = ms[ms.size() / 2];
  row.result = "timed";
  return row;
}

double median(std::vector<double> ms) {
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Where two results of the same options differ, or "" when they are
// identical: indices equal and values bit-equal, slot by slot when
// `same_order`, else as each row's set of (index, value bits); the results
// are named a_name and b_name.
std::string first_difference(const tools::TopkOutput& a, const tools::TopkOutput& b, bool same_order,
                             const std::string& a_name, const std::string& b_name) {
  if (a.indices.size() != b.indices.size() || a.values.size() != b.values.size()) return "output sizes differ";
  const bool values = !a.values.empty();
  using Slot = std::pair<std::int32_t, std::uint32_t>;
  std::vector<Slot> ra(a.K), rb(a.K);
  for (std::int64_t t = 0; t < a.T; ++t) {
    for (int i = 0; i < a.K; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * a.K + i;
      ra[i] = {a.indices[at], values ? std::bit_cast<std::uint32_t>(a.values[at]) : 0u};
      rb[i] = {b.indices[at], values ? std::bit_cast<std::uint32_t>(b.values[at]) : 0u};
    }
    if (!same_order) {
      std::sort(ra.begin(), ra.end());
      std::sort(rb.begin(), rb.end());
    }
    const auto diff = std::mismatch(ra.begin(), ra.end(), rb.begin());
    if (diff.first != ra.end()) {
      const auto i = diff.first - ra.begin();
      return "row " + std::to_string(t) + (same_order ? " slot " : " index-sorted slot ") + std::to_string(i) +
             ": " + a_name + " " + std::to_string(diff.first->first) + ", " + b_name + " " +
             std::to_string(diff.second->first) +
             (values && diff.first->first == diff.second->first ? " (values differ)" : "");
    }
  }
  return "";
}

// The CUDA indexer: the fused operator timed beside our unfused pipeline and
// the fused kernel's math-only control, in one run on the same inputs. The
// fused result is verified against the unfused one: identical with
// smallest-index ties; with kAny ties, a valid top-k of the unfused scores
// (bit-identical to the fused scores by contract), by the one checker.
Row run_indexer_cuda_case(const IndexerProblem& prob, Distribution dist, Layout layout, const SelectOptions& options,
                          bool values, int reps, bool check, int threads, const IndexerBenchHooks& bench_hooks,
                          int index, int total) {
  std::fprintf(stderr, "[%d/%d] indexer %s/%s T=%lld N=%lld K=%d on cuda: fused, unfused, math-only ...\n", index,
               total, std::string(tools::to_string(dist)).c_str(), std::string(tools::to_string(layout)).c_str(),
               static_cast<long long>(prob.T), static_cast<long long>(prob.N), options.k);
  Row row{"indexer", std::string(tools::to_string(dist)), std::string(tools::to_string(layout)), "cuda", "",
          prob.T, prob.N, options.k, prob.valid_pairs(), 0};
  row.heads = prob.H;
  const bool any_ties = options.ties == TieBreak::kAny;
  IndexerComparison cmp;
  const Status st = compare_indexer_on_device(prob, options, values, reps, check && any_ties, bench_hooks, &cmp);
  if (!st.ok()) {
    row.result = st.to_string();
    return row;
  }
  row.ms = median(cmp.fused_ms);
  row.unfused_ms = median(cmp.unfused_ms);
  row.math_ms = median(cmp.math_ms);
  row.route = cmp.took_unfused_route ? "unfused" : "fused";
  if (!check) {
    row.result = "not verified";
    return row;
  }
  if (any_ties) {
    const tools::CheckReport report = check_dense_in_parallel(prob.T, prob.ks.data(), prob.ke.data(),
                                                              cmp.scores.data(), prob.N, options, cmp.fused, threads);
    row.result = report.ok() ? "exact" : "WRONG: " + report.summary();
  } else {
    const std::string diff = first_difference(cmp.fused, cmp.unfused, options.sorted, "fused", "unfused");
    row.result = diff.empty() ? "exact" : "WRONG: fused != unfused: " + diff;
  }
  return row;
}

tools::ProblemSpec spec_from(const Args& args, Distribution dist, Layout layout) {
  tools::ProblemSpec spec;
  spec.dist = dist;
  spec.layout = layout;
  spec.T = int_in(args, "T", 64, 0, kMaxSize);
  spec.N = int_in(args, "N", 16384, 0, kMaxSize);
  spec.H = int_one_of(args, "heads", 64, kSupportedHeads);
  spec.K = static_cast<int>(args.get_int("K", 2048));
  spec.seed = seed_of(args);
  return spec;
}

// A bench row that passed: exact, or timed and not verified (--no-verify,
// the scoring kernel alone, a decode row too large to judge).
bool passed(const std::string& result) {
  return result == "exact" || result == "timed" || result.rfind("not verified", 0) == 0;
}

bool all_exact(const std::vector<Row>& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.result == "exact"; });
}

// ------------------------------------------------------- bench settings ---

constexpr std::int64_t kMaxReps = 100'000;

// --reps, --warm-l2 and --rest-ms, set for this process; returns reps.
int timing_settings(const Args& args, Backend backend) {
  const int reps = static_cast<int>(int_in(args, "reps", backend == Backend::kCpu ? 3 : 20, 1, kMaxReps));
  set_cold_l2(!args.flag("warm-l2"));
  const std::int64_t rest = args.get_int("rest-ms", 0);
  if (rest < 0 || rest > 10'000) throw std::invalid_argument("--rest-ms: expected 0 to 10000 milliseconds");
  if (rest > 0 && backend != Backend::kCuda) throw std::invalid_argument("--rest-ms: rests the GPU (--backend cuda)");
  set_rest_ms(static_cast<int>(rest));
  return reps;
}

GpuCeilings ceilings_for(Backend backend) {
  if (backend != Backend::kCuda) return {};
  std::fprintf(stderr, "measuring GPU ceilings (copy and read bandwidth, cuBLASLt FP8 GEMM) ...\n");
  return measure_gpu_ceilings();
}

// The ceilings the CUDA rows are judged against and how they were timed.
void print_timing_notes(const GpuCeilings& ceilings, int reps) {
  if (ceilings.measured) {
    std::printf("\n%s\nceilings (this run): copy %.2f TB/s, read %.2f TB/s, FP8 GEMM %.0f TFLOP/s (fast accumulation "
                "%.0f)\n",
                ceilings.device.c_str(), ceilings.copy_tb_s, ceilings.read_tb_s, ceilings.fp8_tflops,
                ceilings.fp8_fast_tflops);
    if (ceilings.fp8_sustained_tflops > 0) {
      std::printf("  FP8 GEMM sustained (after 0.3 s of back-to-back GEMMs, at the clock the 700 W cap leaves): "
                  "%.0f TFLOP/s; %%ceil is of the burst rate above\n",
                  ceilings.fp8_sustained_tflops);
    }
  } else {
    std::printf("\nceilings not measured: %s\n", ceilings.why_not.c_str());
  }
  if (rest_ms() > 0) {
    std::printf("rest: the GPU idled %d ms before each timed call (--rest-ms): rows ran at a rested card's "
                "clock\n", rest_ms());
  }
  std::printf("timing: CUDA events around each call, median of %d after a warm-up; %s\n", reps,
              cold_l2() ? "L2 flushed before each call (inputs read from device memory; --warm-l2 keeps them)"
                        : "L2 warm (--warm-l2: inputs where the previous call left them)");
}

// --------------------------------------------------------------- decode ---
//
// indexer_topk_paged: B requests of next_n query tokens each, every request
// of a row L keys long (1-D context_lens), each request's keys in cache
// blocks of its own (tools::make_paged_problem), so a call reads B * L
// distinct keys.

struct DecodeShape {
  std::int64_t B = 1;  // requests
  int next_n = 1;      // query tokens per request
  std::int64_t L = 1;  // every request's context length
};

// The decode grid (--grid decode): B x next_n x L, plus 1M-key contexts for
// the small batches.
constexpr std::int64_t kDecodeBatches[] = {1, 4, 32, 128, 256};
constexpr std::int64_t kDecodeNextN[] = {1, 2, 4};
constexpr std::int64_t kDecodeContexts[] = {8192, 32768, 131072};
constexpr std::int64_t kLongContext = std::int64_t{1} << 20;
constexpr std::int64_t kLongContextMaxBatch = 4;
// check --op decode's shape where --B, --next-n, --L are not given: a few
// requests whose last blocks are partial.
constexpr DecodeShape kDecodeCheckShape{3, 2, 5000};
// The generator draws one problem of all B * L keys, int32-indexed.
constexpr std::int64_t kMaxDecodeKeys = std::numeric_limits<std::int32_t>::max();
// The judge's scores are [B * next_n, L] fp32 on the host: rows past 1 GiB
// of them (twice the grid's largest) are not verified.
constexpr std::int64_t kMaxJudgedScores = std::int64_t{1} << 28;
// The CUDA operator's routes (src/decode/decode.cu, the plan picks): the
// scoring kernel writes a bounded buffer of scores and the standalone top-k
// selects from it, or the scoring kernel also counts the score keys' top
// bits and the fused select kernel takes each row's top K.
constexpr const char* kDecodeUnfused = "unfused";
constexpr const char* kDecodeFusedSelect = "fused-select";
constexpr const char* kDecodeStreamSelect = "stream-select";  // pinned only (decode::PagedHooks)
constexpr const char* kDecodeBarSelect = "bar-select";        // pinned only
// Bytes of one cached key: D FP8 bytes and an fp32 scale.
constexpr std::int64_t kCachedKeyBytes = kHeadDim + sizeof(float);

struct DecodeSettings {
  int block_size = 64;
  std::int64_t table_keys = 0;  // --table-keys: keys the table covers a request (0: each shape's L)
  bool stale_table = false;     // --stale-table: PagedSpec::stale_table
  int heads = 64;
  std::uint64_t seed = 1;
  SelectOptions options;
  bool values = false;
  Backend backend = Backend::kCpu;
  int threads = 0;
  int reps = 1;
  bool check = true;
  decode::PagedHooks hooks;  // --route: by shape, or pinned (CUDA)
};

struct DecodeRow {
  std::string dist, backend, result;
  DecodeShape shape;
  int block_size = 64, K = 0, heads = 64;
  double ms = 0;  // median of the timed calls; 0 = not timed
  const char* route = kDecodeUnfused;  // the CUDA operator's (decode::make_plan)
  // CUDA, route by shape: the pinned routes and the math-only control timed
  // beside the operator (0: not timed, as fused_ms and stream_ms are where
  // their route cannot take the call).
  double unfused_ms = 0, fused_ms = 0, math_ms = 0, stream_ms = 0, bar_ms = 0;
  double bar_entries = 0;  // the bar selection's entries over the keys (PagedComparison)
  std::int64_t bar_repaired = 0;
  std::int64_t bar_stored = 0;

  // What a call reads: every request's ceil(L / bs) blocks of bs cached
  // keys, then q and w.
  double bytes() const {
    const std::int64_t blocks = (shape.L + block_size - 1) / block_size;
    const double tokens = static_cast<double>(shape.B) * shape.next_n;
    return static_cast<double>(shape.B) * blocks * block_size * kCachedKeyBytes +
           tokens * heads * (kHeadDim + sizeof(float));
  }
  double flops() const {
    return flop_per_pair(heads) * static_cast<double>(shape.B) * shape.next_n * static_cast<double>(shape.L);
  }
};

// A decode row against the in-run ceilings: its rate, and the time it would
// take at each ceiling (0 where not measured).
struct DecodeBounds {
  double gb_s = 0, pct_read = 0, hbm_ms = 0, fp8_ms = 0;
  double target_ms = 0;  // issue #34's target for the row (decode_target_ms); 0: none
  const char* bound() const { return hbm_ms == 0 && fp8_ms == 0 ? "-" : hbm_ms >= fp8_ms ? "hbm" : "fp8"; }
};

// The targets of issue #34 (docs/perf-log.md, "Decode") a row has, in ms at
// the in-run ceilings (0: the row has none, or a ceiling it needs was not
// measured):
//   B >= 32, L >= 32K, next_n <= 2: the cache read at 90 % of the read ceiling;
//   the same at next_n = 4: 1.2x the larger of that and the FLOPs at 75 % of
//     the FP8 GEMM rate;
//   B = 1, L = 128K, next_n = 1: 12 us;
//   B = 4, L = 1M, next_n = 1: 1.2x the cache read at the read ceiling.
constexpr double kTargetReadShare = 0.90, kTargetFp8Share = 0.75, kTargetSlack = 1.2;
constexpr double kTargetOneRequestMs = 0.012;
double decode_target_ms(const DecodeShape& s, double hbm_ms, double fp8_ms) {
  if (s.B >= 32 && s.L >= 32768 && hbm_ms > 0) {
    if (s.next_n <= 2) return hbm_ms / kTargetReadShare;
    if (s.next_n == 4 && fp8_ms > 0) return kTargetSlack * std::max(hbm_ms / kTargetReadShare, fp8_ms / kTargetFp8Share);
  }
  if (s.B == 1 && s.next_n == 1 && s.L == 131072) return kTargetOneRequestMs;
  if (s.B == 4 && s.next_n == 1 && s.L == kLongContext && hbm_ms > 0) return kTargetSlack * hbm_ms;
  return 0;
}

DecodeBounds decode_bounds(const DecodeRow& r, const GpuCeilings* ceilings) {
  DecodeBounds b;
  if (r.ms > 0) b.gb_s = r.bytes() / (r.ms * 1e6);
  if (ceilings && ceilings->measured) {
    if (ceilings->read_tb_s > 0) {
      b.pct_read = 100.0 * b.gb_s / (ceilings->read_tb_s * 1e3);
      b.hbm_ms = r.bytes() / (ceilings->read_tb_s * 1e9);
    }
    if (ceilings->fp8_tflops > 0) b.fp8_ms = r.flops() / (ceilings->fp8_tflops * 1e9);
  }
  b.target_ms = decode_target_ms(r.shape, b.hbm_ms, b.fp8_ms);
  return b;
}

// Options that belong to one kind of operator or backend: given where they
// do not apply, an error naming the option.
void reject_inapplicable(const Args& args, const std::string& op, Backend backend) {
  const bool decode = op == "decode";
  const bool merge = op == "merge";
  for (const std::string name : {"P", "R", "part-k"}) {
    if (!merge && args.flag(name)) throw std::invalid_argument("--" + name + ": the merge option (--op merge)");
  }
  for (const std::string name : {"T", "N", "layout", "relative", "baselines", "route", "heads", "grid"}) {
    if (merge && args.flag(name)) {
      throw std::invalid_argument("--" + name + ": not an option of --op merge (its shape: --P, --R, --part-k, --K)");
    }
  }
  for (const std::string name : {"values", "sorted"}) {
    if (merge && args.flag(name)) {
      throw std::invalid_argument("--" + name + ": --op merge always returns values, sorted");
    }
  }
  for (const std::string name : {"B", "next-n", "L", "block-size", "table-keys", "stale-table"}) {
    if (!decode && args.flag(name)) throw std::invalid_argument("--" + name + ": the decode option (--op decode)");
  }
  for (const std::string name : {"T", "N", "layout", "relative", "baselines"}) {
    if (decode && args.flag(name)) {
      throw std::invalid_argument("--" + name + ": not an option of --op decode (its shape: --B, --next-n, --L)");
    }
  }
  if (op == "topk" && args.flag("heads")) {
    throw std::invalid_argument("--heads: not an option of --op topk (it selects from generated scores)");
  }
  for (const std::string name : {"deterministic", "relative", "sorted", "values"}) {
    if (op == "scores" && args.flag(name)) {
      throw std::invalid_argument("--" + name + ": a selection option; --op scores times the scoring kernel alone");
    }
  }
  if (op == "scores" && backend != Backend::kCuda) {
    throw std::invalid_argument("--op scores: times the CUDA scoring kernel (--backend cuda)");
  }
  if (args.flag("baselines") && (op != "topk" || backend != Backend::kCuda)) {
    throw std::invalid_argument("--baselines: times CUB beside the CUDA top-k (--op topk --backend cuda)");
  }
  if (args.flag("warm-l2") && backend != Backend::kCuda) {
    throw std::invalid_argument("--warm-l2: keeps the GPU's L2 warm (--backend cuda)");
  }
}

// bench (grid): the decode grid, each of --B, --next-n, --L replacing its
// axis by one value (all three: one row); check: one shape,
// kDecodeCheckShape where not given.
std::vector<DecodeShape> decode_shapes(const Args& args, bool grid) {
  if (grid && args.flag("grid") && args.get("grid", "") != "decode") {
    throw std::invalid_argument("--grid: --op decode runs the decode grid, got '" + args.get("grid", "") + "'");
  }
  std::vector<std::int64_t> batches(std::begin(kDecodeBatches), std::end(kDecodeBatches));
  std::vector<std::int64_t> tokens(std::begin(kDecodeNextN), std::end(kDecodeNextN));
  std::vector<std::int64_t> contexts(std::begin(kDecodeContexts), std::end(kDecodeContexts));
  if (!grid) {
    batches = {kDecodeCheckShape.B};
    tokens = {kDecodeCheckShape.next_n};
    contexts = {kDecodeCheckShape.L};
  }
  if (args.flag("B")) batches = {int_in(args, "B", 1, 1, kMaxDecodeKeys)};
  if (args.flag("next-n")) tokens = {int_in(args, "next-n", 1, 1, kMaxNextN)};
  if (args.flag("L")) contexts = {int_in(args, "L", 1, 1, kMaxDecodeKeys)};
  std::vector<DecodeShape> shapes;
  for (const std::int64_t B : batches) {
    for (const std::int64_t next_n : tokens) {
      std::vector<std::int64_t> lengths = contexts;
      if (grid && !args.flag("L") && B <= kLongContextMaxBatch) lengths.push_back(kLongContext);
      for (const std::int64_t L : lengths) {
        if (B * L > kMaxDecodeKeys) {
          throw std::invalid_argument("--B, --L: B * L = " + std::to_string(B * L) + " keys, more than " +
                                      std::to_string(kMaxDecodeKeys));
        }
        shapes.push_back({B, static_cast<int>(next_n), L});
      }
    }
  }
  return shapes;
}

DecodeSettings decode_settings(const Args& args, Backend backend) {
  DecodeSettings s;
  s.block_size = int_one_of(args, "block-size", 64, kSupportedBlockSizes);
  s.heads = int_one_of(args, "heads", 64, kSupportedHeads);
  if (args.flag("table-keys")) s.table_keys = int_in(args, "table-keys", 1, 1, kMaxDecodeKeys);
  s.stale_table = args.flag("stale-table");
  s.seed = seed_of(args);
  s.options = parse_options(args);
  s.values = args.flag("values");
  s.backend = backend;
  s.threads = threads_of(args);
  if (args.flag("route")) {
    if (backend != Backend::kCuda) throw std::invalid_argument("--route: the CUDA operator's option (--backend cuda)");
    const std::string route = args.get("route", "by-shape");
    using Route = decode::PagedHooks::Route;
    if (route == kDecodeFusedSelect) {
      s.hooks.route = Route::kFusedSelect;
    } else if (route == kDecodeUnfused) {
      s.hooks.route = Route::kUnfused;
    } else if (route == kDecodeStreamSelect) {
      s.hooks.route = Route::kStreamSelect;
    } else if (route == kDecodeBarSelect) {
      s.hooks.route = Route::kBarSelect;
    } else if (route != "by-shape") {
      throw std::invalid_argument("--route: --op decode takes by-shape, " + std::string(kDecodeFusedSelect) + ", " +
                                  kDecodeStreamSelect + ", " + kDecodeBarSelect + " or " + kDecodeUnfused + ", got '" +
                                  route + "'");
    }
  }
  return s;
}

// "exact", "WRONG: ..." or why the row was not verified. The judge is the
// one checker over the scores paged_scores gives on the row's backend: on
// kCuda the scoring kernel's, bit-identical to the operator's own (the CPU
// reference's differ in the last bits: tensor-core accumulation).
// With several outputs (the operator and its pinned routes), each is judged
// against the same scores; the first wrong one names its side.
std::string judge_decode(const tools::PagedProblem& prob, const DecodeRow& row, const DecodeSettings& s,
                         const std::vector<std::pair<const char*, const tools::TopkOutput*>>& outs) {
  if (!s.check) return "not verified";
  const std::int64_t rows = prob.rows();
  if (rows * row.shape.L > kMaxJudgedScores) {
    return "not verified (size: B * next_n * L = " + std::to_string(rows * row.shape.L) + " scores to judge, over " +
           std::to_string(kMaxJudgedScores) + ")";
  }
  std::vector<float> scores;
  std::int64_t stride = 0;
  const Status st = paged_scores(prob, s.backend, s.threads, &scores, &stride);
  if (!st.ok()) return "judging: " + st.to_string();
  const PagedIndexerTopkParams p = prob.params(nullptr, nullptr, s.options, false);
  std::vector<std::int32_t> ks(static_cast<std::size_t>(rows), 0), ke(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    ke[r] = static_cast<std::int32_t>(reference::paged_row_length(p, r / prob.next_n, static_cast<int>(r % prob.next_n)));
  }
  for (const auto& [side, out] : outs) {
    const tools::CheckReport report =
        check_dense_in_parallel(rows, ks.data(), ke.data(), scores.data(), stride, s.options, *out, s.threads);
    if (!report.ok()) return std::string("WRONG") + (outs.size() > 1 ? std::string(" (") + side + ")" : "") + ": " +
                              report.summary();
  }
  return "exact";
}

// One decode row: generate, run (timed), verify; progress on stderr.
DecodeRow run_decode_case(const DecodeShape& shape, Distribution dist, const DecodeSettings& s, int index,
                          int total) {
  const std::string dist_name(tools::to_string(dist));
  std::fprintf(stderr, "[%d/%d] decode %s B=%lld next_n=%d L=%lld bs=%d K=%d on %s ...\n", index, total,
               dist_name.c_str(), static_cast<long long>(shape.B), shape.next_n, static_cast<long long>(shape.L),
               s.block_size, s.options.k, backend_name(s.backend).c_str());
  DecodeRow row{dist_name, backend_name(s.backend), "", shape, s.block_size, s.options.k, s.heads};
  tools::PagedSpec spec;
  spec.dist = dist;
  spec.B = shape.B;
  spec.next_n = shape.next_n;
  spec.H = s.heads;
  spec.block_size = s.block_size;
  spec.context_lens.assign(static_cast<std::size_t>(shape.B), static_cast<std::int32_t>(shape.L));
  if (s.table_keys > 0) {
    if (s.table_keys < shape.L) {
      row.result = "--table-keys " + std::to_string(s.table_keys) + " is shorter than L = " + std::to_string(shape.L);
      return row;
    }
    spec.min_table_blocks = (s.table_keys + s.block_size - 1) / s.block_size;
  }
  spec.stale_table = s.stale_table;
  spec.seed = s.seed;
  tools::PagedProblem prob;
  try {
    prob = tools::make_paged_problem(spec);
  } catch (const std::bad_alloc&) {  // the row fails; the grid goes on
    row.result = out_of_memory("the paged cache, q and w", row.bytes(), "a smaller --B or --L needs less");
    return row;
  } catch (const std::exception& e) {
    row.result = std::string("generating the problem: ") + e.what();
    return row;
  }
  const decode::PagedPlan plan = decode::make_plan(prob.params(nullptr, nullptr, s.options, false), s.hooks);
  row.route = plan.fused_select    ? kDecodeFusedSelect
              : plan.stream_select ? kDecodeStreamSelect
              : plan.bar_select    ? kDecodeBarSelect
                                   : kDecodeUnfused;
  if (s.backend == Backend::kCuda && s.hooks.route == decode::PagedHooks::Route::kByShape) {
    PagedComparison cmp;
    const Status st = compare_paged_on_device(prob, s.options, s.values, s.reps, &cmp);
    if (!st.ok()) {
      row.result = st.to_string();
      return row;
    }
    row.ms = median(cmp.op_ms);
    row.unfused_ms = median(cmp.unfused_ms);
    row.math_ms = median(cmp.math_ms);
    std::vector<std::pair<const char*, const tools::TopkOutput*>> outs = {{"operator", &cmp.op},
                                                                          {kDecodeUnfused, &cmp.unfused}};
    if (cmp.fused_possible) {
      row.fused_ms = median(cmp.fused_ms);
      outs.emplace_back(kDecodeFusedSelect, &cmp.fused);
    }
    if (cmp.stream_possible) {
      row.stream_ms = median(cmp.stream_ms);
      outs.emplace_back(kDecodeStreamSelect, &cmp.stream);
    }
    if (cmp.bar_possible) {
      row.bar_ms = median(cmp.bar_ms);
      row.bar_entries = cmp.bar_entry_fraction;
      row.bar_repaired = cmp.bar_repaired;
      row.bar_stored = cmp.bar_stored;
      outs.emplace_back(kDecodeBarSelect, &cmp.bar);
    }
    row.result = judge_decode(prob, row, s, outs);
    return row;
  }
  RunResult r;
  if (s.backend == Backend::kCuda) {
    r.out.T = prob.rows();
    r.out.K = s.options.k;
    r.status = run_paged_on_device(prob, s.options, s.values, s.reps, s.hooks, &r.out, &r.ms);
  } else {
    r = run_operator(prob, s.options, s.values, s.backend, s.threads, s.reps);
  }
  if (!r.status.ok()) {
    row.result = r.status.to_string();
    return row;
  }
  row.ms = r.median_ms();
  row.result = judge_decode(prob, row, s, {{"operator", &r.out}});
  return row;
}

constexpr const char* kDecodeColumns =
    "{:<14} {:<5} {:>5} {:>6} {:>8} {:>4} {:>5} {:>9} {:>8} {:>6} {:>8} {:>8} {:<5} {:>8} {:>6} {:<12} ";
// With the pinned routes and the control timed beside the operator: their ms
// and theirs / the operator's, then the control's ms and what it leaves.
constexpr const char* kDecodeRouteColumns = "{:>9} {:>6} {:>9} {:>6} {:>9} {:>6} {:>9} {:>6} {:>6} {:>5} {:>5} {:>9} {:>8} ";

void print_decode_table(const std::vector<DecodeRow>& rows, const GpuCeilings* ceilings) {
  fmt::print("\ndecode = indexer_topk_paged: B requests x next_n query tokens, each request L keys in cache blocks of "
             "bs; ms = median;\nGB/s = bytes / ms, bytes = the requests' cache blocks (ceil(L / bs) * bs * {} B "
             "each) + q + w; %read = of the in-run HBM read\nceiling; hbm ms = bytes at that ceiling; fp8 ms = "
             "2 * {} * H * next_n * L * B FLOP at the in-run FP8 GEMM rate (burst); bound =\nthe larger of the two; "
             "route {}: the CUDA operator scores into a bounded buffer, then runs the standalone top-k\n(our "
             "unfused pipeline, not timed apart); {}: the scoring kernel also counts each row's score keys\nby their "
             "top bits and a select kernel takes the top K (few one-token rows, any ties, unsorted)\n"
             "tgt ms = issue #34's target for the row at the in-run ceilings (B >= 32, L >= 32K: the read at 90 %, "
             "at next_n 4\n1.2x max(that, FLOPs at 75 % of the FP8 rate); 1 x 128K: 12 us; 4 x 1M: 1.2x the read); "
             "xtgt = ms / tgt ms (<= 1: met)\n",
             kCachedKeyBytes, kHeadDim, kDecodeUnfused, kDecodeFusedSelect);
  const bool routes = std::any_of(rows.begin(), rows.end(), [](const DecodeRow& r) { return r.unfused_ms > 0; });
  if (routes) {
    fmt::print("unf ms, fsel ms: two of the routes pinned, timed call by call in turn with the operator (fsel: where "
               "the fused\nselection can take the call); xunf, xfsel = their ms / the operator's. A side's place in\nthe round can "
               "move calls of tens of us by several % (docs/perf-log.md, B41): compare such rows by --route runs "
               "in turn\n"
               "math ms: the math-only control (the scoring launches with every score folded into a checksum: no "
               "score\nstored, no top-k); sel ms = ms - math ms, what the selection and the scores' round trip "
               "expose\n"
               "ssel ms: the streaming selection pinned (one-token rows, any ties, unsorted: each row piece's top K "
               "kept in\nthe scoring kernel's shared memory, no scores stored, no top-k launch); xssel = its ms / the "
               "operator's\n"
               "bsel ms: the bar selection pinned (one-token rows of 64 heads: the scoring kernel keeps only the "
               "scores at or\nabove a bar raised from its own counts, the standalone top-k takes the top K from "
               "them); xbsel = its ms / the operator's;\nbent % = the entries it kept, % of the keys of the rows that "
               "kept entries; brep = rows it repaired (none: an area\nholds a whole row); bsto = rows that stored "
               "their scores instead (shorter than the route's threshold)\n");
  }
  fmt::print("\n");
  fmt::print(kDecodeColumns, "dist", "back", "B", "next_n", "L", "bs", "K", "ms", "GB/s", "%read", "hbm ms", "fp8 ms",
             "bound", "tgt ms", "xtgt", "route");
  if (routes) {
    fmt::print(kDecodeRouteColumns, "unf ms", "xunf", "fsel ms", "xfsel", "ssel ms", "xssel", "bsel ms", "xbsel",
               "bent %", "brep", "bsto", "math ms", "sel ms");
  }
  fmt::print(" result\n");
  for (const DecodeRow& r : rows) {
    const DecodeBounds b = decode_bounds(r, ceilings);
    fmt::print(kDecodeColumns, r.dist, r.backend, r.shape.B, r.shape.next_n, r.shape.L, r.block_size, r.K,
               cell(r.ms > 0, r.ms, 3), cell(b.gb_s > 0, b.gb_s, b.gb_s < 10 ? 3 : 0),
               cell(b.pct_read > 0, b.pct_read, 1), cell(b.hbm_ms > 0, b.hbm_ms, 4), cell(b.fp8_ms > 0, b.fp8_ms, 4),
               b.bound(), cell(b.target_ms > 0, b.target_ms, 4),
               cell(b.target_ms > 0 && r.ms > 0, r.ms / b.target_ms, 2), r.backend == "cuda" ? r.route : "-");
    if (routes) {
      const bool timed = r.ms > 0;
      fmt::print(kDecodeRouteColumns, cell(r.unfused_ms > 0, r.unfused_ms, 3),
                 cell(timed && r.unfused_ms > 0, r.unfused_ms / r.ms, 2), cell(r.fused_ms > 0, r.fused_ms, 3),
                 cell(timed && r.fused_ms > 0, r.fused_ms / r.ms, 2), cell(r.stream_ms > 0, r.stream_ms, 3),
                 cell(timed && r.stream_ms > 0, r.stream_ms / r.ms, 2), cell(r.bar_ms > 0, r.bar_ms, 3),
                 cell(timed && r.bar_ms > 0, r.bar_ms / r.ms, 2), cell(r.bar_ms > 0, 100 * r.bar_entries, 1),
                 cell(r.bar_ms > 0, static_cast<double>(r.bar_repaired), 0),
                 cell(r.bar_ms > 0, static_cast<double>(r.bar_stored), 0), cell(r.math_ms > 0, r.math_ms, 3),
                 cell(timed && r.math_ms > 0, r.ms - r.math_ms, 4));
    }
    fmt::print(" {}\n", r.result);
  }
}

nlohmann::json decode_json(const std::vector<DecodeRow>& rows, const GpuCeilings& ceilings) {
  nlohmann::json out = nlohmann::json::array();
  for (const DecodeRow& r : rows) {
    const DecodeBounds b = decode_bounds(r, &ceilings);
    out.push_back({{"op", "decode"},         {"dist", r.dist},
                   {"backend", r.backend},   {"B", r.shape.B},
                   {"next_n", r.shape.next_n}, {"L", r.shape.L},
                   {"block_size", r.block_size}, {"K", r.K},
                   {"heads", r.heads},       {"ms", r.ms},
                   {"bytes", r.bytes()},     {"flops", r.flops()},
                   {"gb_s", b.gb_s},         {"pct_read_ceiling", b.pct_read},
                   {"hbm_bound_ms", b.hbm_ms}, {"fp8_bound_ms", b.fp8_ms},
                   {"bound", b.bound()},     {"route", r.backend == "cuda" ? r.route : ""},
                   {"unfused_ms", r.unfused_ms}, {"fused_select_ms", r.fused_ms},
                   {"math_only_ms", r.math_ms},  {"stream_select_ms", r.stream_ms},
                   {"bar_select_ms", r.bar_ms}, {"bar_entry_fraction", r.bar_entries},
                   {"bar_repaired_rows", r.bar_repaired}, {"bar_stored_rows", r.bar_stored},
                   {"target_ms", b.target_ms},
                   {"result", r.result}});
  }
  return out;
}

// Every shape of every distribution, distribution after distribution:
// run_case(shape, dist, settings, index, total) a row each.
template <typename Shape, typename Settings, typename RunCase>
auto rows_over(const std::vector<Shape>& shapes, const std::vector<Distribution>& dists, const Settings& s,
               RunCase run_case) {
  std::vector<decltype(run_case(shapes.front(), dists.front(), s, 0, 0))> rows;
  int index = 0;
  const int total = static_cast<int>(shapes.size() * dists.size());
  for (Distribution dist : dists) {
    for (const Shape& shape : shapes) rows.push_back(run_case(shape, dist, s, ++index, total));
  }
  return rows;
}

// bench over an op's shapes (already checked, as is every other argument
// before the ceilings are measured, seconds on a GPU): each row timed and
// verified once; the table, the JSON file and the exit code (1: a row not
// passed).
template <class Shape, class Settings, class RunCase, class PrintTable, class ToJson>
int bench_rows(const Args& args, Backend backend, const std::vector<Shape>& shapes,
               const std::vector<Distribution>& dists, Settings s, RunCase run_case, PrintTable print_table,
               ToJson to_json) {
  s.reps = timing_settings(args, backend);
  s.check = !args.flag("no-verify");
  require_backend(backend);
  const GpuCeilings ceilings = ceilings_for(backend);
  const auto rows = rows_over(shapes, dists, s, run_case);
  const bool timed = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.ms > 0; });
  if (backend == Backend::kCuda && timed) print_timing_notes(ceilings, s.reps);
  print_table(rows, &ceilings);
  if (args.flag("json")) write_bench_json(args.get("json", "bench.json"), ceilings, to_json(rows, ceilings));
  return std::all_of(rows.begin(), rows.end(), [](const auto& r) { return passed(r.result); }) ? 0 : 1;
}

// check over an op's shapes: every row verified; exit code 1 unless all exact.
template <class Shape, class Settings, class RunCase, class PrintTable>
int check_rows(Backend backend, const std::vector<Shape>& shapes, const std::vector<Distribution>& dists,
               const Settings& s, RunCase run_case, PrintTable print_table) {
  require_backend(backend);
  const auto rows = rows_over(shapes, dists, s, run_case);
  print_table(rows, nullptr);
  return std::all_of(rows.begin(), rows.end(), [](const auto& r) { return r.result == "exact"; }) ? 0 : 1;
}

// bench --op decode: the grid (or the rows --B, --next-n, --L pick).
int run_decode_bench(const Args& args, Backend backend) {
  const std::vector<DecodeShape> shapes = decode_shapes(args, /*grid=*/true);
  const auto dists = parse_distributions(args.get("dist", "model-like"));
  return bench_rows(args, backend, shapes, dists, decode_settings(args, backend), run_decode_case,
                    print_decode_table, decode_json);
}

// check --op decode: one shape per distribution, verified.
int run_decode_check(const Args& args, Backend backend) {
  const std::vector<DecodeShape> shapes = decode_shapes(args, /*grid=*/false);
  const auto dists = parse_distributions(args.get("dist", "all"));
  return check_rows(backend, shapes, dists, decode_settings(args, backend), run_decode_case, print_decode_table);
}

// ---------------------------------------------------------------- merge ---
//
// merge_topk over P parts' top-part_k lists of R rows, generated as
// context-parallel ranks make them (tools::make_merge_problem), so a call
// reads P * R * part_k entries and writes R * K.

struct MergeShape {
  std::int64_t P = 1;       // parts
  std::int64_t R = 1;       // rows
  std::int64_t part_k = 1;  // entries per part and row
  int K = 2048;
};

// The merge grid: the context-parallel shapes, P parts x R rows at K with
// part_k = K, plus one K = 512 shape when no axis is given.
constexpr std::int64_t kMergeParts[] = {2, 4, 8};
constexpr std::int64_t kMergeRows[] = {64, 4096};
constexpr MergeShape kMergeSmallK{2, 4096, 512, 512};
// check --op merge's shape where --P and --R are not given: an odd part
// count, and rows past a multiple of the short-row period.
constexpr MergeShape kMergeCheckShape{3, 40, 2048, 2048};
// The generator draws kMergeSliceKeysPerPartK * part_k keys a part, every
// row's P slices int32-indexed.
constexpr std::int64_t kMaxMergeKeys = std::numeric_limits<std::int32_t>::max();

struct MergeRow {
  std::string dist, backend, result;
  MergeShape shape;
  double ms = 0;  // median of the timed calls; 0 = not timed

  // The parts' values and indices read, the [R, K] indices and values written.
  double bytes() const {
    constexpr double kEntryBytes = sizeof(float) + sizeof(std::int32_t);
    return kEntryBytes * (static_cast<double>(shape.P) * shape.R * shape.part_k + static_cast<double>(shape.R) * shape.K);
  }
  double gb_s() const { return ms > 0 ? bytes() / (ms * 1e6) : 0; }
  // Percent of the in-run HBM read ceiling, or 0 where not measured.
  double pct_read(const GpuCeilings* ceilings) const {
    if (!ceilings || !ceilings->measured || ceilings->read_tb_s <= 0) return 0;
    return 100.0 * gb_s() / (ceilings->read_tb_s * 1e3);
  }
};

// bench (grid): --P and --R each replace their axis, and with any of --P,
// --R, --K, --part-k the K = 512 shape is left out; check: one shape,
// kMergeCheckShape where not given. --K (the library validates it) and
// --part-k (default K) set every shape's.
std::vector<MergeShape> merge_shapes(const Args& args, bool grid) {
  std::vector<std::int64_t> parts(std::begin(kMergeParts), std::end(kMergeParts));
  std::vector<std::int64_t> rows(std::begin(kMergeRows), std::end(kMergeRows));
  if (!grid) {
    parts = {kMergeCheckShape.P};
    rows = {kMergeCheckShape.R};
  }
  const std::int64_t max_part_k = kMaxMergeKeys / tools::kMergeSliceKeysPerPartK;
  if (args.flag("P")) parts = {int_in(args, "P", 1, 1, max_part_k)};
  if (args.flag("R")) rows = {int_in(args, "R", 1, 1, kMaxSize)};
  const int K = static_cast<int>(args.get_int("K", 2048));
  // An out-of-range K is the library's to reject, not --part-k's default.
  const std::int64_t part_k = int_in(args, "part-k", std::clamp<std::int64_t>(K, 1, max_part_k), 1, max_part_k);
  std::vector<MergeShape> shapes;
  for (const std::int64_t P : parts) {
    if (P * tools::kMergeSliceKeysPerPartK * part_k > kMaxMergeKeys) {
      throw std::invalid_argument("--P, --part-k: a row's P * " + std::to_string(tools::kMergeSliceKeysPerPartK) +
                                  " * part_k = " + std::to_string(P * tools::kMergeSliceKeysPerPartK * part_k) +
                                  " keys, more than " + std::to_string(kMaxMergeKeys));
    }
    for (const std::int64_t R : rows) shapes.push_back({P, R, part_k, K});
  }
  const bool axis_given = args.flag("P") || args.flag("R") || args.flag("K") || args.flag("part-k");
  if (grid && !axis_given) shapes.push_back(kMergeSmallK);
  return shapes;
}

struct MergeSettings {
  std::uint64_t seed = 1;
  SelectOptions options;  // options.k: each shape's K
  Backend backend = Backend::kCpu;
  int threads = 0;
  int reps = 1;
  bool check = true;
};

MergeSettings merge_settings(const Args& args, Backend backend) {
  MergeSettings s;
  s.seed = seed_of(args);
  s.options = parse_options(args);
  s.backend = backend;
  s.threads = threads_of(args);
  return s;
}

// "exact" when the result is the CPU reference's bit for bit (merge_topk
// is sorted and ranks equal scores by index on both backends), else
// "WRONG: ..." naming the first difference.
std::string judge_merge(const tools::MergeProblem& prob, const MergeSettings& s, const tools::TopkOutput& out) {
  if (!s.check) return "not verified";
  const RunResult ref = run_operator(prob, s.options, /*want_values=*/true, Backend::kCpu, s.threads, 1);
  if (!ref.status.ok()) return "judging: " + ref.status.to_string();
  const std::string diff = first_difference(out, ref.out, /*same_order=*/true, "result", "reference");
  return diff.empty() ? "exact" : "WRONG: " + diff;
}

// One merge row: generate, run (timed), verify; progress on stderr.
MergeRow run_merge_case(const MergeShape& shape, Distribution dist, const MergeSettings& s, int index, int total) {
  const std::string dist_name(tools::to_string(dist));
  std::fprintf(stderr, "[%d/%d] merge %s P=%lld R=%lld part_k=%lld K=%d on %s ...\n", index, total,
               dist_name.c_str(), static_cast<long long>(shape.P), static_cast<long long>(shape.R),
               static_cast<long long>(shape.part_k), shape.K, backend_name(s.backend).c_str());
  MergeRow row{dist_name, backend_name(s.backend), "", shape};
  tools::MergeProblem prob;
  try {
    prob = tools::make_merge_problem({dist, shape.P, shape.R, shape.part_k, s.seed});
  } catch (const std::bad_alloc&) {  // the row fails; the grid goes on
    row.result = out_of_memory("the merge inputs [P, R, part_k]", row.bytes(), "a smaller --P, --R or --part-k needs less");
    return row;
  }
  MergeSettings settings = s;
  settings.options.k = shape.K;
  const RunResult r = run_operator(prob, settings.options, /*want_values=*/true, s.backend, s.threads, s.reps);
  if (!r.status.ok()) {
    row.result = r.status.to_string();
    return row;
  }
  row.ms = r.median_ms();
  row.result = judge_merge(prob, settings, r.out);
  return row;
}

constexpr const char* kMergeColumns = "{:<6} {:<14} {:<5} {:>3} {:>6} {:>7} {:>5} {:>9} {:>8} {:>6}  {}\n";

void print_merge_table(const std::vector<MergeRow>& rows, const GpuCeilings* ceilings) {
  fmt::print("\nmerge = merge_topk: per row the top K over P parts of part_k entries; ms = median; GB/s = bytes / ms, "
             "bytes = P * R * part_k * 8\n(values and indices read) + R * K * 8 (written); %read = of the in-run HBM "
             "read ceiling; verified bit for bit against the CPU reference\n\n");
  fmt::print(kMergeColumns, "op", "dist", "back", "P", "R", "part_k", "K", "ms", "GB/s", "%read", "result");
  for (const MergeRow& r : rows) {
    const double gb_s = r.gb_s(), pct = r.pct_read(ceilings);
    fmt::print(kMergeColumns, "merge", r.dist, r.backend, r.shape.P, r.shape.R, r.shape.part_k, r.shape.K,
               cell(r.ms > 0, r.ms, 3), cell(gb_s > 0, gb_s, gb_s < 10 ? 3 : 0), cell(pct > 0, pct, 1), r.result);
  }
}

nlohmann::json merge_json(const std::vector<MergeRow>& rows, const GpuCeilings& ceilings) {
  nlohmann::json out = nlohmann::json::array();
  for (const MergeRow& r : rows) {
    out.push_back({{"op", "merge"},        {"dist", r.dist},
                   {"backend", r.backend}, {"P", r.shape.P},
                   {"R", r.shape.R},       {"part_k", r.shape.part_k},
                   {"K", r.shape.K},       {"ms", r.ms},
                   {"bytes", r.bytes()},   {"gb_s", r.gb_s()},
                   {"pct_read_ceiling", r.pct_read(&ceilings)}, {"result", r.result}});
  }
  return out;
}

// bench --op merge: the grid (or the rows --P, --R pick).
int run_merge_bench(const Args& args, Backend backend) {
  const std::vector<MergeShape> shapes = merge_shapes(args, /*grid=*/true);
  const auto dists = parse_distributions(args.get("dist", "model-like"));
  return bench_rows(args, backend, shapes, dists, merge_settings(args, backend), run_merge_case, print_merge_table,
                    merge_json);
}

// check --op merge: one shape per distribution, verified.
int run_merge_check(const Args& args, Backend backend) {
  const std::vector<MergeShape> shapes = merge_shapes(args, /*grid=*/false);
  const auto dists = parse_distributions(args.get("dist", "all"));
  return check_rows(backend, shapes, dists, merge_settings(args, backend), run_merge_case, print_merge_table);
}

}  // namespace

// ------------------------------------------------------------- commands ----

int run_check(const Args& args) {
  const Backend backend = parse_backend(args.get("backend", "cpu"));
  const std::string op = parse_op(args, {"indexer", "topk", "decode", "merge"});
  reject_inapplicable(args, op, backend);
  if (op == "decode") return run_decode_check(args, backend);
  if (op == "merge") return run_merge_check(args, backend);
  const SelectOptions options = parse_options(args);
  const int threads = threads_of(args);
  std::vector<tools::ProblemSpec> specs;
  for (Distribution dist : parse_distributions(args.get("dist", "all"))) {
    for (Layout layout : parse_layouts(args.get("layout", "causal-suffix"))) specs.push_back(spec_from(args, dist, layout));
  }
  require_backend(backend);
  std::vector<Row> rows;
  int index = 0;
  const int total = static_cast<int>(specs.size());
  for (const tools::ProblemSpec& spec : specs) {
    if (op == "indexer") {
      rows.push_back(run_case(generate_indexer(spec), op, spec.dist, spec.layout, options, args.flag("values"),
                              backend, threads, 1, true, ++index, total));
    } else {
      rows.push_back(run_case(generate_scores(spec), op, spec.dist, spec.layout, options, args.flag("values"),
                              backend, threads, 1, true, ++index, total));
    }
  }
  print_table(rows, nullptr);
  return all_exact(rows) ? 0 : 1;
}

int run_default() {
  std::string why;
  const Backend backend = cuda_backend_available(Operator::kIndexerTopk, &why) ? Backend::kCuda : Backend::kCpu;
  std::fprintf(stderr, "dsa-topk: exactness check of every distribution on the %s backend%s\n",
               backend_name(backend).c_str(), backend == Backend::kCpu ? (": " + why).c_str() : "");
  std::vector<Row> rows;
  const auto dists = tools::all_distributions();
  int index = 0;
  for (Distribution dist : dists) {
    tools::ProblemSpec spec;
    spec.dist = dist;
    spec.layout = Layout::kCausalSuffix;
    spec.T = 32;
    spec.N = 8192;
    spec.seed = 1;
    SelectOptions options;
    rows.push_back(run_case(generate_indexer(spec), "indexer", dist, spec.layout, options, false, backend,
                            0, 1, true, ++index, static_cast<int>(dists.size())));
  }
  print_table(rows, nullptr);
  std::printf("\nrun 'dsa-topk --help' for check, bench, replay and generate\n");
  return all_exact(rows) ? 0 : 1;
}

int run_bench(const Args& args) {
  const Backend backend = parse_backend(args.get("backend", "cpu"));
  const std::string op = parse_op(args, {"indexer", "scores", "topk", "decode", "merge"});
  reject_inapplicable(args, op, backend);
  if (op == "decode") return run_decode_bench(args, backend);
  if (op == "merge") return run_merge_bench(args, backend);
  const int threads = threads_of(args);
  const SelectOptions options = parse_options(args);
  // Everything is checked before the ceilings are measured (seconds on a GPU).
  const auto dists = parse_distributions(args.get("dist", "model-like"));
  const auto layouts = parse_layouts(args.get("layout", "causal-suffix"));
  if (layouts.size() != 1) throw std::invalid_argument("--layout: bench takes one layout");
  const tools::ProblemSpec base = spec_from(args, dists.front(), layouts.front());  // heads, K, seed
  const std::string grid = args.get("grid", "small");
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;  // (T, N)
  if (args.flag("T") || args.flag("N")) {
    // One shape instead of a grid: both sizes must be given, and a grid too is a conflict.
    if (!args.flag("T") || !args.flag("N")) throw std::invalid_argument("--T and --N go together (one shape)");
    if (args.flag("grid")) throw std::invalid_argument("--grid and --T/--N are exclusive");
    shapes = {{base.T, base.N}};
  } else if (grid == "h200") {
    shapes = {{4096, 8192}, {4096, 16384}, {4096, 32768}, {4096, 65536}, {4096, 131072}, {512, 131072}, {64, 131072}};
  } else if (grid == "small") {
    shapes = {{64, 8192}, {16, 32768}, {4, 131072}};
  } else if (grid == "decode") {
    // Few query rows over long histories (decode batches, small prefill
    // chunks): fewer rows than the device holds CTAs.
    shapes = {{1, 131072}, {8, 131072}, {32, 131072}, {64, 131072}, {128, 131072}, {16, 32768}, {4, 1048576}};
  } else {
    throw std::invalid_argument("--grid: expected small, h200 or decode, got '" + grid + "'");
  }
  const int reps = timing_settings(args, backend);
  IndexerBenchHooks bench_hooks;
  if (args.flag("route")) {
    if (op != "indexer" || backend != Backend::kCuda) {
      throw std::invalid_argument("--route: the CUDA operators' option (--op indexer or --op decode, --backend cuda)");
    }
    const std::string route = args.get("route", "by-shape");
    if (route == "fused") {
      bench_hooks.route = fused::FusedHooks::Route::kFused;
    } else if (route == "unfused") {
      bench_hooks.route = fused::FusedHooks::Route::kUnfused;
    } else if (route != "by-shape") {
      throw std::invalid_argument("--route: expected by-shape, fused or unfused, got '" + route + "'");
    }
  }
  require_backend(backend);
  const GpuCeilings ceilings = ceilings_for(backend);
  const bool check = !args.flag("no-verify");
  const bool values = args.flag("values");
  std::vector<Row> rows;
  int index = 0;
  const int total = static_cast<int>(shapes.size() * dists.size());
  for (Distribution dist : dists) {
    for (const auto& [T, N] : shapes) {
      tools::ProblemSpec spec = base;
      spec.dist = dist;
      spec.T = T;
      spec.N = N;
      if (op == "scores") {
        rows.push_back(run_scores_case(generate_indexer(spec), dist, reps, ++index, total));
      } else if (op == "indexer" && backend == Backend::kCuda) {
        rows.push_back(run_indexer_cuda_case(generate_indexer(spec), dist, spec.layout, options, values, reps, check,
                                             threads, bench_hooks, ++index, total));
      } else if (op == "indexer") {
        rows.push_back(run_case(generate_indexer(spec), op, dist, spec.layout, options, values, backend, threads, reps,
                                check, ++index, total));
      } else {
        const ScoresProblem prob = generate_scores(spec);
        rows.push_back(run_case(prob, op, dist, spec.layout, options, values, backend, threads, reps, check, ++index,
                                total));
        if (args.flag("baselines")) {
          Status st = time_cub_segmented_sort(prob, reps, &rows.back().cub_ms);
          if (!st.ok()) rows.back().result += " (CUB: " + st.to_string() + ")";
          st = time_read_once(prob, reps, &rows.back().read_ms);
          if (!st.ok()) rows.back().result += " (read once: " + st.to_string() + ")";
        }
      }
    }
  }
  const bool timed = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.ms > 0; });
  if (backend == Backend::kCuda && timed) print_timing_notes(ceilings, reps);
  print_table(rows, &ceilings);
  if (args.flag("json")) write_json(args.get("json", "bench.json"), rows, ceilings);
  return std::all_of(rows.begin(), rows.end(), [](const Row& r) { return passed(r.result); }) ? 0 : 1;
}

int run_replay(const Args& args) {
  if (args.positional().empty()) throw std::invalid_argument("expected the input file: dsa-topk replay IN [OPTIONS]");
  const std::string in_path = args.positional()[0];
  const Backend backend = parse_backend(args.get("backend", "cpu"));
  SelectOptions options = parse_options(args);
  const int threads = threads_of(args);
  require_backend(backend);
  tools::SafetensorsFile file;
  Status st = tools::read_safetensors(in_path, &file);
  IndexerProblem prob;
  int topk_from_file = 2048;
  if (st.ok()) st = tools::indexer_problem_from_file(file, &prob, &topk_from_file);
  if (!st.ok()) {
    std::fprintf(stderr, "dsa-topk replay: %s\n", st.message().c_str());
    return 1;
  }
  options.k = static_cast<int>(args.get_int("K", topk_from_file));
  options.check_finite = args.flag("check-finite");
  const RunResult r = run_operator(prob, options, args.flag("values"), backend, threads, 1);
  if (!r.status.ok()) {
    std::fprintf(stderr, "dsa-topk replay: %s\n", r.status.to_string().c_str());
    return 1;
  }
  std::printf("replayed %s: T=%lld N=%lld H=%d K=%d on %s in %.3f ms\n", in_path.c_str(),
              static_cast<long long>(prob.T), static_cast<long long>(prob.N), prob.H, options.k,
              backend_name(backend).c_str(), r.median_ms());
  int rc = 0;
  if (args.flag("verify")) {
    const tools::CheckReport report = check_indexer(prob, options, r.out, backend, threads);
    std::printf("verify: %s\n", report.summary().c_str());
    rc = report.ok() ? 0 : 1;
  }
  if (args.flag("out")) {
    tools::SafetensorsFile out;
    out.metadata["topk"] = std::to_string(options.k);
    out.metadata["source"] = in_path;
    tools::add_output(r.out, &out);
    st = tools::write_safetensors(args.get("out", ""), out);
    if (!st.ok()) {
      std::fprintf(stderr, "dsa-topk replay: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", args.get("out", "").c_str());
  }
  return rc;
}

int run_generate(const Args& args) {
  if (!args.flag("out")) throw std::invalid_argument("--out FILE is required");
  const auto dists = parse_distributions(args.get("dist", "model-like"));
  const auto layouts = parse_layouts(args.get("layout", "causal-suffix"));
  if (dists.size() != 1 || layouts.size() != 1) throw std::invalid_argument("name one --dist and one --layout");
  tools::ProblemSpec spec = spec_from(args, dists[0], layouts[0]);
  spec.K = int_one_of(args, "K", 2048, kSupportedK);  // the dump's topk, which replay runs with
  const IndexerProblem prob = generate_indexer(spec);
  const Status st = tools::write_safetensors(args.get("out", ""), tools::file_from_indexer_problem(prob, spec.K));
  if (!st.ok()) {
    std::fprintf(stderr, "dsa-topk generate: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s (%s, T=%lld N=%lld)\n", args.get("out", "").c_str(), prob.name.c_str(),
              static_cast<long long>(prob.T), static_cast<long long>(prob.N));
  return 0;
}

}  // namespace dsa::cli
