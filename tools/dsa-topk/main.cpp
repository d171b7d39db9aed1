// dsa-topk: run, verify and time the DSA indexer top-k.
//
// This file is the command line's grammar: each command's options, which of
// them take a value, and the help text; args.cpp parses them (CLI11),
// commands.cpp is what they do.
// Exit codes: 0 everything passed, 1 a result failed or errored (or the
// machine could not run it), 2 a usage error (named in the message).
#include <fmt/core.h>

#include <algorithm>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"

namespace {

using dsa::cli::Args;
using dsa::cli::CommandSpec;
using dsa::cli::OptionSpec;

constexpr int kUsageError = 2;
constexpr int kFailed = 1;

struct Command {
  const char* summary;  // one line for the program's help
  CommandSpec spec;     // its about: what it does, and notes that concern several options
  int (*run)(const Args&);
};

// ------------------------------------------------------------- options ----
// Shared by several commands; each command lists the ones it applies.

const OptionSpec kBackend{"backend", "cpu|cuda", "the backend that runs the operator (default cpu)"};
const OptionSpec kLayout{"layout", "NAME", "causal-suffix (default), varlen-batch, context-parallel,\nboundary, full"};
const OptionSpec kT{"T", "N", "query rows (default 64)"};
const OptionSpec kN{"N", "N", "keys (default 16384)"};
const OptionSpec kK{"K", "K", "512, 1024 or 2048 (default 2048)"};
const OptionSpec kHeads{"heads", "H", "32 or 64 (default 64)"};
const OptionSpec kSeed{"seed", "S", "generator seed (default 1)"};
const OptionSpec kThreads{"threads", "N", "CPU worker threads of the CPU backend and the\n"
                                          "verification (default 0: every hardware thread)"};
const OptionSpec kDeterministic{"deterministic", "", "ties go to the smallest index"};
const OptionSpec kRelative{"relative", "", "indices relative to ks"};
const OptionSpec kSorted{"sorted", "", "each row by descending score"};
const OptionSpec kValues{"values", "", "also return the selected scores"};
const OptionSpec kDecodeB{"B", "N", "--op decode: requests"};
const OptionSpec kDecodeNextN{"next-n", "N", "--op decode: query tokens of each request (1-8)"};
const OptionSpec kDecodeL{"L", "N", "--op decode: every request's context length"};
const OptionSpec kDecodeBlockSize{"block-size", "16|32|64|128", "--op decode: cache block size (default 64)"};
const OptionSpec kDecodeTableKeys{"table-keys", "N",
                                  "--op decode: keys the block table covers a request, >= L\n"
                                  "(default L; an engine's table sized for its longest context)"};
const OptionSpec kDecodeStaleTable{"stale-table", "",
                                   "--op decode: table entries past a request's blocks point at real\n"
                                   "blocks, as an engine's reused rows do (default: -1 and past the cache)"};
const OptionSpec kMergeP{"P", "N", "--op merge: parts (bench: one value instead of 2, 4, 8)"};
const OptionSpec kMergeR{"R", "N", "--op merge: rows (bench: one value instead of 64, 4096)"};
const OptionSpec kMergePartK{"part-k", "N", "--op merge: entries per part and row (default K)"};

constexpr const char* kDistributions = "model-like, ties, dead-relu, mixed-sign, shifted,\nsmall-integer";

// -------------------------------------------------------------- commands --

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run an operator on generated inputs and verify it exactly",
       {"check",
        "Runs an operator on generated inputs, once per distribution and layout, and verifies each\n"
        "result exactly against the operator's own fp32 scores; prints a results table.\n"
        "--op decode runs indexer_topk_paged over a paged cache: one shape (default B 3 x next-n 2\n"
        "x L 5000), not --T --N --layout --relative.\n"
        "--op merge runs merge_topk over P parts' top-part_k lists: one shape (default P 3 x R 40,\n"
        "part_k = K), verified bit for bit against the CPU reference.",
        {kBackend,
         {"op", "indexer|topk|decode|merge", "operator (default indexer)"},
         {"dist", "NAME[,NAME]|all", std::string(kDistributions) + " (default all)"},
         {"layout", "NAME|all", "causal-suffix (default), varlen-batch, context-parallel,\nboundary, full"},
         kT, kN, kK, kHeads, kSeed, kThreads, kDeterministic, kRelative, kSorted, kValues, kDecodeB, kDecodeNextN,
         kDecodeL, kDecodeBlockSize, kDecodeTableKeys, kDecodeStaleTable, kMergeP, kMergeR, kMergePartK},
        {}},
       dsa::cli::run_check},
      {"time operators on a shape grid; prints ms, pairs/s, TFLOP/s",
       {"bench",
        "Times operators on a shape grid and prints ms, pairs/s and TFLOP/s (or TB/s), each timed result\n"
        "verified exactly. Exit code 1 when any row is wrong or errors.\n"
        "--op indexer --backend cuda: ms is the fused operator; the table adds our unfused pipeline\n"
        "(indexer_scores + topk) and its ratio, the fused kernel's math-only control and the exposed\n"
        "selection time; the fused result is verified against the unfused one.\n"
        "--op decode: ms, GB/s of cache + q + w read, % of the in-run HBM read ceiling, and the times\n"
        "at that ceiling and at the FP8 GEMM rate; --B, --next-n, --L each replace their axis of the\n"
        "decode grid (B 1,4,32,128,256 x next_n 1,2,4 x L 8K,32K,128K, and 1M for B <= 4). On cuda,\n"
        "by shape, the operator's routes pinned (unfused; fused and streaming selection where they can\n"
        "take the call) are timed call by call in turn with it and verified too, beside its math-only\n"
        "control; each row shows issue #34's target; --route R times route R alone.\n"
        "--op merge: merge_topk over P parts' top-part_k lists of R rows, generated as context-parallel\n"
        "ranks make them; ms, GB/s of the parts read + the [R, K] result written, % of the in-run HBM\n"
        "read ceiling, verified bit for bit against the CPU reference; grid P 2,4,8 x R 64,4096 at\n"
        "K 2048, part_k = K, and P 2 x R 4096 at K 512; --P, --R each replace their axis (then, as\n"
        "with --K or --part-k, without the K 512 row), --K and --part-k set every row's.",
        {kBackend,
         {"op", "indexer|scores|topk|decode|merge",
          "operator (default indexer; scores: the scoring kernel alone,\n"
          "--backend cuda; decode: indexer_topk_paged over a paged cache;\n"
          "merge: merge_topk over P parts' lists)"},
         {"dist", "NAME[,NAME]|all", std::string(kDistributions) + " (default model-like)"},
         kLayout,
         {"grid", "small|h200|decode",
          "shape grid (default small; h200: the grid of shared/h200.md;\n"
          "decode: 1-128 rows of 32K-1M keys; --op decode always runs\n"
          "the decode grid)"},
         {"T", "N", "with --N: one shape instead of a grid"},
         {"N", "N", "with --T: one shape instead of a grid"},
         kK, kHeads, kSeed, kThreads, kDeterministic, kRelative, kSorted, kValues, kDecodeB, kDecodeNextN, kDecodeL,
         kDecodeBlockSize, kDecodeTableKeys, kDecodeStaleTable, kMergeP, kMergeR, kMergePartK,
         {"reps", "N", "timed repetitions, the median reported (default 3 on cpu,\n20 on cuda)"},
         {"json", "FILE", "also write the results as JSON"},
         {"no-verify", "", "skip the exactness check of each timed result"},
         {"baselines", "",
          "(--op topk --backend cuda) also time CUB's segmented radix\n"
          "sort and one read of the rows (the floor, timed the same way)"},
         {"warm-l2", "",
          "(--backend cuda) do not flush L2 before each timed call\n"
          "(default: flushed, so inputs come from device memory as on\n"
          "fresh data)"},
         {"rest-ms", "M",
          "(--backend cuda) let the GPU idle M ms before each timed call\n"
          "(default 0: back to back, as an engine runs; under sustained\n"
          "load the 700 W cap lowers the clock within some tens of ms,\n"
          "so long rows time slower)"},
         {"route", "ROUTE",
          "(--backend cuda) the operator's route: --op indexer by-shape,\n"
          "fused or unfused (default by shape: unfused up to 128K keys);\n"
          "--op decode by-shape, fused-select (where the select kernel\n"
          "can take the call), stream-select (one-token rows, any ties,\n"
          "unsorted), bar-select (one-token rows, H 64, positions) or\n"
          "unfused"}},
        {}},
       dsa::cli::run_bench},
      {"run the indexer on a safetensors dump",
       {"replay",
        "Runs the indexer on a safetensors dump (q, k, k_scale, w, ks, ke and metadata topk, as\n"
        "generate writes it or an engine saves it).",
        {kBackend,
         {"K", "K", "512, 1024 or 2048 (default: the file's topk)"},
         kThreads, kDeterministic, kRelative, kSorted, kValues,
         {"verify", "", "check the result exactly against the operator's own fp32\nscores"},
         {"check-finite", "",
          "reject NaN/Inf in q, k, k_scale or w (exit code 1, the\n"
          "first one named) instead of ranking NaN scores as -inf"},
         {"out", "FILE", "write indices (and values with --values)"}},
        {"IN", "", "the safetensors dump to run"}},
       dsa::cli::run_replay},
      {"write a generated problem as a safetensors dump",
       {"generate",
        "Writes a generated indexer problem as a safetensors dump for replay.",
        {{"out", "FILE", "the dump to write (required)"},
         {"dist", "NAME", std::string(kDistributions) + " (default model-like)"},
         kLayout, kT, kN,
         {"K", "K", "the topk the dump records: 512, 1024 or 2048 (default\n2048)"},
         kHeads, kSeed},
        {}},
       dsa::cli::run_generate},
  };
  return table;
}

void print_usage() {
  fmt::print(
      "usage: dsa-topk [COMMAND [OPTIONS]]\n\n"
      "With no command, runs a short exactness check of every input distribution on the best\n"
      "available backend and prints a results table.\n\ncommands:\n");
  for (const Command& c : commands()) fmt::print("  {:<10} {}\n", c.spec.name, c.summary);
  fmt::print("\n'dsa-topk COMMAND --help' (or -h) lists a command's options.\n"
             "Exit code: 0 all passed, 1 a result failed or errored, 2 a usage error.\n");
}

const Command* find_command(const std::string& name) {
  const auto& table = commands();
  const auto it = std::find_if(table.begin(), table.end(), [&](const Command& c) { return name == c.spec.name; });
  return it == table.end() ? nullptr : &*it;
}

int unknown_command(const std::string& word) {
  fmt::print(stderr, "dsa-topk: unknown command '{}'{}\n\n", word,
             word.rfind("-", 0) == 0 ? " (options follow the command: dsa-topk COMMAND [OPTIONS])" : "");
  print_usage();
  return kUsageError;
}

// Runs a command: its errors as a message after `prefix` and an exit code.
template <typename Run>
int guarded(const std::string& prefix, Run run) {
  try {
    return run();
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "{}: {}\n", prefix, e.what());
    return kUsageError;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "{}: out of host memory (std::bad_alloc) running or verifying the operator: a smaller --T or --N "
               "(--op decode: --B or --L) needs less\n",
               prefix);
    return kFailed;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", prefix, e.what());
    return kFailed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return guarded("dsa-topk", dsa::cli::run_default);
  const std::string word = argv[1];
  if (word == "-h" || word == "--help" || (word == "help" && argc == 2)) {
    print_usage();
    return 0;
  }
  if (word == "help") {
    const Command* c = find_command(argv[2]);
    if (!c) return unknown_command(argv[2]);
    fmt::print("{}", dsa::cli::help_text(c->spec));
    return 0;
  }
  const Command* command = find_command(word);
  if (!command) return unknown_command(word);
  return guarded("dsa-topk " + command->spec.name, [&] {
    const Args args(command->spec, argc, argv, 2);
    if (!args.help()) return command->run(args);
    fmt::print("{}", dsa::cli::help_text(command->spec));
    return 0;
  });
}
