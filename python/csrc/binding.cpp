// The PyTorch binding: the public C++ API (include/dsa_topk/dsa_topk.h) as
// ops in the `dsa_topk` namespace. Argument plumbing only: tensors become the
// params structs, the current torch CUDA stream becomes the context's stream,
// workspace comes from the caching allocator, and a non-OK dsa::Status becomes
// a Python RuntimeError carrying the library's message. Validation rules live
// in the library; this file adds only what the library cannot see (dtypes,
// devices, tensor shapes and strides) and names the tensor argument for every
// library size it derives.
//
// The fake (meta) implementations that torch.compile traces with are in
// python/dsa_topk/_fake.py.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dsa_topk/dsa_topk.h"

namespace dsa_torch {
namespace {

// Where each size the library names in its messages comes from, per op.
using Origins = std::vector<std::pair<const char*, const char*>>;

// A rejected call raises with the library's "<argument>: <rule> (<values>)"
// message, plus the tensor expression behind a derived size.
void raise_if_error(const dsa::Status& status, const char* op, const Origins& origins) {
  if (status.ok()) return;
  std::string origin;
  for (const auto& [name, source] : origins) {
    if (status.message().rfind(name, 0) == 0) {
      origin = std::string(" [") + name + " is " + source + "]";
      break;
    }
  }
  TORCH_CHECK(false, "dsa_topk.", op, ": ", status.to_string(), origin);
}

// ------------------------------------------------------------ tensor rules --

void check_device(const at::Tensor& t, const char* name, const at::Device& device) {
  TORCH_CHECK(t.is_cuda(), name, ": must be a CUDA tensor (got ", t.device(), ")");
  TORCH_CHECK(t.device() == device, name, ": must be on ", device, " like the other inputs (got ", t.device(), ")");
}

// dtype, device and rank of one tensor argument: `dim`, or either of two
// ranks for the arguments that accept two layouts.
void check_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t dim,
                  const at::Device& device, int64_t other_dim = -1) {
  check_device(t, name, device);
  TORCH_CHECK(t.scalar_type() == dtype, name, ": must have dtype ", dtype, " (got ", t.scalar_type(), ")");
  if (other_dim < 0) {
    TORCH_CHECK(t.dim() == dim, name, ": must have ", dim, " dimensions (got shape ", t.sizes(), ")");
  } else {
    TORCH_CHECK(t.dim() == dim || t.dim() == other_dim, name, ": must have ", dim, " or ", other_dim,
                " dimensions (got shape ", t.sizes(), ")");
  }
}

void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), name, ": must be contiguous (got shape ", t.sizes(), ", strides ", t.strides(),
              ")");
}

void check_size(const at::Tensor& t, const char* name, int64_t dim, int64_t expected, const char* what) {
  TORCH_CHECK(t.size(dim) == expected, name, ": size(", dim, ") must be ", what, " = ", expected, " (got shape ",
              t.sizes(), ")");
}

// The library writes [T, K] int32 indices (and optionally fp32 values).
void check_outputs(const at::Tensor& indices, const std::optional<at::Tensor>& values, int64_t rows,
                   const char* rows_what, const at::Device& device) {
  check_tensor(indices, "indices", at::kInt, 2, device);
  check_size(indices, "indices", 0, rows, rows_what);
  check_contiguous(indices, "indices");
  if (values) {
    check_tensor(*values, "values", at::kFloat, 2, device);
    TORCH_CHECK(values->sizes() == indices.sizes(), "values: must have the shape of indices ", indices.sizes(),
                " (got ", values->sizes(), ")");
    check_contiguous(*values, "values");
  }
}

template <typename T>
T* data(const at::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// A size for an int field of a params struct: saturated, so that an
// oversized tensor is rejected by the library's range rule instead of
// wrapping into a valid value.
int saturate_int(int64_t v) { return static_cast<int>(std::min<int64_t>(v, std::numeric_limits<int>::max())); }

// q [T, H, D] FP8, k [N, D] FP8 (rows may be strided), k_scale [N] fp32,
// w [T, H] fp32, ks/ke [T] int32, all on q's CUDA device.
dsa::IndexerInputs indexer_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale,
                                  const at::Tensor& w, const at::Tensor& ks, const at::Tensor& ke) {
  TORCH_CHECK(q.is_cuda(), "q: must be a CUDA tensor (got ", q.device(), ")");
  const at::Device device = q.device();
  check_tensor(q, "q", at::kFloat8_e4m3fn, 3, device);
  check_contiguous(q, "q");
  const int64_t T = q.size(0), H = q.size(1), D = q.size(2);
  check_tensor(k, "k", at::kFloat8_e4m3fn, 2, device);
  check_size(k, "k", 1, D, "q.size(2)");
  const int64_t N = k.size(0);
  TORCH_CHECK(N == 0 || k.stride(1) == 1, "k: each row must be contiguous, k.stride(1) == 1 (got strides ",
              k.strides(), ")");
  check_tensor(k_scale, "k_scale", at::kFloat, 1, device);
  check_size(k_scale, "k_scale", 0, N, "k.size(0)");
  check_contiguous(k_scale, "k_scale");
  check_tensor(w, "w", at::kFloat, 2, device);
  check_size(w, "w", 0, T, "q.size(0)");
  check_size(w, "w", 1, H, "q.size(1)");
  check_contiguous(w, "w");
  for (const auto& [t, name] : {std::pair{&ks, "ks"}, std::pair{&ke, "ke"}}) {
    check_tensor(*t, name, at::kInt, 1, device);
    check_size(*t, name, 0, T, "q.size(0)");
    check_contiguous(*t, name);
  }

  dsa::IndexerInputs in;
  in.q = data<const std::uint8_t>(q);
  in.k = data<const std::uint8_t>(k);
  in.k_scale = data<const float>(k_scale);
  in.w = data<const float>(w);
  in.ks = data<const std::int32_t>(ks);
  in.ke = data<const std::int32_t>(ke);
  in.num_queries = T;
  in.num_keys = N;
  in.num_heads = static_cast<int>(H);
  in.head_dim = static_cast<int>(D);
  in.k_row_stride = N > 1 ? k.stride(0) : D;  // FP8: one byte per element
  return in;
}

const Origins kIndexerOrigins = {{"num_queries", "q.size(0)"}, {"num_heads", "q.size(1)"},
                                 {"head_dim", "q.size(2)"},    {"num_keys", "k.size(0)"},
                                 {"k_row_stride", "k.stride(0) in bytes"}};

dsa::SelectOptions select_options(int64_t k, bool relative, bool deterministic, bool sorted) {
  dsa::SelectOptions o;
  o.k = saturate_int(k);
  o.ties = deterministic ? dsa::TieBreak::kSmallestIndex : dsa::TieBreak::kAny;
  o.index_base = relative ? dsa::IndexBase::kRelative : dsa::IndexBase::kAbsolute;
  o.sorted = sorted;
  return o;
}

// The CUDA context of a call: the current torch stream on `device`, and a
// workspace of `bytes` from the caching allocator (kept alive by `*holder`).
dsa::ExecutionContext cuda_context(const at::Device& device, std::size_t bytes, bool check_ranges,
                                   at::Tensor* holder) {
  dsa::ExecutionContext ctx;
  ctx.backend = dsa::Backend::kCuda;
  ctx.stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  ctx.check_ranges = check_ranges;
  if (check_ranges) {
    // The range check copies ks/ke to the host and synchronises: not
    // allowed inside a capture, where it would invalidate the graph.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(ctx.stream, &capture) != cudaSuccess) {
      cudaGetLastError();  // leave no error behind for the library's launch checks
      capture = cudaStreamCaptureStatusNone;
    }
    TORCH_CHECK(capture == cudaStreamCaptureStatusNone,
                "check_ranges: must be False while the current stream is capturing a CUDA graph (the range "
                "check copies the row ranges or lengths to the host and synchronises)");
  }
  if (bytes > 0) {
    *holder = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(device));
    ctx.workspace = holder->data_ptr();
    ctx.workspace_bytes = bytes;
  }
  return ctx;
}

// The two-call pattern of one operator on the CUDA backend: its workspace
// size, then the run on the current stream with that workspace.
template <typename Params>
void run_on_cuda(const Params& p, dsa::Status (*workspace_size)(const Params&, dsa::Backend, std::size_t*),
                 dsa::Status (*run)(const Params&, const dsa::ExecutionContext&), const at::Device& device,
                 bool check_ranges, const char* op, const Origins& origins) {
  std::size_t bytes = 0;
  raise_if_error(workspace_size(p, dsa::Backend::kCuda, &bytes), op, origins);
  at::Tensor workspace;
  const dsa::ExecutionContext ctx = cuda_context(device, bytes, check_ranges, &workspace);
  raise_if_error(run(p, ctx), op, origins);
}

// ---------------------------------------------------------------- operators --

void run_indexer_topk(const dsa::IndexerTopkParams& p, const at::Device& device, bool check_ranges,
                      const char* op, const Origins& origins) {
  run_on_cuda(p, &dsa::indexer_topk_workspace_size, &dsa::indexer_topk, device, check_ranges, op, origins);
}

void indexer_topk_out(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale, const at::Tensor& w,
                      const at::Tensor& ks, const at::Tensor& ke, const at::Tensor& indices,
                      const std::optional<at::Tensor>& values, bool relative, bool deterministic, bool sorted,
                      bool check_ranges) {
  dsa::IndexerTopkParams p;
  static_cast<dsa::IndexerInputs&>(p) = indexer_inputs(q, k, k_scale, w, ks, ke);
  const c10::cuda::CUDAGuard guard(q.device());
  check_outputs(indices, values, p.num_queries, "q.size(0)", q.device());
  p.indices = data<std::int32_t>(indices);
  p.values = values ? data<float>(*values) : nullptr;
  p.options = select_options(indices.size(1), relative, deterministic, sorted);
  Origins origins = kIndexerOrigins;
  origins.emplace_back("options.k", "indices.size(1)");
  run_indexer_topk(p, q.device(), check_ranges, "indexer_topk_out", origins);
}

std::tuple<at::Tensor, at::Tensor> indexer_topk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale,
                                                const at::Tensor& w, const at::Tensor& ks, const at::Tensor& ke,
                                                int64_t topk, bool relative, bool deterministic, bool sorted,
                                                bool return_values, bool check_ranges) {
  dsa::IndexerTopkParams p;
  static_cast<dsa::IndexerInputs&>(p) = indexer_inputs(q, k, k_scale, w, ks, ke);
  const c10::cuda::CUDAGuard guard(q.device());
  TORCH_CHECK(topk >= 0, "topk: must be one of 512, 1024, 2048 (got ", topk, ")");
  // The kernels write every slot (-1 padding), so the outputs start empty.
  const at::TensorOptions on_device = at::TensorOptions().device(q.device());
  at::Tensor indices = at::empty({p.num_queries, topk}, on_device.dtype(at::kInt));
  at::Tensor values = at::empty({return_values ? p.num_queries : 0, return_values ? topk : 0},
                                on_device.dtype(at::kFloat));
  p.indices = data<std::int32_t>(indices);
  p.values = return_values ? data<float>(values) : nullptr;
  p.options = select_options(topk, relative, deterministic, sorted);
  Origins origins = kIndexerOrigins;
  origins.emplace_back("options.k", "topk");
  run_indexer_topk(p, q.device(), check_ranges, "indexer_topk", origins);
  return {indices, values};
}

// Scores [T, N] fp32. With clean, entries outside a row's [ks, ke) are -inf,
// written by the library beside the scoring kernel (only those entries, so
// the op writes each entry once); without it they are left as allocated
// (DeepGEMM's clean_logits=False).
at::Tensor indexer_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale, const at::Tensor& w,
                          const at::Tensor& ks, const at::Tensor& ke, bool clean, bool check_ranges) {
  dsa::IndexerScoresParams p;
  static_cast<dsa::IndexerInputs&>(p) = indexer_inputs(q, k, k_scale, w, ks, ke);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor scores =
      at::empty({p.num_queries, p.num_keys}, at::TensorOptions().device(q.device()).dtype(at::kFloat));
  p.scores = data<float>(scores);
  p.score_stride = p.num_keys;
  p.fill_outside = clean;
  at::Tensor workspace;
  const dsa::ExecutionContext ctx = cuda_context(q.device(), 0, check_ranges, &workspace);
  raise_if_error(dsa::indexer_scores(p, ctx), "indexer_scores", kIndexerOrigins);
  return scores;
}

// Standalone top-k over scores [T, stride] fp32: row t's candidates are
// scores[t, ks[t]:ke[t]], with ke[t] <= num_cols (default scores.size(1)).
std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& scores, const at::Tensor& ks, const at::Tensor& ke,
                                        int64_t topk, std::optional<int64_t> num_cols, bool relative,
                                        bool deterministic, bool sorted, bool return_values, bool check_ranges) {
  TORCH_CHECK(scores.is_cuda(), "scores: must be a CUDA tensor (got ", scores.device(), ")");
  const at::Device device = scores.device();
  check_tensor(scores, "scores", at::kFloat, 2, device);
  const int64_t T = scores.size(0), cols = num_cols.value_or(scores.size(1));
  TORCH_CHECK(scores.numel() == 0 || scores.stride(1) == 1,
              "scores: each row must be contiguous, scores.stride(1) == 1 (got strides ", scores.strides(), ")");
  TORCH_CHECK(cols >= 0 && cols <= scores.size(1), "num_cols: must be in [0, scores.size(1) = ", scores.size(1),
              "] (got ", cols, ")");
  for (const auto& [t, name] : {std::pair{&ks, "ks"}, std::pair{&ke, "ke"}}) {
    check_tensor(*t, name, at::kInt, 1, device);
    check_size(*t, name, 0, T, "scores.size(0)");
    check_contiguous(*t, name);
  }
  TORCH_CHECK(topk >= 0, "topk: must be one of 512, 1024, 2048 (got ", topk, ")");
  const c10::cuda::CUDAGuard guard(device);
  const at::TensorOptions on_device = at::TensorOptions().device(device);
  at::Tensor indices = at::empty({T, topk}, on_device.dtype(at::kInt));
  at::Tensor values = at::empty({return_values ? T : 0, return_values ? topk : 0}, on_device.dtype(at::kFloat));

  dsa::TopkParams p;
  p.scores = data<const float>(scores);
  p.ks = data<const std::int32_t>(ks);
  p.ke = data<const std::int32_t>(ke);
  p.num_rows = T;
  p.num_cols = cols;
  p.score_stride = T > 1 ? scores.stride(0) : scores.size(1);
  p.indices = data<std::int32_t>(indices);
  p.values = return_values ? data<float>(values) : nullptr;
  p.options = select_options(topk, relative, deterministic, sorted);
  const Origins origins = {{"num_rows", "scores.size(0)"}, {"score_stride", "scores.stride(0)"},
                           {"options.k", "topk"}};
  run_on_cuda(p, &dsa::topk_workspace_size, &dsa::topk, device, check_ranges, "topk", origins);
  return {indices, values};
}

// ------------------------------------------------------------ paged decode --

// q [B, next_n, H, D] FP8 contiguous; kv_cache [num_blocks, block_size, D + 4]
// or [num_blocks, block_size * (D + 4)] uint8 contiguous; block_table
// [B, max_blocks] int32, rows contiguous (the row stride may exceed the
// width); context_lens [B] or [B, next_n] int32 (the second sets
// lens_per_token); w [B * next_n, H] or [B, next_n, H] fp32; all on q's CUDA
// device. The cache's block size is not an argument: it is the cache's
// shape, kv_cache.size(1) in the 3-D form and kv_cache.size(1) / (D + 4) in
// the 2-D form (vLLM allocates the first, SGLang the second). `*origins`
// receives the tensor expression of every size the library names.
dsa::PagedIndexerInputs paged_inputs(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& block_table,
                                     const at::Tensor& context_lens, const at::Tensor& w, Origins* origins) {
  TORCH_CHECK(q.is_cuda(), "q: must be a CUDA tensor (got ", q.device(), ")");
  const at::Device device = q.device();
  check_tensor(q, "q", at::kFloat8_e4m3fn, 4, device);
  check_contiguous(q, "q");
  const int64_t B = q.size(0), next_n = q.size(1), H = q.size(2), D = q.size(3);
  const int64_t slot_bytes = D + 4;  // a key's D FP8 bytes and its fp32 scale
  check_tensor(kv_cache, "kv_cache", at::kByte, 2, device, 3);
  const bool blocks_as_rows = kv_cache.dim() == 3;
  if (blocks_as_rows) {
    check_size(kv_cache, "kv_cache", 2, slot_bytes, "q.size(3) + 4");
  } else {
    TORCH_CHECK(kv_cache.size(1) % slot_bytes == 0, "kv_cache: size(1) must be block_size * (q.size(3) + 4) = "
                "block_size * ", slot_bytes, " (got shape ", kv_cache.sizes(), ")");
  }
  check_contiguous(kv_cache, "kv_cache");
  const int64_t block_size = blocks_as_rows ? kv_cache.size(1) : kv_cache.size(1) / slot_bytes;
  check_tensor(block_table, "block_table", at::kInt, 2, device);
  check_size(block_table, "block_table", 0, B, "q.size(0)");
  TORCH_CHECK(block_table.size(1) <= 1 || block_table.stride(1) == 1,
              "block_table: each row must be contiguous, block_table.stride(1) == 1 (got strides ",
              block_table.strides(), ")");
  check_tensor(context_lens, "context_lens", at::kInt, 1, device, 2);
  check_size(context_lens, "context_lens", 0, B, "q.size(0)");
  if (context_lens.dim() == 2) check_size(context_lens, "context_lens", 1, next_n, "q.size(1)");
  check_contiguous(context_lens, "context_lens");
  check_tensor(w, "w", at::kFloat, 2, device, 3);
  if (w.dim() == 3) {
    check_size(w, "w", 0, B, "q.size(0)");
    check_size(w, "w", 1, next_n, "q.size(1)");
    check_size(w, "w", 2, H, "q.size(2)");
  } else {
    check_size(w, "w", 0, B * next_n, "q.size(0) * q.size(1)");
    check_size(w, "w", 1, H, "q.size(2)");
  }
  check_contiguous(w, "w");

  dsa::PagedIndexerInputs in;
  in.q = data<const std::uint8_t>(q);
  in.kv_cache = data<const std::uint8_t>(kv_cache);
  in.block_table = data<const std::int32_t>(block_table);
  in.context_lens = data<const std::int32_t>(context_lens);
  in.w = data<const float>(w);
  in.batch = B;
  in.next_n = saturate_int(next_n);
  in.num_heads = saturate_int(H);
  in.head_dim = saturate_int(D);
  in.num_blocks = kv_cache.size(0);
  in.block_size = saturate_int(block_size);
  in.max_blocks_per_seq = block_table.size(1);
  in.block_table_stride = B > 1 ? block_table.stride(0) : block_table.size(1);
  in.lens_per_token = context_lens.dim() == 2;
  *origins = {{"batch", "q.size(0)"},
              {"next_n", "q.size(1)"},
              {"num_heads", "q.size(2)"},
              {"head_dim", "q.size(3)"},
              {"num_blocks", "kv_cache.size(0)"},
              {"block_size", blocks_as_rows ? "kv_cache.size(1)" : "kv_cache.size(1) / (q.size(3) + 4)"},
              {"max_blocks_per_seq", "block_table.size(1)"},
              {"block_table_stride", "block_table.stride(0)"}};
  return in;
}

const char* const kPagedRows = "q.size(0) * q.size(1)";

void indexer_topk_paged_out(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& block_table,
                            const at::Tensor& context_lens, const at::Tensor& w, const at::Tensor& indices,
                            const std::optional<at::Tensor>& values, bool physical_slots, bool deterministic,
                            bool sorted, bool check_ranges) {
  Origins origins;
  dsa::PagedIndexerTopkParams p;
  static_cast<dsa::PagedIndexerInputs&>(p) = paged_inputs(q, kv_cache, block_table, context_lens, w, &origins);
  const c10::cuda::CUDAGuard guard(q.device());
  check_outputs(indices, values, p.num_rows(), kPagedRows, q.device());
  p.indices = data<std::int32_t>(indices);
  p.values = values ? data<float>(*values) : nullptr;
  p.physical_slots = physical_slots;
  p.options = select_options(indices.size(1), /*relative=*/false, deterministic, sorted);
  origins.emplace_back("options.k", "indices.size(1)");
  run_on_cuda(p, &dsa::indexer_topk_paged_workspace_size, &dsa::indexer_topk_paged, q.device(), check_ranges,
              "indexer_topk_paged_out", origins);
}

std::tuple<at::Tensor, at::Tensor> indexer_topk_paged(const at::Tensor& q, const at::Tensor& kv_cache,
                                                      const at::Tensor& block_table, const at::Tensor& context_lens,
                                                      const at::Tensor& w, int64_t topk, bool physical_slots,
                                                      bool deterministic, bool sorted, bool return_values,
                                                      bool check_ranges) {
  Origins origins;
  dsa::PagedIndexerTopkParams p;
  static_cast<dsa::PagedIndexerInputs&>(p) = paged_inputs(q, kv_cache, block_table, context_lens, w, &origins);
  const c10::cuda::CUDAGuard guard(q.device());
  TORCH_CHECK(topk >= 0, "topk: must be one of 512, 1024, 2048 (got ", topk, ")");
  const int64_t rows = p.num_rows();
  const at::TensorOptions on_device = at::TensorOptions().device(q.device());
  at::Tensor indices = at::empty({rows, topk}, on_device.dtype(at::kInt));
  at::Tensor values = at::empty({return_values ? rows : 0, return_values ? topk : 0}, on_device.dtype(at::kFloat));
  p.indices = data<std::int32_t>(indices);
  p.values = return_values ? data<float>(values) : nullptr;
  p.physical_slots = physical_slots;
  p.options = select_options(topk, /*relative=*/false, deterministic, sorted);
  origins.emplace_back("options.k", "topk");
  run_on_cuda(p, &dsa::indexer_topk_paged_workspace_size, &dsa::indexer_topk_paged, q.device(), check_ranges,
              "indexer_topk_paged", origins);
  return {indices, values};
}

// ------------------------------------------------------------------- merge --

// values fp32 and indices int32 [P, R, part_k], contiguous, on one CUDA
// device; returns (indices [R, topk] int32, values [R, topk] fp32). Runs
// with the context's check_ranges off: the library's read-back of the
// indices (every one >= -1) would synchronise and forbid capture, and a merge
// sits in the decode step that engines capture; the kernel stays in bounds
// for any index.
std::tuple<at::Tensor, at::Tensor> merge_topk(const at::Tensor& values, const at::Tensor& indices, int64_t topk,
                                              bool deterministic, bool sorted) {
  TORCH_CHECK(values.is_cuda(), "values: must be a CUDA tensor (got ", values.device(), ")");
  const at::Device device = values.device();
  check_tensor(values, "values", at::kFloat, 3, device);
  check_contiguous(values, "values");
  check_tensor(indices, "indices", at::kInt, 3, device);
  TORCH_CHECK(indices.sizes() == values.sizes(), "indices: must have the shape of values ", values.sizes(),
              " (got ", indices.sizes(), ")");
  check_contiguous(indices, "indices");
  TORCH_CHECK(topk >= 0, "topk: must be one of 512, 1024, 2048 (got ", topk, ")");
  const c10::cuda::CUDAGuard guard(device);
  const int64_t rows = values.size(1);
  const at::TensorOptions on_device = at::TensorOptions().device(device);
  at::Tensor out_indices = at::empty({rows, topk}, on_device.dtype(at::kInt));
  at::Tensor out_values = at::empty({rows, topk}, on_device.dtype(at::kFloat));

  dsa::MergeTopkParams p;
  p.values = data<const float>(values);
  p.indices = data<const std::int32_t>(indices);
  p.num_parts = values.size(0);
  p.num_rows = rows;
  p.part_k = values.size(2);
  p.out_indices = data<std::int32_t>(out_indices);
  p.out_values = data<float>(out_values);
  p.options = select_options(topk, /*relative=*/false, deterministic, sorted);
  const Origins origins = {{"num_parts", "values.size(0)"}, {"num_rows", "values.size(1)"},
                           {"part_k", "values.size(2)"}, {"options.k", "topk"}};
  run_on_cuda(p, &dsa::merge_topk_workspace_size, &dsa::merge_topk, device, /*check_ranges=*/false, "merge_topk",
              origins);
  return {out_indices, out_values};
}

}  // namespace

// Schemas. Every op but merge_topk (which never checks: see above) takes
// check_ranges (default True):
// validate each row's [ks, ke) (the paged op: the lengths and the used
// block-table entries) on the host first (one device-to-host copy and a
// stream sync); pass False inside CUDA graphs and hot loops (the kernels then
// clamp rows to [0, N), the paged one lengths to the table and absent blocks
// to zero keys, so memory stays safe, but an invalid row's result is
// unspecified).
TORCH_LIBRARY(dsa_topk, m) {
  m.def(
      "indexer_topk(Tensor q, Tensor k, Tensor k_scale, Tensor w, Tensor ks, Tensor ke, int topk=2048, *, "
      "bool relative=False, bool deterministic=False, bool sorted=False, bool return_values=False, "
      "bool check_ranges=True) -> (Tensor indices, Tensor values)");
  m.def(
      "indexer_topk_out(Tensor q, Tensor k, Tensor k_scale, Tensor w, Tensor ks, Tensor ke, Tensor(a!) indices, "
      "Tensor(b!)? values=None, *, bool relative=False, bool deterministic=False, bool sorted=False, "
      "bool check_ranges=True) -> ()");
  m.def(
      "topk(Tensor scores, Tensor ks, Tensor ke, int topk=2048, *, int? num_cols=None, bool relative=False, "
      "bool deterministic=False, bool sorted=False, bool return_values=False, bool check_ranges=True) "
      "-> (Tensor indices, Tensor values)");
  m.def(
      "indexer_scores(Tensor q, Tensor k, Tensor k_scale, Tensor w, Tensor ks, Tensor ke, *, "
      "bool clean=True, bool check_ranges=True) -> Tensor");
  m.def(
      "indexer_topk_paged(Tensor q, Tensor kv_cache, Tensor block_table, Tensor context_lens, Tensor w, "
      "int topk=2048, *, bool physical_slots=False, bool deterministic=False, bool sorted=False, "
      "bool return_values=False, bool check_ranges=True) -> (Tensor indices, Tensor values)");
  m.def(
      "indexer_topk_paged_out(Tensor q, Tensor kv_cache, Tensor block_table, Tensor context_lens, Tensor w, "
      "Tensor(a!) indices, Tensor(b!)? values=None, *, bool physical_slots=False, bool deterministic=False, "
      "bool sorted=False, bool check_ranges=True) -> ()");
  m.def(
      "merge_topk(Tensor values, Tensor indices, int topk=2048, *, bool deterministic=False, bool sorted=False) "
      "-> (Tensor indices, Tensor values)");
}

// CUDA runs the library. CPU takes the same functions, so a call with host
// tensors fails with a message naming the first host tensor rather than the
// dispatcher's "no kernel for CPU".
TORCH_LIBRARY_IMPL(dsa_topk, CUDA, m) {
  m.impl("indexer_topk", &indexer_topk);
  m.impl("indexer_topk_out", &indexer_topk_out);
  m.impl("topk", &topk);
  m.impl("indexer_scores", &indexer_scores);
  m.impl("indexer_topk_paged", &indexer_topk_paged);
  m.impl("indexer_topk_paged_out", &indexer_topk_paged_out);
  m.impl("merge_topk", &merge_topk);
}

TORCH_LIBRARY_IMPL(dsa_topk, CPU, m) {
  m.impl("indexer_topk", &indexer_topk);
  m.impl("indexer_topk_out", &indexer_topk_out);
  m.impl("topk", &topk);
  m.impl("indexer_scores", &indexer_scores);
  m.impl("indexer_topk_paged", &indexer_topk_paged);
  m.impl("indexer_topk_paged_out", &indexer_topk_paged_out);
  m.impl("merge_topk", &merge_topk);
}

}  // namespace dsa_torch
