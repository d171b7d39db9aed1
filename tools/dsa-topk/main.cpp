// dsa-topk: run, verify and time the DSA indexer top-k.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: dsa-topk [COMMAND] [OPTIONS]

With no command, runs a short exactness check of every input distribution on
the best available backend and prints a results table.

commands:
  check     run an operator on generated inputs and verify it exactly
  bench     time operators on a shape grid; prints ms, pairs/s, TFLOP/s
  replay    run the indexer on a safetensors dump:  replay IN [--out OUT]
  generate  write a generated problem as a safetensors dump:  generate --out FILE

common options:
  --backend cpu|cuda        (default cpu)
  --op indexer|topk|scores|decode
                            operator (default indexer; scores: the scoring kernel, bench only;
                            decode: indexer_topk_paged over a paged cache)
  --dist NAME[,NAME]|all    model-like, ties, dead-relu, mixed-sign, shifted, small-integer
  --layout NAME|all         causal-suffix, varlen-batch, context-parallel, boundary, full
  --T N --N N --K K --heads H --seed S --threads N
  --deterministic           ties go to the smallest index
  --relative                indices relative to ks
  --sorted --values
decode options (--op decode; not --T --N --layout --relative):
  --B N --next-n N --L N    requests, query tokens each (1-8), every request's context length;
                            check: one shape (default 3 x 2 x 5000); bench: each replaces its
                            axis of the decode grid (all three: one row)
  --block-size 16|32|64|128 cache block size (default 64)
bench options:
  --grid small|h200|decode  shape grid (h200: the grid of shared/h200.md; decode: 1-128
                            rows of 32K-1M keys; with --op decode, the default and only grid:
                            B 1,4,32,128,256 x next_n 1,2,4 x L 8K,32K,128K, and 1M for B <= 4)
  --T N --N N               instead of a grid: one shape (--layout: one layout)
  --reps N                  timed repetitions (median reported)
  --json FILE               also write the results as JSON
  --baselines               (--op topk --backend cuda) also time CUB's segmented radix sort
                            and one read of the rows (the floor, timed the same way)
  --warm-l2                 do not flush L2 before each timed call (default: flushed, so
                            inputs come from device memory as on fresh data)
  --rest-ms M               let the GPU idle M ms before each timed call (default 0: back to
                            back, as an engine runs; under sustained load the 700 W cap lowers
                            the clock within some tens of ms, so long rows time slower)
  --no-verify               skip the exactness check of each timed result
  --route by-shape|fused|staged
                            (--op indexer --backend cuda) the operator's route (default by
                            shape: staged up to 128K keys)
  (--op indexer --backend cuda: ms is the fused operator; the table adds our
   unfused pipeline (indexer_scores + topk) and its ratio, the fused kernel's
   math-only control and the exposed selection time; the fused result is
   verified against the unfused one)
  (--op decode: ms, GB/s of cache + q + w read, % of the in-run HBM read ceiling, and the
   times at that ceiling and at the FP8 GEMM rate; verified by the one checker against the
   backend's own scores of each request, unless over 2^28 scores)
replay options:
  --out FILE                write indices (and values with --values)
  --verify                  check the result exactly against the CPU reference scores
)";

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) return dsa::cli::run_default();
    const std::string command = argv[1];
    if (command == "-h" || command == "--help" || command == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const dsa::cli::Args args(argc, argv, 2);
    if (command == "check") return dsa::cli::run_check(args);
    if (command == "bench") return dsa::cli::run_bench(args);
    if (command == "replay") return dsa::cli::run_replay(args);
    if (command == "generate") return dsa::cli::run_generate(args);
    std::fprintf(stderr, "dsa-topk: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsa-topk: %s\n", e.what());
    return 2;
  }
}
