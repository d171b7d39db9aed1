#include "device_run.h"

#include <cuda_runtime.h>

#include <string>

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
    if (st.ok() && bytes) st = cuda_status(cudaMemcpy(ptr_, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
    return st;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// Times `reps` launches of `call` (after one warm-up) with events; output
// buffers are poisoned before each launch so an unwritten slot shows. The
// warm-up validates the ranges (a host round trip); the timed calls skip
// that, as an engine replaying a CUDA graph does.
template <typename Call>
Status timed_runs(Call&& call, DeviceBuffer& indices, DeviceBuffer& values, std::size_t out_elems, int reps,
                  std::vector<double>* ms) {
  cudaEvent_t start, stop;
  DSA_CUDA_TRY(cudaEventCreate(&start), "cudaEventCreate");
  DSA_CUDA_TRY(cudaEventCreate(&stop), "cudaEventCreate");
  Status st;
  for (int i = 0; i <= reps && st.ok(); ++i) {
    cudaMemsetAsync(indices.as<void>(), 0xAB, out_elems * sizeof(std::int32_t));
    if (values.as<void>()) cudaMemsetAsync(values.as<void>(), 0xAB, out_elems * sizeof(float));
    cudaEventRecord(start);
    st = call(/*check_ranges=*/i == 0);
    cudaEventRecord(stop);
    if (st.ok()) st = cuda_status(cudaEventSynchronize(stop), "kernel");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (i > 0 && st.ok()) ms->push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return st;
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

// Allocates the operator's workspace, times it on the CUDA backend and
// downloads the last result.
template <typename Params>
Status time_operator(const Params& p, Status (*workspace_size)(const Params&, Backend, std::size_t*),
                     Status (*run)(const Params&, const ExecutionContext&), DeviceBuffer& indices,
                     DeviceBuffer& values, int reps, tools::TopkOutput* out, std::vector<double>* ms) {
  DeviceBuffer workspace;
  std::size_t ws_bytes = 0;
  Status st = workspace_size(p, Backend::kCuda, &ws_bytes);
  if (st.ok()) st = workspace.alloc(ws_bytes);
  if (!st.ok()) return st;
  ExecutionContext ctx{Backend::kCuda, nullptr, 0, workspace.as<void>(), ws_bytes};
  st = timed_runs(
      [&](bool check_ranges) {
        ctx.check_ranges = check_ranges;
        return run(p, ctx);
      },
      indices, values, out->indices.size(), reps, ms);
  return st.ok() ? download(indices, values, out) : st;
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
