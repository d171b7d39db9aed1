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

// dtype, device and rank of one tensor argument.
void check_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t dim,
                  const at::Device& device) {
  check_device(t, name, device);
  TORCH_CHECK(t.scalar_type() == dtype, name, ": must have dtype ", dtype, " (got ", t.scalar_type(), ")");
  TORCH_CHECK(t.dim() == dim, name, ": must have ", dim, " dimensions (got shape ", t.sizes(), ")");
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
  o.k = static_cast<int>(std::min<int64_t>(k, std::numeric_limits<int>::max()));
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
                "check copies ks/ke to the host and synchronises)");
  }
  if (bytes > 0) {
    *holder = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(device));
    ctx.workspace = holder->data_ptr();
    ctx.workspace_bytes = bytes;
  }
  return ctx;
}

// ---------------------------------------------------------------- operators --

void run_indexer_topk(dsa::IndexerTopkParams& p, const at::Device& device, bool check_ranges, const char* op,
                      const Origins& origins) {
  std::size_t bytes = 0;
  raise_if_error(dsa::indexer_topk_workspace_size(p, dsa::Backend::kCuda, &bytes), op, origins);
  at::Tensor workspace;
  const dsa::ExecutionContext ctx = cuda_context(device, bytes, check_ranges, &workspace);
  raise_if_error(dsa::indexer_topk(p, ctx), op, origins);
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
  std::size_t bytes = 0;
  raise_if_error(dsa::topk_workspace_size(p, dsa::Backend::kCuda, &bytes), "topk", origins);
  at::Tensor workspace;
  const dsa::ExecutionContext ctx = cuda_context(device, bytes, check_ranges, &workspace);
  raise_if_error(dsa::topk(p, ctx), "topk", origins);
  return {indices, values};
}

}  // namespace

// Schemas. Every op takes check_ranges (default True): validate each row's
// [ks, ke) on the host first (one device-to-host copy and a stream sync);
// pass False inside CUDA graphs and hot loops (the kernels then clamp rows to
// [0, N), so memory stays safe, but an invalid row's result is unspecified).
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
}

// CUDA runs the library. CPU takes the same functions, so a call with host
// tensors fails with a message naming the first host tensor rather than the
// dispatcher's "no kernel for CPU".
TORCH_LIBRARY_IMPL(dsa_topk, CUDA, m) {
  m.impl("indexer_topk", &indexer_topk);
  m.impl("indexer_topk_out", &indexer_topk_out);
  m.impl("topk", &topk);
  m.impl("indexer_scores", &indexer_scores);
}

TORCH_LIBRARY_IMPL(dsa_topk, CPU, m) {
  m.impl("indexer_topk", &indexer_topk);
  m.impl("indexer_topk_out", &indexer_topk_out);
  m.impl("topk", &topk);
  m.impl("indexer_scores", &indexer_scores);
}

}  // namespace dsa_torch
