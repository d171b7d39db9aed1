#include "device_run.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include "common/row_range.cuh"
#include "decode/decode.h"
#include "fused/fused.h"
#include "fused/plan.h"
#include "reference/cpu_reference.h"
#include "timing.cuh"

namespace dsa::cli {
namespace {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(err)};
}

#define DSA_CUDA_TRY(expr, what)                       \
  do {                                                 \
    Status s_ = cuda_status((expr), what);             \
    if (!s_.ok()) return s_;                           \
  } while (0)

// Owns one device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  Status alloc(std::size_t bytes) { return bytes == 0 ? Status::Ok() : cuda_status(cudaMalloc(&ptr_, bytes), "cudaMalloc"); }
  template <typename T>
  Status upload(const std::vector<T>& host) {
    const std::size_t bytes = host.size() * sizeof(T);
    Status st = alloc(bytes);
    return st.ok() ? write(host.data(), bytes) : st;
  }
  // Copies `bytes` from the host into the allocation's start.
  Status write(const void* host, std::size_t bytes) {
    return bytes == 0 ? Status::Ok() : cuda_status(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "upload");
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// A timed side whose output buffers are poisoned before each launch, so
// an unwritten slot shows; call(check_ranges) launches once. The warm-up
// validates the ranges (a host round trip); the timed calls skip that, as
// an engine replaying a CUDA graph does. The buffers must outlive it.
template <typename Call>
TimedSide poisoned_side(Call call, DeviceBuffer& indices, DeviceBuffer& values, std::size_t out_elems,
                        std::vector<double>* ms) {
  return TimedSide{[&indices, &values, out_elems] {
                     cudaMemsetAsync(indices.as<void>(), 0xAB, out_elems * sizeof(std::int32_t));
                     if (values.as<void>()) cudaMemsetAsync(values.as<void>(), 0xAB, out_elems * sizeof(float));
                   },
                   [call](int i) { return call(/*check_ranges=*/i == 0); }, ms};
}

// Times `reps` launches of `call` after one warm-up (timed_rounds: L2
// flushed before each unless --warm-l2), poisoning the outputs before each.
template <typename Call>
Status timed_runs(Call&& call, DeviceBuffer& indices, DeviceBuffer& values, std::size_t out_elems, int reps,
                  std::vector<double>* ms) {
  return timed_rounds(reps, {poisoned_side(call, indices, values, out_elems, ms)}, "timed call");
}

Status download(const DeviceBuffer& indices, const DeviceBuffer& values, tools::TopkOutput* out) {
  DSA_CUDA_TRY(cudaMemcpy(out->indices.data(), indices.as<void>(), out->indices.size() * sizeof(std::int32_t),
                          cudaMemcpyDeviceToHost), "download indices");
  if (!out->values.empty()) {
    DSA_CUDA_TRY(cudaMemcpy(out->values.data(), values.as<void>(), out->values.size() * sizeof(float),
                            cudaMemcpyDeviceToHost), "download values");
  }
  return Status::Ok();
}

Status prepare_outputs(std::int64_t T, const SelectOptions& options, bool want_values, DeviceBuffer& indices,
                       DeviceBuffer& values, tools::TopkOutput* out) {
  const std::size_t n = static_cast<std::size_t>(T) * options.k;
  out->T = T;
  out->K = options.k;
  out->indices.assign(n, 0);
  out->values.assign(want_values ? n : 0, 0.0f);
  Status st = indices.alloc(n * sizeof(std::int32_t));
  if (st.ok() && want_values) st = values.alloc(n * sizeof(float));
  return st;
}

// The indexer inputs of a problem in device memory.
struct DeviceInputs {
  DeviceBuffer q, k, k_scale, w, ks, ke;

  Status upload(const tools::IndexerProblem& prob) {
    for (Status st : {q.upload(prob.q), k.upload(prob.k), k_scale.upload(prob.k_scale), w.upload(prob.w),
                      ks.upload(prob.ks), ke.upload(prob.ke)}) {
      if (!st.ok()) return st;
    }
    return Status::Ok();
  }
  // Room for T rows and N keys of H heads.
  Status alloc(std::int64_t T, std::int64_t N, int H) {
    const auto rows = static_cast<std::size_t>(T), keys = static_cast<std::size_t>(N);
    for (Status st : {q.alloc(rows * H * kHeadDim), k.alloc(keys * kHeadDim), k_scale.alloc(keys * sizeof(float)),
                      w.alloc(rows * H * sizeof(float)), ks.alloc(rows * sizeof(std::int32_t)),
                      ke.alloc(rows * sizeof(std::int32_t))}) {
      if (!st.ok()) return st;
    }
    return Status::Ok();
  }
  // Copies the host tensors `host` points to (dense key rows, within the
  // allocated sizes).
  Status write(const IndexerInputs& host) {
    const auto rows = static_cast<std::size_t>(host.num_queries), keys = static_cast<std::size_t>(host.num_keys);
    for (Status st : {q.write(host.q, rows * host.num_heads * host.head_dim), k.write(host.k, keys * host.head_dim),
                      k_scale.write(host.k_scale, keys * sizeof(float)),
                      w.write(host.w, rows * host.num_heads * sizeof(float)),
                      ks.write(host.ks, rows * sizeof(std::int32_t)), ke.write(host.ke, rows * sizeof(std::int32_t))}) {
      if (!st.ok()) return st;
    }
    return Status::Ok();
  }
  // `host`'s shapes and strides with this object's pointers.
  IndexerInputs bind(IndexerInputs host) const {
    host.q = q.as<std::uint8_t>();
    host.k = k.as<std::uint8_t>();
    host.k_scale = k_scale.as<float>();
    host.w = w.as<float>();
    host.ks = ks.as<std::int32_t>();
    host.ke = ke.as<std::int32_t>();
    return host;
  }
};

// A paged problem's inputs in device memory.
struct DevicePagedInputs {
  DeviceBuffer q, cache, table, lens, w;

  Status upload(const tools::PagedProblem& prob) {
    for (Status st : {q.upload(prob.q), cache.upload(prob.kv_cache), table.upload(prob.block_table),
                      lens.upload(prob.context_lens), w.upload(prob.w)}) {
      if (!st.ok()) return st;
    }
    return Status::Ok();
  }
  // `p` with this object's input pointers.
  void bind(PagedIndexerTopkParams* p) const {
    p->q = q.as<std::uint8_t>();
    p->kv_cache = cache.as<std::uint8_t>();
    p->block_table = table.as<std::int32_t>();
    p->context_lens = lens.as<std::int32_t>();
    p->w = w.as<float>();
  }
};

// An operator's CUDA workspace, of the size its query asks for.
struct Workspace {
  DeviceBuffer buffer;
  std::size_t bytes = 0;

  template <typename Params>
  Status alloc(const Params& p, Status (*workspace_size)(const Params&, Backend, std::size_t*)) {
    Status st = workspace_size(p, Backend::kCuda, &bytes);
    return st.ok() ? buffer.alloc(bytes) : st;
  }
  Status alloc_bytes(std::size_t n) {
    bytes = n;
    return buffer.alloc(n);
  }

  // A call of `run` on the CUDA backend with this workspace, as a timed side
  // takes it (check_ranges: the warm-up's validation). p and the workspace
  // must outlive it.
  template <typename Params>
  auto call(const Params& p, Status (*run)(const Params&, const ExecutionContext&)) const {
    return [this, &p, run](bool check_ranges) {
      ExecutionContext ctx{Backend::kCuda, nullptr, 0, buffer.as<void>(), bytes};
      ctx.check_ranges = check_ranges;
      return run(p, ctx);
    };
  }
};

// Allocates the operator's workspace, times it on the CUDA backend and
// downloads the last result.
template <typename Params>
Status time_operator(const Params& p, Status (*workspace_size)(const Params&, Backend, std::size_t*),
                     Status (*run)(const Params&, const ExecutionContext&), DeviceBuffer& indices,
                     DeviceBuffer& values, int reps, tools::TopkOutput* out, std::vector<double>* ms) {
  Workspace ws;
  Status st = ws.alloc(p, workspace_size);
  if (!st.ok()) return st;
  st = timed_runs(ws.call(p, run), indices, values, out->indices.size(), reps, ms);
  return st.ok() ? download(indices, values, out) : st;
}

// decode::launch_indexer_topk_paged with a pinned route, as a timed side
// takes it (no validation: the bench's inputs are generated valid). The
// arguments must outlive it.
auto pinned_paged_call(const PagedIndexerTopkParams& p, const Workspace& ws, const decode::PagedHooks& hooks) {
  return [&p, &ws, &hooks](bool) {
    return decode::launch_indexer_topk_paged(p, nullptr, ws.buffer.as<void>(), ws.bytes, hooks);
  };
}

// The bar selection's state after its last call (decode/plan.h,
// PagedWorkspace): its last batch's entry counts over the keys of the rows
// that kept entries, its repaired rows (kRowRescore) and the rows that
// stored their scores (kRowStored). One token a request (the route's
// calls): row b's keys are context_lens[b].
Status read_bar_state(const tools::PagedProblem& prob, const PagedIndexerTopkParams& p, const Workspace& ws,
                      PagedComparison* out) {
  const decode::PagedPlan plan = decode::make_plan(p, decode::PagedHooks{decode::PagedHooks::Route::kBarSelect});
  const Batch last = plan.batches[plan.batches.count() - 1];
  const auto rows = static_cast<std::size_t>(last.size);
  std::vector<std::uint32_t> counts(rows), flags(rows);
  const auto* base = ws.buffer.as<std::uint8_t>();
  const std::size_t counts_at = plan.workspace.bar_state + decode::kBarCount * rows * sizeof(std::uint32_t);
  Status st = cuda_status(cudaMemcpy(counts.data(), base + counts_at, rows * sizeof(std::uint32_t),
                                     cudaMemcpyDeviceToHost),
                          "reading the bar selection's counts");
  if (st.ok()) {
    st = cuda_status(cudaMemcpy(flags.data(), base + plan.workspace.bar_flags, rows * sizeof(std::uint32_t),
                                cudaMemcpyDeviceToHost),
                     "reading the bar selection's flags");
  }
  if (!st.ok()) return st;
  double entries = 0, keys = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    out->bar_repaired += flags[r] == kRowRescore ? 1 : 0;
    out->bar_stored += flags[r] == kRowStored ? 1 : 0;
    if (flags[r] == kRowStored) continue;  // its count is the zero kernel's
    entries += counts[r];
    keys += static_cast<double>(
        std::min<std::int64_t>(prob.context_lens[static_cast<std::size_t>(last.first) + r], p.max_context()));
  }
  out->bar_entry_fraction = keys > 0 ? entries / keys : 0;
  return Status::Ok();
}

}  // namespace

Status run_on_device(const tools::IndexerProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms) {
  DeviceInputs inputs;
  DeviceBuffer indices, values;
  for (Status st : {inputs.upload(prob), prepare_outputs(prob.T, options, want_values, indices, values, out)}) {
    if (!st.ok()) return st;
  }
  IndexerTopkParams p = prob.params(indices.as<std::int32_t>(), values.as<float>(), options);
  static_cast<IndexerInputs&>(p) = inputs.bind(p);
  return time_operator(p, &indexer_topk_workspace_size, &indexer_topk, indices, values, reps, out, ms);
}

Status run_on_device(const tools::ScoresProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms) {
  DeviceBuffer scores, ks, ke, indices, values;
  for (Status st : {scores.upload(prob.scores), ks.upload(prob.ks), ke.upload(prob.ke),
                    prepare_outputs(prob.T, options, want_values, indices, values, out)}) {
    if (!st.ok()) return st;
  }
  TopkParams p = prob.params(indices.as<std::int32_t>(), values.as<float>(), options);
  p.scores = scores.as<float>();
  p.ks = ks.as<std::int32_t>();
  p.ke = ke.as<std::int32_t>();
  return time_operator(p, &topk_workspace_size, &topk, indices, values, reps, out, ms);
}

Status run_on_device(const tools::PagedProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms) {
  return run_paged_on_device(prob, options, want_values, reps, decode::PagedHooks{}, out, ms);
}

Status run_paged_on_device(const tools::PagedProblem& prob, const SelectOptions& options, bool want_values, int reps,
                           const decode::PagedHooks& hooks, tools::TopkOutput* out, std::vector<double>* ms) {
  DevicePagedInputs inputs;
  DeviceBuffer indices, values;
  for (Status st : {inputs.upload(prob), prepare_outputs(prob.rows(), options, want_values, indices, values, out)}) {
    if (!st.ok()) return st;
  }
  PagedIndexerTopkParams p = prob.params(indices.as<std::int32_t>(), values.as<float>(), options, false);
  inputs.bind(&p);
  if (hooks.route == decode::PagedHooks::Route::kByShape) {
    return time_operator(p, &indexer_topk_paged_workspace_size, &indexer_topk_paged, indices, values, reps, out, ms);
  }
  Workspace ws;
  Status st = ws.alloc_bytes(decode::paged_workspace_size(p, hooks));
  if (!st.ok()) return st;
  st = timed_runs(pinned_paged_call(p, ws, hooks), indices, values, out->indices.size(), reps, ms);
  return st.ok() ? download(indices, values, out) : st;
}

Status compare_paged_on_device(const tools::PagedProblem& prob, const SelectOptions& options, bool want_values,
                               int reps, PagedComparison* out) {
  DevicePagedInputs inputs;
  if (Status st = inputs.upload(prob); !st.ok()) return st;
  // Each side: the same inputs, outputs of its own.
  constexpr int kOp = 0, kUnfused = 1, kFused = 2, kStream = 3, kBar = 4, kSides = 5;
  DeviceBuffer indices[kSides], values[kSides];
  tools::TopkOutput* results[kSides] = {&out->op, &out->unfused, &out->fused, &out->stream, &out->bar};
  PagedIndexerTopkParams p[kSides];
  for (int i = 0; i < kSides; ++i) {
    const Status st = prepare_outputs(prob.rows(), options, want_values, indices[i], values[i], results[i]);
    if (!st.ok()) return st;
    p[i] = prob.params(indices[i].as<std::int32_t>(), values[i].as<float>(), options, false);
    inputs.bind(&p[i]);
  }
  using Route = decode::PagedHooks::Route;
  decode::PagedHooks unfused_hooks, fused_hooks, math_hooks, stream_hooks, bar_hooks;
  unfused_hooks.route = Route::kUnfused;
  fused_hooks.route = Route::kFusedSelect;
  math_hooks.route = Route::kMathOnly;
  stream_hooks.route = Route::kStreamSelect;
  bar_hooks.route = Route::kBarSelect;
  out->fused_possible = decode::fused_select_possible(p[kFused], decode::make_plan(p[kFused]));
  out->stream_possible = decode::stream_select_possible(p[kStream], decode::make_plan(p[kStream]));
  out->bar_possible = decode::bar_select_possible(p[kBar], decode::make_plan(p[kBar]));

  // The control writes no output: its buffers only take the poison.
  DeviceBuffer math_indices, math_values;
  tools::TopkOutput math_out;
  Status st = prepare_outputs(prob.rows(), options, want_values, math_indices, math_values, &math_out);
  if (!st.ok()) return st;
  PagedIndexerTopkParams math_p = prob.params(math_indices.as<std::int32_t>(), math_values.as<float>(), options, false);
  inputs.bind(&math_p);

  Workspace op_ws, unfused_ws, fused_ws, math_ws, stream_ws, bar_ws;
  st = op_ws.alloc(p[kOp], &indexer_topk_paged_workspace_size);
  if (st.ok()) st = unfused_ws.alloc_bytes(decode::paged_workspace_size(p[kUnfused], unfused_hooks));
  if (st.ok()) st = math_ws.alloc_bytes(decode::paged_workspace_size(math_p, math_hooks));
  if (st.ok() && out->fused_possible) st = fused_ws.alloc_bytes(decode::paged_workspace_size(p[kFused], fused_hooks));
  if (st.ok() && out->stream_possible) {
    st = stream_ws.alloc_bytes(decode::paged_workspace_size(p[kStream], stream_hooks));
  }
  if (st.ok() && out->bar_possible) st = bar_ws.alloc_bytes(decode::paged_workspace_size(p[kBar], bar_hooks));
  if (!st.ok()) return st;
  const std::size_t elems = out->op.indices.size();
  std::vector<TimedSide> sides = {
      poisoned_side(op_ws.call(p[kOp], &indexer_topk_paged), indices[kOp], values[kOp], elems, &out->op_ms),
      poisoned_side(pinned_paged_call(p[kUnfused], unfused_ws, unfused_hooks), indices[kUnfused], values[kUnfused], elems,
                    &out->unfused_ms),
      poisoned_side(pinned_paged_call(math_p, math_ws, math_hooks), math_indices, math_values, elems, &out->math_ms)};
  if (out->fused_possible) {
    sides.push_back(poisoned_side(pinned_paged_call(p[kFused], fused_ws, fused_hooks), indices[kFused], values[kFused], elems,
                                  &out->fused_ms));
  }
  if (out->stream_possible) {
    sides.push_back(poisoned_side(pinned_paged_call(p[kStream], stream_ws, stream_hooks), indices[kStream],
                                  values[kStream], elems, &out->stream_ms));
  }
  if (out->bar_possible) {
    sides.push_back(poisoned_side(pinned_paged_call(p[kBar], bar_ws, bar_hooks), indices[kBar], values[kBar], elems,
                                  &out->bar_ms));
  }
  st = timed_rounds(reps, sides, "timed call");
  if (st.ok() && out->bar_possible) st = read_bar_state(prob, p[kBar], bar_ws, out);
  for (int i = 0; st.ok() && i < kSides; ++i) {
    if ((i == kFused && !out->fused_possible) || (i == kStream && !out->stream_possible) ||
        (i == kBar && !out->bar_possible)) {
      continue;
    }
    st = download(indices[i], values[i], results[i]);
  }
  return st;
}

Status run_on_device(const tools::MergeProblem& prob, const SelectOptions& options, bool want_values, int reps,
                     tools::TopkOutput* out, std::vector<double>* ms) {
  DeviceBuffer part_values, part_indices, indices, values;
  for (Status st : {part_values.upload(prob.values), part_indices.upload(prob.indices),
                    prepare_outputs(prob.R, options, want_values, indices, values, out)}) {
    if (!st.ok()) return st;
  }
  MergeTopkParams p = prob.params(indices.as<std::int32_t>(), values.as<float>(), options);
  p.values = part_values.as<float>();
  p.indices = part_indices.as<std::int32_t>();
  return time_operator(p, &merge_topk_workspace_size, &merge_topk, indices, values, reps, out, ms);
}

Status paged_scores(const tools::PagedProblem& prob, Backend backend, int threads, std::vector<float>* scores,
                    std::int64_t* stride) {
  const PagedIndexerTopkParams paged = prob.params(nullptr, nullptr, SelectOptions{}, false);
  const int n = prob.next_n;
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < prob.B; ++b) longest = std::max(longest, reference::paged_request_length(paged, b));
  *stride = std::max<std::int64_t>(longest, 1);
  const std::size_t q_bytes = static_cast<std::size_t>(n) * prob.H * prob.D;
  const std::size_t w_elems = static_cast<std::size_t>(n) * prob.H;
  const std::size_t score_elems = static_cast<std::size_t>(n * *stride);
  scores->assign(static_cast<std::size_t>(prob.B) * score_elems, -std::numeric_limits<float>::infinity());

  // One request's inputs on the host; on kCuda also their device copies,
  // which the call reads and writes instead.
  std::vector<std::uint8_t> k(static_cast<std::size_t>(longest) * prob.D);
  std::vector<float> k_scale(static_cast<std::size_t>(longest));
  std::vector<std::int32_t> ks(n, 0), ke(n);
  const bool cuda = backend == Backend::kCuda;
  DeviceInputs device;
  DeviceBuffer device_scores;
  if (cuda) {
    for (Status st : {device.alloc(n, longest, prob.H), device_scores.alloc(score_elems * sizeof(float))}) {
      if (!st.ok()) return st;
    }
  }
  ExecutionContext ctx;
  ctx.backend = backend;
  ctx.num_threads = threads;
  for (std::int64_t b = 0; b < prob.B; ++b) {
    const std::int64_t len = reference::paged_request_length(paged, b);
    if (len == 0) continue;  // its rows have no positions
    reference::gather_paged_keys(paged, b, len, k.data(), k_scale.data());
    for (int j = 0; j < n; ++j) ke[j] = static_cast<std::int32_t>(reference::paged_row_length(paged, b, j));
    IndexerScoresParams p;
    static_cast<IndexerInputs&>(p) = {.q = prob.q.data() + b * q_bytes, .k = k.data(), .k_scale = k_scale.data(),
                                      .w = prob.w.data() + b * w_elems, .ks = ks.data(), .ke = ke.data(),
                                      .num_queries = n, .num_keys = len, .num_heads = prob.H, .head_dim = prob.D,
                                      .k_row_stride = prob.D};
    p.scores = scores->data() + b * score_elems;
    p.score_stride = *stride;
    p.fill_outside = true;  // a shorter row's columns [len(b, j), len) read as -inf
    float* host_scores = p.scores;
    if (cuda) {
      if (Status st = device.write(p); !st.ok()) return st;
      static_cast<IndexerInputs&>(p) = device.bind(p);
      p.scores = device_scores.as<float>();
    }
    if (Status st = indexer_scores(p, ctx); !st.ok()) return st;
    if (cuda) {
      const std::size_t pitch = static_cast<std::size_t>(*stride) * sizeof(float);
      DSA_CUDA_TRY(cudaMemcpy2D(host_scores, pitch, p.scores, pitch, len * sizeof(float), n, cudaMemcpyDeviceToHost),
                   "download the judge's scores");
    }
  }
  return Status::Ok();
}

Status compare_indexer_on_device(const tools::IndexerProblem& prob, const SelectOptions& options, bool want_values,
                                 int reps, bool keep_scores, const IndexerBenchHooks& bench_hooks,
                                 IndexerComparison* out) {
  DeviceInputs inputs;
  DeviceBuffer fused_indices, fused_values, math_indices, math_values, unfused_indices, unfused_values, scores,
      checksum;
  const std::size_t out_elems = static_cast<std::size_t>(prob.T) * options.k;
  const std::size_t score_elems = static_cast<std::size_t>(prob.T) * static_cast<std::size_t>(prob.N);
  for (Status st : {inputs.upload(prob),
                    prepare_outputs(prob.T, options, want_values, fused_indices, fused_values, &out->fused),
                    prepare_outputs(prob.T, options, want_values, unfused_indices, unfused_values, &out->unfused),
                    // the math-only control writes no indices: its buffers only take the poison
                    math_indices.alloc(out_elems * sizeof(std::int32_t)),
                    want_values ? math_values.alloc(out_elems * sizeof(float)) : Status::Ok(),
                    scores.alloc(score_elems * sizeof(float)), checksum.alloc(sizeof(std::uint32_t))}) {
    if (!st.ok()) return st;
  }
  IndexerTopkParams p = prob.params(fused_indices.as<std::int32_t>(), fused_values.as<float>(), options);
  static_cast<IndexerInputs&>(p) = inputs.bind(p);
  using Route = fused::FusedHooks::Route;
  fused::FusedHooks route_hooks;
  route_hooks.route = bench_hooks.route;
  out->took_unfused_route = bench_hooks.route == Route::kByShape
                                ? fused::unfused_by_shape(p.num_queries, p.num_keys)
                                : bench_hooks.route == Route::kUnfused;

  // The three sides are timed call by call in turn (timed_rounds), so they
  // meet the same power state.
  // The fused operator, through the public API (or with its route pinned).
  Workspace workspace;
  Status st = bench_hooks.route == Route::kByShape ? workspace.alloc(p, &indexer_topk_workspace_size)
                                                     : workspace.alloc_bytes(fused::workspace_size(p, route_hooks));
  if (!st.ok()) return st;
  const auto public_call = workspace.call(p, &indexer_topk);
  const auto fused_call = [&](bool check_ranges) {
    if (bench_hooks.route == Route::kByShape) return public_call(check_ranges);
    return fused::launch_indexer_topk(p, nullptr, workspace.buffer.as<void>(), workspace.bytes, route_hooks);
  };

  // Its math-only control: same inputs and workspace (the fused call before
  // it in the warm-up round validated them), every score folded into the
  // checksum word. It writes no indices; it poisons a buffer of its own,
  // as the other sides do, so every call starts alike.
  fused::FusedHooks hooks;
  hooks.mode = fused::FusedMode::kMathOnly;
  hooks.checksum = checksum.as<std::uint32_t>();
  const auto math_call = [&](bool) {
    return fused::launch_indexer_topk(p, nullptr, workspace.buffer.as<void>(), workspace.bytes, hooks);
  };

  // The unfused pipeline: the [T, N] scores, then the standalone top-k.
  IndexerScoresParams sp;
  static_cast<IndexerInputs&>(sp) = p;
  sp.scores = scores.as<float>();
  sp.score_stride = prob.N;
  TopkParams tp;
  tp.scores = scores.as<float>();
  tp.ks = p.ks;
  tp.ke = p.ke;
  tp.num_rows = prob.T;
  tp.num_cols = prob.N;
  tp.score_stride = prob.N;
  tp.indices = unfused_indices.as<std::int32_t>();
  tp.values = unfused_values.as<float>();
  tp.options = options;
  Workspace topk_workspace;
  st = topk_workspace.alloc(tp, &topk_workspace_size);
  if (!st.ok()) return st;
  Workspace no_workspace;  // indexer_scores takes none
  const auto scores_call = no_workspace.call(sp, &indexer_scores);
  const auto topk_call = topk_workspace.call(tp, &topk);
  const auto unfused_call = [&](bool check_ranges) {
    const Status s = scores_call(check_ranges);
    return s.ok() ? topk_call(check_ranges) : s;
  };

  st = timed_rounds(reps,
                    {poisoned_side(fused_call, fused_indices, fused_values, out_elems, &out->fused_ms),
                     poisoned_side(math_call, math_indices, math_values, out_elems, &out->math_ms),
                     poisoned_side(unfused_call, unfused_indices, unfused_values, out_elems, &out->unfused_ms)},
                    "timed call");
  if (st.ok()) st = download(fused_indices, fused_values, &out->fused);
  if (st.ok()) st = download(unfused_indices, unfused_values, &out->unfused);
  if (st.ok() && keep_scores) {
    out->scores.resize(score_elems);
    DSA_CUDA_TRY(cudaMemcpy(out->scores.data(), scores.as<void>(), score_elems * sizeof(float), cudaMemcpyDeviceToHost),
                 "download scores");
  }
  return st;
}

Status run_scores_on_device(const tools::IndexerProblem& prob, int reps, std::vector<float>* scores,
                            std::vector<double>* ms) {
  DeviceInputs inputs;
  DeviceBuffer out, unused;
  const std::size_t elems = static_cast<std::size_t>(prob.T) * static_cast<std::size_t>(prob.N);
  for (Status st : {inputs.upload(prob), out.alloc(elems * sizeof(float))}) {
    if (!st.ok()) return st;
  }
  IndexerScoresParams p;
  static_cast<IndexerInputs&>(p) = inputs.bind(prob.params(nullptr, nullptr, SelectOptions{}));
  p.scores = out.as<float>();
  p.score_stride = prob.N;
  ExecutionContext ctx{Backend::kCuda, nullptr, 0, nullptr, 0};
  // The scores buffer takes the poison in place of an indices buffer.
  Status st = timed_runs(
      [&](bool check_ranges) {
        ctx.check_ranges = check_ranges;
        return indexer_scores(p, ctx);
      },
      out, unused, elems, reps, ms);
  if (st.ok() && scores) {
    scores->resize(elems);
    DSA_CUDA_TRY(cudaMemcpy(scores->data(), out.as<void>(), elems * sizeof(float), cudaMemcpyDeviceToHost),
                 "download scores");
  }
  return st;
}

}  // namespace dsa::cli
