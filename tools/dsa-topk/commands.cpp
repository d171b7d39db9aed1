#include "commands.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "baselines.h"
#include "device_run.h"
#include "l2_flush.h"
#include "power_state.h"
#include "reference/cpu_reference.h"
#include "tools/checker.h"
#include "tools/generators.h"
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

// --op (default indexer), one of `allowed` (the command's ops).
std::string parse_op(const Args& args, const std::vector<std::string>& allowed) {
  const std::string op = args.get("op", "indexer");
  if (std::find(allowed.begin(), allowed.end(), op) != allowed.end()) return op;
  std::string expected;
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i];
  }
  throw std::invalid_argument("--op: expected " + expected + ", got '" + op + "'");
}

SelectOptions parse_options(const Args& args) {
  SelectOptions o;
  o.k = static_cast<int>(args.get_int("K", 2048));
  o.ties = args.flag("deterministic") ? TieBreak::kSmallestIndex : TieBreak::kAny;
  o.index_base = args.flag("relative") ? IndexBase::kRelative : IndexBase::kAbsolute;
  o.sorted = args.flag("sorted");
  return o;
}

const std::vector<std::string> kCommonOptions = {"backend", "op", "dist", "layout", "T", "N", "K", "heads",
                                                 "seed", "threads", "deterministic", "relative", "sorted",
                                                 "values"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
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

template <typename Problem>
RunResult run_operator(const Problem& prob, const SelectOptions& options, bool want_values, Backend backend,
                       int threads, int reps) {
  RunResult r;
  r.out.T = prob.T;
  r.out.K = options.k;
  if (backend == Backend::kCuda) {
    r.status = run_on_device(prob, options, want_values, reps, &r.out, &r.ms);
    return r;
  }
  r.out.indices.assign(static_cast<std::size_t>(prob.T * options.k), -2);  // poison
  if (want_values) r.out.values.assign(r.out.indices.size(), 0.0f);
  ExecutionContext ctx;
  ctx.num_threads = threads;
  const auto params = prob.params(r.out.indices.data(), want_values ? r.out.values.data() : nullptr, options);
  for (int i = 0; i < std::max(reps, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    if constexpr (std::is_same_v<Problem, IndexerProblem>) {
      r.status = indexer_topk(params, ctx);
    } else {
      r.status = topk(params, ctx);
    }
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
  std::string route = "";  // the operator's route: "fused" (its stages) or "staged" (batches + standalone top-k)
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

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Scoring ops report TFLOP/s against the FP8 ceiling; top-k reports the rate
// it reads the scores (4 bytes per pair) against the copy ceiling. CUDA
// indexer rows add the unfused pipeline and the math-only control.
void print_table(const std::vector<Row>& rows, const GpuCeilings* ceilings) {
  const bool baselines = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.cub_ms > 0; });
  const bool fused = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.unfused_ms > 0; });
  if (fused) {
    std::printf("\nindexer on cuda: ms = fused operator (every stage); unfused = indexer_scores + topk; "
                "xunf = unfused / fused;\nmath = fused math-only control; sel = ms - math (exposed selection);\n"
                "route: the operator's route by shape (staged: rows scored in bounded batches, then the standalone "
                "top-k; sel is then ms less the fused kernel's matrix work)\n");
  }
  std::printf("\n%-8s %-14s %-17s %-5s %6s %8s %5s %10s %9s %10s %9s %-8s %7s", "op", "dist", "layout", "back", "T",
              "N", "K", "pairs", "ms", "Mpairs/s", "rate", "unit", "%ceil");
  if (baselines) std::printf(" %9s %7s %9s %6s", "CUB ms", "xCUB", "read ms", "xread");
  if (fused) std::printf(" %10s %6s %9s %9s %-6s", "unfused ms", "xunf", "math ms", "sel ms", "route");
  std::printf("  result\n");
  for (const Row& r : rows) {
    const bool timed = r.ms > 0;
    const double rate = rate_of(r);
    const double percent = percent_of_ceiling(r, ceilings);
    std::printf("%-8s %-14s %-17s %-5s %6lld %8lld %5d %10lld %9s %10s %9s %-8s %7s", r.op.c_str(), r.dist.c_str(),
                r.layout.c_str(), r.backend.c_str(), static_cast<long long>(r.T), static_cast<long long>(r.N), r.K,
                static_cast<long long>(r.pairs), timed ? fmt("%.3f", r.ms).c_str() : "-",
                timed ? fmt("%.2f", r.pairs / (r.ms * 1e3)).c_str() : "-",
                timed ? fmt(rate < 1 ? "%.4f" : "%.1f", rate).c_str() : "-", is_topk(r) ? "TB/s rd" : "TFLOP/s",
                timed && percent > 0 ? fmt("%.1f", percent).c_str() : "-");
    if (baselines) {
      std::printf(" %9s %7s", r.cub_ms > 0 ? fmt("%.3f", r.cub_ms).c_str() : "-",
                  r.cub_ms > 0 && timed ? fmt("%.2f", r.cub_ms / r.ms).c_str() : "-");
      std::printf(" %9s %6s", r.read_ms > 0 ? fmt("%.4f", r.read_ms).c_str() : "-",
                  r.read_ms > 0 && timed ? fmt("%.2f", r.ms / r.read_ms).c_str() : "-");
    }
    if (fused) {
      const bool both = timed && r.unfused_ms > 0;
      const bool math = timed && r.math_ms > 0;
      std::printf(" %10s %6s %9s %9s", r.unfused_ms > 0 ? fmt("%.3f", r.unfused_ms).c_str() : "-",
                  both ? fmt("%.2f", r.unfused_ms / r.ms).c_str() : "-",
                  r.math_ms > 0 ? fmt("%.3f", r.math_ms).c_str() : "-",
                  math ? fmt("%.3f", r.ms - r.math_ms).c_str() : "-");
      std::printf(" %-6s", r.route.empty() ? "-" : r.route.c_str());
    }
    std::printf("  %s\n", r.result.c_str());
  }
}

void write_json(const std::string& path, const std::vector<Row>& rows, const GpuCeilings& ceilings) {
  nlohmann::json j;
  j["ceilings"] = {{"measured", ceilings.measured},     {"device", ceilings.device},
                   {"why_not", ceilings.why_not},       {"copy_tb_s", ceilings.copy_tb_s},
                   {"fp8_tflops", ceilings.fp8_tflops}, {"fp8_fast_tflops", ceilings.fp8_fast_tflops},
                   {"fp8_sustained_tflops", ceilings.fp8_sustained_tflops}};
  j["rest_ms"] = rest_ms();
  j["rows"] = nlohmann::json::array();
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
    j["rows"].push_back(row);
  }
  std::ofstream(path) << j.dump(2) << "\n";
}

std::string backend_name(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

// One problem: generate, run (timed), verify; progress on stderr.
// Judges an indexer result against the operator's own fp32 scores (contract
// section 2): the CPU reference's on the CPU backend; on the CUDA backend
// the scoring kernel's, which are bit-identical to the fused operator's and
// differ from the CPU's in the last bits (tensor-core accumulation).
tools::CheckReport check_indexer(const IndexerProblem& prob, const SelectOptions& options,
                                 const tools::TopkOutput& out, Backend backend, int threads) {
  if (backend != Backend::kCuda) return tools::check_problem(prob, options, out, threads);
  std::vector<float> scores;
  std::vector<double> ms;
  const Status st = run_scores_on_device(prob, 1, &scores, &ms);
  if (!st.ok()) {
    tools::CheckReport failed;
    failed.rows_failed = 1;
    failed.failures.push_back({0, "scoring the judge's scores on the device: " + st.to_string()});
    return failed;
  }
  tools::CheckInput in;
  in.T = prob.T;
  in.ks = prob.ks.data();
  in.ke = prob.ke.data();
  in.row_scores = tools::dense_row_scores(scores.data(), prob.N, prob.ks.data(), prob.ke.data());
  in.indices = out.indices.data();
  in.values = out.values.empty() ? nullptr : out.values.data();
  in.options = options;
  return tools::check_topk(in);
}

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
    report = tools::check_problem(prob, options, r.out);
  }
  row.result = report.ok() ? "exact" : "WRONG: " + report.summary();
  return row;
}

// The scoring kernel alone, timed; its exactness is the GPU tests' business
// (bit-exact on small integers, bounded error otherwise).
Row run_scores_case(const IndexerProblem& prob, Distribution dist, Backend backend, int reps, int index, int total) {
  std::fprintf(stderr, "[%d/%d] scores %s T=%lld N=%lld ...\n", index, total,
               std::string(tools::to_string(dist)).c_str(), static_cast<long long>(prob.T),
               static_cast<long long>(prob.N));
  Row row{"scores", std::string(tools::to_string(dist)), "causal-suffix", backend_name(backend), "", prob.T, prob.N,
          0, prob.valid_pairs(), 0};
  row.heads = prob.H;
  if (backend != Backend::kCuda) {
    row.result = "scores: bench it with --backend cuda";
    return row;
  }
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
// `same_order`, else as each row's set of (index, value bits).
std::string first_difference(const tools::TopkOutput& a, const tools::TopkOutput& b, bool same_order) {
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
             ": fused " + std::to_string(diff.first->first) + ", unfused " + std::to_string(diff.second->first) +
             (values && diff.first->first == diff.second->first ? " (values differ)" : "");
    }
  }
  return "";
}

// The one checker against a dense [T, N] score matrix, rows split into
// blocks over the hardware threads (the h200 grid's verification reads up to
// 512M scores per row of the table); failures keep their row numbers.
tools::CheckReport check_dense_in_parallel(const IndexerProblem& prob, const std::vector<float>& scores,
                                           const SelectOptions& options, const tools::TopkOutput& out) {
  constexpr std::int64_t kMaxFailures = 8;
  const std::int64_t workers = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t block = std::max<std::int64_t>(1, (prob.T + workers - 1) / workers);
  const std::int64_t blocks = (prob.T + block - 1) / block;
  std::vector<tools::CheckReport> reports(static_cast<std::size_t>(blocks));
  std::vector<std::thread> threads;
  for (std::int64_t b = 0; b < blocks; ++b) {
    threads.emplace_back([&, b] {
      const std::int64_t first = b * block;
      tools::CheckInput in;
      in.T = std::min(block, prob.T - first);
      in.ks = prob.ks.data() + first;
      in.ke = prob.ke.data() + first;
      in.row_scores = tools::dense_row_scores(scores.data() + first * prob.N, prob.N, in.ks, in.ke);
      in.indices = out.indices.data() + first * options.k;
      in.values = out.values.empty() ? nullptr : out.values.data() + first * options.k;
      in.options = options;
      reports[b] = tools::check_topk(in, kMaxFailures);
      for (tools::RowFailure& f : reports[b].failures) f.row += first;
    });
  }
  for (std::thread& t : threads) t.join();
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

// The CUDA indexer: the fused operator timed beside our unfused pipeline and
// the fused kernel's math-only control, in one run on the same inputs. The
// fused result is verified against the unfused one: identical with
// smallest-index ties; with kAny ties, a valid top-k of the unfused scores
// (bit-identical to the fused scores by contract), by the one checker.
Row run_indexer_cuda_case(const IndexerProblem& prob, Distribution dist, Layout layout, const SelectOptions& options,
                          bool values, int reps, bool check, const IndexerBenchHooks& bench_hooks, int index,
                          int total) {
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
  row.route = cmp.staged ? "staged" : "fused";
  if (!check) {
    row.result = "not verified";
    return row;
  }
  if (any_ties) {
    const tools::CheckReport report = check_dense_in_parallel(prob, cmp.scores, options, cmp.fused);
    row.result = report.ok() ? "exact" : "WRONG: " + report.summary();
  } else {
    const std::string diff = first_difference(cmp.fused, cmp.unfused, options.sorted);
    row.result = diff.empty() ? "exact" : "WRONG: fused != unfused: " + diff;
  }
  return row;
}

tools::ProblemSpec spec_from(const Args& args, Distribution dist, Layout layout) {
  tools::ProblemSpec spec;
  spec.dist = dist;
  spec.layout = layout;
  spec.T = args.get_int("T", 64);
  spec.N = args.get_int("N", 16384);
  spec.H = static_cast<int>(args.get_int("heads", 64));
  spec.K = static_cast<int>(args.get_int("K", 2048));
  spec.seed = static_cast<std::uint64_t>(args.get_int("seed", 1));
  return spec;
}

bool all_exact(const std::vector<Row>& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.result == "exact"; });
}

}  // namespace

// ----------------------------------------------------------------- Args ----

Args::Args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    const std::string name = a.substr(2);
    const bool has_value = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0;
    options_[name] = has_value ? argv[++i] : "";
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  const auto it = options_.find(name);
  return it == options_.end() ? fallback : it->second;
}

std::int64_t Args::get_int(const std::string& name, std::int64_t fallback) const {
  const auto it = options_.find(name);
  if (it == options_.end()) return fallback;
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size()) {
    throw std::invalid_argument("--" + name + ": expected an integer, got '" + it->second + "'");
  }
  return v;
}

bool Args::flag(const std::string& name) const { return options_.count(name) != 0; }

void Args::expect_only(const std::vector<std::string>& known) const {
  for (const auto& [name, value] : options_) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw std::invalid_argument("unknown option --" + name + " (see dsa-topk --help)");
    }
  }
}

// ------------------------------------------------------------- commands ----

int run_check(const Args& args) {
  args.expect_only(kCommonOptions);
  const Backend backend = parse_backend(args.get("backend", "cpu"));
  const std::string op = parse_op(args, {"indexer", "topk"});
  const SelectOptions options = parse_options(args);
  const int threads = static_cast<int>(args.get_int("threads", 0));
  const auto dists = parse_distributions(args.get("dist", "all"));
  const auto layouts = parse_layouts(args.get("layout", "causal-suffix"));
  std::vector<Row> rows;
  int index = 0;
  const int total = static_cast<int>(dists.size() * layouts.size());
  for (Distribution dist : dists) {
    for (Layout layout : layouts) {
      const tools::ProblemSpec spec = spec_from(args, dist, layout);
      if (op == "indexer") {
        rows.push_back(run_case(tools::make_indexer_problem(spec), op, dist, layout, options, args.flag("values"),
                                backend, threads, 1, true, ++index, total));
      } else {
        rows.push_back(run_case(tools::make_scores_problem(spec), op, dist, layout, options, args.flag("values"),
                                backend, threads, 1, true, ++index, total));
      }
    }
  }
  print_table(rows, nullptr);
  return all_exact(rows) ? 0 : 1;
}

int run_default() {
  std::string why;
  const Backend backend = cuda_backend_available(Operator::kIndexerTopk, &why) ? Backend::kCuda : Backend::kCpu;
  std::fprintf(stderr, "dsa-topk: exactness check of every distribution on the %s backend%s\n",
               backend_name(backend).c_str(), backend == Backend::kCpu ? (" (" + why + ")").c_str() : "");
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
    rows.push_back(run_case(tools::make_indexer_problem(spec), "indexer", dist, spec.layout, options, false, backend,
                            0, 1, true, ++index, static_cast<int>(dists.size())));
  }
  print_table(rows, nullptr);
  std::printf("\nrun 'dsa-topk --help' for check, bench, replay and generate\n");
  return all_exact(rows) ? 0 : 1;
}

int run_bench(const Args& args) {
  args.expect_only(
      with(kCommonOptions, {"grid", "reps", "json", "no-verify", "baselines", "warm-l2", "rest-ms", "route"}));
  const Backend backend = parse_backend(args.get("backend", "cpu"));
  const std::string grid = args.get("grid", "small");
  const int reps = static_cast<int>(args.get_int("reps", backend == Backend::kCpu ? 3 : 20));
  const int threads = static_cast<int>(args.get_int("threads", 0));
  const SelectOptions options = parse_options(args);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;  // (T, N)
  if (args.flag("T") || args.flag("N")) {
    // One shape instead of a grid: both sizes must be given, and a grid too is a conflict.
    if (!args.flag("T") || !args.flag("N")) throw std::invalid_argument("bench: --T and --N go together (one shape)");
    if (args.flag("grid")) throw std::invalid_argument("bench: --grid and --T/--N are exclusive");
    shapes = {{args.get_int("T", 0), args.get_int("N", 0)}};
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
  // The op, distributions and layout are checked before the ceilings are
  // measured (seconds on a GPU).
  const auto dists = parse_distributions(args.get("dist", "model-like"));
  const std::string op = parse_op(args, {"indexer", "scores", "topk"});
  const auto layouts = parse_layouts(args.get("layout", "causal-suffix"));
  if (layouts.size() != 1) throw std::invalid_argument("bench: --layout takes one layout");
  const Layout layout = layouts.front();
  set_cold_l2(!args.flag("warm-l2"));
  const std::int64_t rest = args.get_int("rest-ms", 0);
  if (rest < 0 || rest > 10'000) throw std::invalid_argument("--rest-ms: expected 0 to 10000 milliseconds");
  if (rest > 0 && backend != Backend::kCuda) throw std::invalid_argument("--rest-ms: rests the GPU (--backend cuda)");
  set_rest_ms(static_cast<int>(rest));
  IndexerBenchHooks bench_hooks;
  if (args.flag("route")) {
    if (op != "indexer" || backend != Backend::kCuda) {
      throw std::invalid_argument("--route: the CUDA indexer's option (--op indexer --backend cuda)");
    }
    const std::string route = args.get("route", "by-shape");
    if (route == "fused") {
      bench_hooks.route = fused::FusedHooks::Route::kFused;
    } else if (route == "staged") {
      bench_hooks.route = fused::FusedHooks::Route::kStaged;
    } else if (route != "by-shape") {
      throw std::invalid_argument("--route: expected by-shape, fused or staged, got '" + route + "'");
    }
  }
  GpuCeilings ceilings;
  if (backend == Backend::kCuda) {
    std::fprintf(stderr, "measuring GPU ceilings (copy bandwidth, cuBLASLt FP8 GEMM) ...\n");
    ceilings = measure_gpu_ceilings();
  }
  std::vector<Row> rows;
  int index = 0;
  const int total = static_cast<int>(shapes.size() * dists.size());
  for (Distribution dist : dists) {
    for (const auto& [T, N] : shapes) {
      tools::ProblemSpec spec = spec_from(args, dist, layout);  // heads, K, seed as every command reads them
      spec.T = T;
      spec.N = N;
      const bool check = !args.flag("no-verify");
      if (op == "scores") {
        rows.push_back(run_scores_case(tools::make_indexer_problem(spec), dist, backend, reps, ++index, total));
      } else if (op == "indexer" && backend == Backend::kCuda) {
        rows.push_back(run_indexer_cuda_case(tools::make_indexer_problem(spec), dist, spec.layout, options,
                                             args.flag("values"), reps, check, bench_hooks, ++index, total));
      } else if (op == "indexer") {
        rows.push_back(run_case(tools::make_indexer_problem(spec), op, dist, spec.layout, options, false, backend,
                                threads, reps, check, ++index, total));
      } else {
        const ScoresProblem prob = tools::make_scores_problem(spec);
        rows.push_back(run_case(prob, op, dist, spec.layout, options, false, backend, threads, reps, check, ++index,
                                total));
        if (args.flag("baselines") && backend == Backend::kCuda) {
          Status st = time_cub_segmented_sort(prob, reps, &rows.back().cub_ms);
          if (!st.ok()) rows.back().result += " (CUB: " + st.to_string() + ")";
          st = time_read_once(prob, reps, &rows.back().read_ms);
          if (!st.ok()) rows.back().result += " (read once: " + st.to_string() + ")";
        }
      }
    }
  }
  if (backend == Backend::kCuda) {
    if (ceilings.measured) {
      std::printf("\n%s\nceilings (this run): copy %.2f TB/s, FP8 GEMM %.0f TFLOP/s (fast accumulation %.0f)\n",
                  ceilings.device.c_str(), ceilings.copy_tb_s, ceilings.fp8_tflops, ceilings.fp8_fast_tflops);
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
  print_table(rows, &ceilings);
  if (args.flag("json")) write_json(args.get("json", "bench.json"), rows, ceilings);
  const bool failed = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.result.rfind("WRONG", 0) == 0; });
  return failed ? 1 : 0;
}

int run_replay(const Args& args) {
  args.expect_only(with(kCommonOptions, {"out", "verify"}));
  if (args.positional().size() != 1) throw std::invalid_argument("replay: expected one input file: replay IN [--out OUT]");
  const std::string in_path = args.positional()[0];
  tools::SafetensorsFile file;
  Status st = tools::read_safetensors(in_path, &file);
  IndexerProblem prob;
  int topk_from_file = 2048;
  if (st.ok()) st = tools::indexer_problem_from_file(file, &prob, &topk_from_file);
  if (!st.ok()) {
    std::fprintf(stderr, "dsa-topk replay: %s\n", st.message().c_str());
    return 1;
  }
  SelectOptions options = parse_options(args);
  options.k = static_cast<int>(args.get_int("K", topk_from_file));
  const Backend backend = parse_backend(args.get("backend", "cpu"));
  const RunResult r = run_operator(prob, options, args.flag("values"), backend,
                                   static_cast<int>(args.get_int("threads", 0)), 1);
  if (!r.status.ok()) {
    std::fprintf(stderr, "dsa-topk replay: %s\n", r.status.to_string().c_str());
    return 1;
  }
  std::printf("replayed %s: T=%lld N=%lld H=%d K=%d on %s in %.3f ms\n", in_path.c_str(),
              static_cast<long long>(prob.T), static_cast<long long>(prob.N), prob.H, options.k,
              backend_name(backend).c_str(), r.median_ms());
  int rc = 0;
  if (args.flag("verify")) {
    const tools::CheckReport report = check_indexer(prob, options, r.out, backend, 0);
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
  args.expect_only(with(kCommonOptions, {"out"}));
  if (!args.flag("out")) throw std::invalid_argument("generate: --out FILE is required");
  const auto dists = parse_distributions(args.get("dist", "model-like"));
  const auto layouts = parse_layouts(args.get("layout", "causal-suffix"));
  if (dists.size() != 1 || layouts.size() != 1) throw std::invalid_argument("generate: name one --dist and one --layout");
  const tools::ProblemSpec spec = spec_from(args, dists[0], layouts[0]);
  const IndexerProblem prob = tools::make_indexer_problem(spec);
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
