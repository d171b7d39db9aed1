// dsa_topk: exact top-k for the DeepSeek Sparse Attention (DSA) Indexer.
//
// Public C++ API. The operators:
//   * indexer_topk: scores every key of each query row's range and returns the
//     K highest (contract section 1), without materialising the [T, N] scores.
//   * indexer_scores: those scores themselves (the unfused pipeline's stage).
//   * topk: the same selection over an fp32 score matrix (contract section 5).
//   * indexer_topk_paged: indexer_topk for decode, keys read through a paged
//     cache's block table.
//   * merge_topk: the exact top K over several parts' top-K lists.
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

// ------------------------------------------------------ paged (decode) -----
//
// Decode: B requests with next_n query tokens each, every row scoring its
// request's cached keys through a block table, as the engines keep the
// indexer's key cache. Row r = b * next_n + j (request b, token j) scores the
// request-local positions p in [0, len(b, j)):
//   len(b, j) = max(0, context_lens[b] - next_n + j + 1)  (lens_per_token false)
//   len(b, j) = context_lens[b * next_n + j]               (lens_per_token true)
// Position p is row p % block_size of cache block block_table[b, p / block_size];
// its score is the indexer score of that block's key and scale.
inline constexpr int kSupportedBlockSizes[] = {16, 32, 64, 128};
inline constexpr int kMaxNextN = 8;

struct PagedIndexerInputs {
  const std::uint8_t* q = nullptr;            // [B, next_n, H, D] FP8 e4m3fn, contiguous,
                                              //   16-byte aligned
  const std::uint8_t* kv_cache = nullptr;     // [num_blocks, block_size * (D + 4)] bytes:
                                              //   a block's block_size x D FP8 key bytes,
                                              //   then its block_size fp32 scales (finite,
                                              //   > 0); 16-byte aligned
  const std::int32_t* block_table = nullptr;  // [B, block_table_stride] int32; entries of
                                              //   the used positions in [0, num_blocks)
  const std::int32_t* context_lens = nullptr; // [B] int32, or [B, next_n] (lens_per_token)
  const float* w = nullptr;                   // [B * next_n, H] fp32, any sign, contiguous
  std::int64_t batch = 0;                     // B >= 0
  int next_n = 1;                             // query tokens per request, 1..kMaxNextN
  int num_heads = 64;                         // H, one of kSupportedHeads
  int head_dim = kHeadDim;                    // D, must be kHeadDim
  std::int64_t num_blocks = 0;                // cache blocks, <= INT32_MAX
  int block_size = 64;                        // one of kSupportedBlockSizes
  std::int64_t max_blocks_per_seq = 0;        // table entries a request may use:
                                              //   every len(b, j) <= max_blocks_per_seq * block_size
  std::int64_t block_table_stride = 0;        // elements between table rows, >= max_blocks_per_seq
  bool lens_per_token = false;                // context_lens is [B, next_n]

  std::int64_t num_rows() const { return batch * next_n; }
  std::int64_t max_context() const { return max_blocks_per_seq * block_size; }
};

struct PagedIndexerTopkParams : PagedIndexerInputs {
  std::int32_t* indices = nullptr;            // [B * next_n, K] int32: min(K, len) distinct
                                              //   positions in [0, len(b, j)), then -1 padding
  float* values = nullptr;                    // [B * next_n, K] fp32 or null
  bool physical_slots = false;                // indices as cache slots
                                              //   block_table[b, p / bs] * bs + p % bs instead of
                                              //   positions p (SGLang's and FlashInfer's form)
  SelectOptions options;                      // index_base must be kAbsolute (positions
                                              //   start at 0: the two bases agree)
};

// On the CUDA backend ExecutionContext::check_ranges reads context_lens and the
// used block-table entries back (a device-to-host copy, synchronising the
// stream) and rejects a negative length, one past max_context(), or an entry
// outside [0, num_blocks). With it off (CUDA graphs) lengths are clamped to
// [0, max_context()] and an entry outside [0, num_blocks) reads zero keys, so
// memory stays safe, but such a row's result is unspecified.
Status indexer_topk_paged_workspace_size(const PagedIndexerTopkParams& params, Backend backend,
                                         std::size_t* bytes);
Status indexer_topk_paged(const PagedIndexerTopkParams& params, const ExecutionContext& ctx);

// ------------------------------------------------------------ merge top-k ---
//
// Per row, the top K over the entries of P parts (a request's context split
// over CTAs, context-parallel ranks): entry (p, r, i) is the candidate
// indices[(p * R + r) * part_k + i] with score values[...]; index -1 is an
// empty slot (ignored), any other negative index is invalid. Within a row the
// non-empty indices must be distinct across parts (the parts cover disjoint
// keys); a row with duplicates gets an unspecified (in-bounds) result. NaN
// ranks as -inf; values are returned as given. Ties at the K-th score follow
// options.ties; options.index_base must be kAbsolute (indices pass through).
struct MergeTopkParams {
  const float* values = nullptr;          // [P, R, part_k] fp32
  const std::int32_t* indices = nullptr;  // [P, R, part_k] int32, -1 = empty
  std::int64_t num_parts = 0;             // P >= 0
  std::int64_t num_rows = 0;              // R >= 0
  std::int64_t part_k = 0;                // entries per part and row, >= 1 when P * R > 0
  std::int32_t* out_indices = nullptr;    // [R, K] int32: min(K, non-empty) indices, then -1
  float* out_values = nullptr;            // [R, K] fp32 or null: -inf in padded slots
  SelectOptions options;
};

Status merge_topk_workspace_size(const MergeTopkParams& params, Backend backend, std::size_t* bytes);
Status merge_topk(const MergeTopkParams& params, const ExecutionContext& ctx);

// ---------------------------------------------------------- validation -----
//
// The checks the operators run first, exposed so callers (and tests) can
// validate without running. For Backend::kCuda the per-row rules read their
// data from device memory with a synchronous copy: ks/ke, the paged
// operator's context_lens and used block-table entries, merge_topk's
// indices (docs/contract.md, "Bad input").
Status validate(const IndexerTopkParams& params, Backend backend);
Status validate(const IndexerScoresParams& params, Backend backend);
Status validate(const TopkParams& params, Backend backend);
Status validate(const PagedIndexerTopkParams& params, Backend backend);
Status validate(const MergeTopkParams& params, Backend backend);

enum class Operator { kIndexerTopk, kIndexerScores, kTopk, kIndexerTopkPaged, kMergeTopk };

// Whether this process can run `op` on Backend::kCuda (a usable Hopper GPU is
// present and this version has a kernel for `op`); `why` says why not.
bool cuda_backend_available(Operator op, std::string* why = nullptr);

}  // namespace dsa
