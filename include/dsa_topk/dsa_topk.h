// dsa_topk: exact top-k for the DeepSeek Sparse Attention (DSA) Indexer.
//
// Public C++ API. Two operators:
//   * indexer_topk: scores every key of each query row's range and returns the
//     K highest (contract section 1), without materialising the [T, N] scores.
//   * topk: the same selection over an fp32 score matrix (contract section 5).
//
// Every call follows the two-call pattern: query the workspace size, then run.
// Arguments are validated before anything runs; a rejected call writes nothing
// and returns a Status whose message names the argument and the broken rule.
// A call runs on exactly the backend it names; it never falls back to another.
//
// This header has no CUDA dependency: a stream is passed as `CUstream_st*`,
// which is what `cudaStream_t` is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

struct CUstream_st;

namespace dsa {

// ---------------------------------------------------------------- status ----

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // shape, dtype, stride, alignment, range or pointer rule broken
  kUnsupported,      // valid request this build or backend does not provide
  kNonFiniteInput,   // options.check_finite found NaN/Inf in an input
  kCudaError,        // the CUDA runtime reported an error
  kInternal,         // a bug in this library
};

const char* to_string(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // "<argument>: <rule it broke> (<values>)" for kInvalidArgument.
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// --------------------------------------------------------------- options ----

enum class Backend {
  kCpu,   // host threads; all pointers must be host memory. The exact reference.
  kCuda,  // the GPU kernels; all pointers must be device memory.
};

enum class TieBreak {
  kAny,            // any valid choice among scores equal to the K-th score
  kSmallestIndex,  // deterministic: ties at the K-th score go to the smallest indices
};

enum class IndexBase {
  kAbsolute,  // indices[t][i] is a key index s in [ks[t], ke[t])
  kRelative,  // indices[t][i] is s - ks[t] (vLLM's prefill convention)
};

// The K values the library is built for (contract section 1).
inline constexpr int kSupportedK[] = {512, 1024, 2048};
// Head counts (H) and head dimension (D) the indexer supports.
inline constexpr int kSupportedHeads[] = {32, 64};
inline constexpr int kHeadDim = 128;

struct SelectOptions {
  int k = 2048;                          // one of kSupportedK
  TieBreak ties = TieBreak::kAny;        //
  IndexBase index_base = IndexBase::kAbsolute;
  bool sorted = false;                   // each row by descending score; in
                                         // kSmallestIndex mode equal scores by
                                         // ascending index
  bool check_finite = false;             // reject NaN/Inf inputs with kNonFiniteInput
                                         // instead of ranking NaN scores as -inf
};

// Where and how a call runs.
struct ExecutionContext {
  Backend backend = Backend::kCpu;
  CUstream_st* stream = nullptr;  // kCuda: the stream every launch goes to
  int num_threads = 0;            // kCpu: worker threads, 0 = hardware concurrency
  void* workspace = nullptr;      // at least *_workspace_size() bytes; may be null
  std::size_t workspace_bytes = 0;//   when that size is 0. Backend-side memory.
  // kCuda: validate every row's [ks, ke) before launching, which reads ks/ke
  // back with a device-to-host copy and synchronises `stream`. false skips
  // that (CUDA graph capture, hot loops): the kernels then clamp each row to
  // [0, N) so memory stays safe, but a row with an invalid range gets an
  // unspecified (in-bounds) result. kCpu always validates.
  bool check_ranges = true;
};

// ------------------------------------------------------ indexer inputs -----
//
// For every row t and key s in [ks[t], ke[t]):
//   score(t, s) = k_scale[s] * sum_{h<H} w[t, h] * ReLU(sum_{d<D} q[t, h, d] * k[s, d])
struct IndexerInputs {
  const std::uint8_t* q = nullptr;       // [T, H, D] FP8 e4m3fn, contiguous, 16-byte aligned
  const std::uint8_t* k = nullptr;       // [N, D] FP8 e4m3fn, rows k_row_stride bytes apart,
                                         //   16-byte aligned
  const float* k_scale = nullptr;        // [N] fp32, finite and > 0, 16-byte aligned
  const float* w = nullptr;              // [T, H] fp32, any sign, contiguous
  const std::int32_t* ks = nullptr;      // [T] int32, 0 <= ks[t] <= ke[t]
  const std::int32_t* ke = nullptr;      // [T] int32, ke[t] <= N
  std::int64_t num_queries = 0;          // T >= 0
  std::int64_t num_keys = 0;             // N, 0 <= N <= INT32_MAX
  int num_heads = 64;                    // H, one of kSupportedHeads
  int head_dim = kHeadDim;               // D, must be kHeadDim
  std::int64_t k_row_stride = kHeadDim;  // bytes between k rows: >= D, multiple of 16
};

// ------------------------------------------------------ indexer top-k -------
// Returns, per row, the indices of the K highest scores.
struct IndexerTopkParams : IndexerInputs {
  std::int32_t* indices = nullptr;       // [T, K] int32: min(K, len) distinct indices,
                                         //   then -1 padding
  float* values = nullptr;               // [T, K] fp32 or null: scores of `indices`,
                                         //   -inf in padded slots
  SelectOptions options;
};

Status indexer_topk_workspace_size(const IndexerTopkParams& params, Backend backend,
                                   std::size_t* bytes);
Status indexer_topk(const IndexerTopkParams& params, const ExecutionContext& ctx);

// ------------------------------------------------------ indexer scores -----
// The scores themselves: the unfused pipeline's first stage. Entries of a row
// outside [ks[t], ke[t]) are not written unless fill_outside is set. The CUDA
// backend's scores are bit-identical to the fused operator's (they share the
// arithmetic).
struct IndexerScoresParams : IndexerInputs {
  float* scores = nullptr;               // [T, score_stride] fp32, 4-byte aligned
  std::int64_t score_stride = 0;         // elements between rows, >= N
  bool fill_outside = false;             // also write -inf to columns [0, ks[t]) and
                                         //   [ke[t], N) of every row (what a caller
                                         //   that reads whole rows needs); columns
                                         //   [N, score_stride) are never written
};

Status indexer_scores(const IndexerScoresParams& params, const ExecutionContext& ctx);

// ------------------------------------------------------ standalone top-k ----
//
// The same selection over fp32 scores: row t's candidates are
// scores[t * score_stride + s] for s in [ks[t], ke[t]).
struct TopkParams {
  const float* scores = nullptr;         // [T, score_stride] fp32, 4-byte aligned
  const std::int32_t* ks = nullptr;      // [T] int32, 0 <= ks[t] <= ke[t]
  const std::int32_t* ke = nullptr;      // [T] int32, ke[t] <= num_cols
  std::int64_t num_rows = 0;             // T >= 0
  std::int64_t num_cols = 0;             // N: valid columns per row, <= INT32_MAX
  std::int64_t score_stride = 0;         // elements between rows, >= num_cols
  std::int32_t* indices = nullptr;       // [T, K] int32 (as IndexerTopkParams::indices)
  float* values = nullptr;               // [T, K] fp32 or null
  SelectOptions options;
};

Status topk_workspace_size(const TopkParams& params, Backend backend, std::size_t* bytes);
Status topk(const TopkParams& params, const ExecutionContext& ctx);

// ---------------------------------------------------------- validation -----
//
// The checks the operators run first, exposed so callers (and tests) can
// validate without running. For Backend::kCuda the per-row range rules read
// ks/ke from device memory with a synchronous copy; see docs/design.md.
Status validate(const IndexerTopkParams& params, Backend backend);
Status validate(const IndexerScoresParams& params, Backend backend);
Status validate(const TopkParams& params, Backend backend);

enum class Operator { kIndexerTopk, kIndexerScores, kTopk };

// Whether this process can run `op` on Backend::kCuda (a usable Hopper GPU is
// present and this version has a kernel for `op`); `why` says why not.
bool cuda_backend_available(Operator op, std::string* why = nullptr);

}  // namespace dsa
