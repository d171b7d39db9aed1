// The decode op against the public decode pipeline, timed as
// ../shared/anchors.md times it, from the C++ API alone: the form of
// python/bench/bench_decode_public.py that needs no PyTorch build on the GPU
// machine, so both sides are compiled here and a placement is a short device
// call (scripts/place-decode.sh).
//
// One source, two builds:
//   DSA_PLACE_PAGED 1 (this tree, the default): times dsa::indexer_topk_paged
//     on each row of the anchors' decode table, or with --op topk this tree's
//     topk over the same batch's logits;
//   DSA_PLACE_PAGED 0 (the pinned revision's headers and library, which have
//     no paged op): times topk over the logits [B * next_n, L] that the
//     revision's own indexer_scores writes from each request's keys, the
//     topk the anchors timed beside DeepGEMM + vLLM's pick.
// Public / ours per row = (anchors' pipeline / anchors' topk) / (ours / pinned
// topk), with the two binaries run in turn in one call.
//
// Inputs as the anchors describe them: q ~ N(0, 1) in FP8, k rows ~ N(0, 1)
// quantised per row (scale amax / 448), w ~ N(0, 1) / 8, K = 2048, block 64,
// each request's blocks at shuffled places of the cache; row (b, j) scores
// positions [0, L - next_n + j + 1). Each call is preceded by a 256 MB
// memset (the L2 flush) and a ~200K-cycle GPU sleep, and timed alone with
// CUDA events; a row's figure is the median of --reps calls.
//
// --verify (this tree's build) also compares each row's top-K scores with
// those of topk over the logits, untimed.
//
// Exit codes: 0 ok, 1 --verify found a row that differs, 2 bad argument,
// 3 a CUDA or library error.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"

#ifndef DSA_PLACE_PAGED
#define DSA_PLACE_PAGED 1
#endif

namespace {

constexpr int kHeads = 64;
constexpr int kDim = 128;
constexpr int kBlock = 64;
constexpr int kTopK = 2048;
constexpr std::size_t kFlushBytes = std::size_t{256} << 20;
constexpr long long kSleepCycles = 200000;  // ~100 us at 1.7-2 GHz, as the anchors' sleep
// The anchors' decode rows, B x next_n x L.
constexpr const char* kAnchorRows =
    "1x1x32768,1x1x131072,1x2x131072,4x1x1048576,32x1x32768,32x1x131072,32x2x131072,64x1x65536,"
    "128x1x32768,128x1x131072,128x2x131072";

void print_usage(std::FILE* to) {
  std::fprintf(to,
               "usage: dsa_place_decode [--rows BxNEXT_NxL,...] [--reps N] [--seed S]%s\n"
               "  default rows: the anchors' decode table (%s)\n",
               DSA_PLACE_PAGED ? " [--op paged|topk] [--verify]" : "", kAnchorRows);
}

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "dsa_place_decode: %s\n", what.c_str());
  print_usage(stderr);
  std::exit(2);
}

void cuda_ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "dsa_place_decode: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(3);
}

void dsa_ok(const dsa::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "dsa_place_decode: %s: %s\n", what, status.to_string().c_str());
  std::exit(3);
}

// A standard normal draw for (seed, stream, i): a 64-bit mix of the three
// (splitmix64's finaliser), its halves as two uniforms, Box-Muller.
__device__ float normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u1 = (static_cast<float>(z >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  const float u2 = static_cast<float>((z >> 16) & 0xFFFFFFu) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

__device__ std::uint8_t fp8_bits(float x) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// n values ~ N(0, 1) as FP8 (q).
__global__ void normal_fp8_kernel(std::uint8_t* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = fp8_bits(normal(seed, stream, static_cast<std::uint64_t>(i)));
  }
}

// n values ~ N(0, 1) / 8 (w).
__global__ void weights_kernel(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = normal(seed, stream, static_cast<std::uint64_t>(i)) * 0.125f;
  }
}

// Key rows ~ N(0, 1) quantised per row: scale = amax / 448, bytes =
// FP8(x / scale). A warp a row, four values a lane.
__global__ void keys_kernel(std::uint8_t* keys, float* scale, std::int64_t rows, std::uint64_t seed,
                            std::uint64_t stream) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; r < rows;
       r += warps) {
    float x[4];
    float amax = 0.0f;
    for (int i = 0; i < 4; ++i) {
      x[i] = normal(seed, stream, static_cast<std::uint64_t>(r) * kDim + lane * 4 + i);
      amax = fmaxf(amax, fabsf(x[i]));
    }
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int i = 0; i < 4; ++i) keys[r * kDim + lane * 4 + i] = fp8_bits(x[i] / s);
    if (lane == 0) scale[r] = s;
  }
}

#if DSA_PLACE_PAGED
// A cache block: 64 x 128 key bytes, then 64 fp32 scales.
constexpr std::int64_t kBlockBytes = static_cast<std::int64_t>(kBlock) * (kDim + 4);

// Request b's i-th block of keys (positions i * 64 ..) into cache block
// table[b * blocks + i]: its 64 x 128 key bytes, then its 64 scales.
__global__ void scatter_kernel(const std::uint8_t* keys, const float* scale, const std::int32_t* table,
                               std::int64_t num_blocks, std::uint8_t* cache) {
  for (std::int64_t blk = blockIdx.x; blk < num_blocks; blk += gridDim.x) {
    std::uint8_t* dst = cache + static_cast<std::int64_t>(table[blk]) * kBlockBytes;
    const uint4* src = reinterpret_cast<const uint4*>(keys + blk * kBlock * kDim);
    for (int i = static_cast<int>(threadIdx.x); i < kBlock * kDim / 16; i += static_cast<int>(blockDim.x)) {
      reinterpret_cast<uint4*>(dst)[i] = src[i];
    }
    float* dst_scale = reinterpret_cast<float*>(dst + kBlock * kDim);
    for (int i = static_cast<int>(threadIdx.x); i < kBlock; i += static_cast<int>(blockDim.x)) {
      dst_scale[i] = scale[blk * kBlock + i];
    }
  }
}
#endif

__global__ void sleep_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// A device allocation freed with its owner.
template <class T>
struct DeviceBuffer {
  T* data = nullptr;
  DeviceBuffer(std::size_t count, const char* what) {
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)), what);
    data = static_cast<T*>(p);
  }
  // count values of `host` copied in
  DeviceBuffer(const std::vector<T>& host, const char* what) : DeviceBuffer(host.size(), what) {
    cuda_ok(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Row {
  int batch = 0, next_n = 0;
  std::int64_t context = 0;
};

std::vector<Row> parse_rows(const std::string& text) {
  std::vector<Row> rows;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string spec = text.substr(at, end - at);
    Row row;
    long long b = 0, n = 0, l = 0;
    char tail = 0;
    if (std::sscanf(spec.c_str(), "%lldx%lldx%lld%c", &b, &n, &l, &tail) != 3 || b < 1 || b > 512 || n < 1 ||
        n > 8 || l < n || l > (1ll << 22)) {
      usage_error("--rows: '" + spec + "' is not BxNEXT_NxL with B in [1, 512], NEXT_N in [1, 8], L in [NEXT_N, 4M]");
    }
    row.batch = static_cast<int>(b);
    row.next_n = static_cast<int>(n);
    row.context = l;
    rows.push_back(row);
    at = end + 1;
  }
  return rows;
}

struct Timer {
  DeviceBuffer<std::uint8_t> flush{kFlushBytes, "the L2 flush buffer"};
  cudaEvent_t start{}, stop{};
  Timer() {
    cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  // The median of `reps` calls, each after the flush and the sleep.
  template <class Call>
  double median_ms(Call&& call, int reps) {
    call();
    cuda_ok(cudaDeviceSynchronize(), "the warm-up call");
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
      cuda_ok(cudaMemsetAsync(flush.data, 0, kFlushBytes), "the L2 flush");
      sleep_kernel<<<1, 1>>>(kSleepCycles);
      cuda_ok(cudaEventRecord(start), "cudaEventRecord");
      call();
      cuda_ok(cudaEventRecord(stop), "cudaEventRecord");
      cuda_ok(cudaEventSynchronize(stop), "a timed call");
      float t = 0.0f;
      cuda_ok(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

// One row's inputs: q, w, the keys of every request (contiguous, `span`
// positions a request), their scales and the shuffled table.
struct Batch {
  Row row;
  std::int64_t blocks, span, rows;
  DeviceBuffer<std::uint8_t> q;
  DeviceBuffer<float> w;
  DeviceBuffer<std::uint8_t> keys;
  DeviceBuffer<float> scale;
  DeviceBuffer<std::int32_t> table;

  Batch(const Row& r, std::uint64_t seed)
      : row(r),
        blocks((r.context + kBlock - 1) / kBlock),
        span(blocks * kBlock),
        rows(static_cast<std::int64_t>(r.batch) * r.next_n),
        q(rows * kHeads * kDim, "q"),
        w(rows * kHeads, "w"),
        keys(r.batch * span * kDim, "the keys"),
        scale(r.batch * span, "the key scales"),
        table(shuffled_blocks(r.batch * blocks, seed), "the block table") {
    normal_fp8_kernel<<<1024, 256>>>(q.data, rows * kHeads * kDim, seed, 1);
    weights_kernel<<<256, 256>>>(w.data, rows * kHeads, seed, 2);
    keys_kernel<<<4096, 256>>>(keys.data, scale.data, row.batch * span, seed, 3);
    cuda_ok(cudaGetLastError(), "the input generators");
  }
  // Request b's blocks are cache blocks order[b * blocks .. (b + 1) * blocks).
  static std::vector<std::int32_t> shuffled_blocks(std::int64_t n, std::uint64_t seed) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    return order;
  }
};

// The CUDA backend without range checks, with a workspace of `bytes`.
struct Context {
  DeviceBuffer<std::uint8_t> workspace;
  dsa::ExecutionContext ctx;
  explicit Context(std::size_t bytes) : workspace(bytes, "the workspace") {
    ctx.backend = dsa::Backend::kCuda;
    ctx.check_ranges = false;
    ctx.workspace = bytes ? workspace.data : nullptr;
    ctx.workspace_bytes = bytes;
  }
};

// The top-K scores of one call of `call` (its values pointer set for that
// call alone: the timed calls return indices only, as the anchors' did),
// sorted in descending order within each row.
template <class Call>
std::vector<float> top_values(Call& call, const Context& c, std::int64_t rows) {
  const DeviceBuffer<float> values(rows * kTopK, "the values");
  call.p.values = values.data;
  call(c.ctx);
  call.p.values = nullptr;
  std::vector<float> host(static_cast<std::size_t>(rows * kTopK));
  cuda_ok(cudaMemcpy(host.data(), values.data, host.size() * sizeof(float), cudaMemcpyDeviceToHost), "the values");
  for (std::int64_t r = 0; r < rows; ++r) std::sort(host.begin() + r * kTopK, host.begin() + (r + 1) * kTopK, std::greater<>());
  return host;
}

// topk over the batch's logits, which indexer_scores writes request by
// request (the anchors' topk row).
struct TopkCall {
  DeviceBuffer<float> logits;
  DeviceBuffer<std::int32_t> ks, ke, indices;
  dsa::TopkParams p;
  std::size_t bytes = 0;

  static std::vector<std::int32_t> ends(const Row& row) {  // row (b, j) scores [0, L - next_n + j + 1)
    std::vector<std::int32_t> e(static_cast<std::size_t>(row.batch) * row.next_n);
    for (std::size_t r = 0; r < e.size(); ++r) {
      e[r] = static_cast<std::int32_t>(row.context - row.next_n + static_cast<std::int64_t>(r % row.next_n) + 1);
    }
    return e;
  }
  explicit TopkCall(const Batch& in)
      : logits(in.rows * in.row.context, "the logits"),
        ks(std::vector<std::int32_t>(static_cast<std::size_t>(in.rows), 0), "ks"),
        ke(ends(in.row), "ke"),
        indices(in.rows * kTopK, "the indices") {
    const Row& row = in.row;
    const Context c(0);
    for (int b = 0; b < row.batch; ++b) {
      const std::int64_t r0 = static_cast<std::int64_t>(b) * row.next_n;
      dsa::IndexerScoresParams s;
      s.q = in.q.data + r0 * kHeads * kDim;
      s.k = in.keys.data + b * in.span * kDim;
      s.k_scale = in.scale.data + b * in.span;
      s.w = in.w.data + r0 * kHeads;
      s.ks = ks.data + r0;
      s.ke = ke.data + r0;
      s.num_queries = row.next_n;
      s.num_keys = row.context;
      s.num_heads = kHeads;
      s.scores = logits.data + r0 * row.context;
      s.score_stride = row.context;
      dsa_ok(dsa::indexer_scores(s, c.ctx), "indexer_scores (the logits)");
    }
    p.scores = logits.data;
    p.ks = ks.data;
    p.ke = ke.data;
    p.num_rows = in.rows;
    p.num_cols = row.context;
    p.score_stride = row.context;
    p.indices = indices.data;
    p.options.k = kTopK;
    dsa_ok(dsa::topk_workspace_size(p, dsa::Backend::kCuda, &bytes), "topk_workspace_size");
  }
  void operator()(const dsa::ExecutionContext& ctx) const { dsa_ok(dsa::topk(p, ctx), "topk"); }
};

#if DSA_PLACE_PAGED
// indexer_topk_paged over the batch's keys in a shuffled cache.
struct PagedCall {
  DeviceBuffer<std::uint8_t> cache;
  DeviceBuffer<std::int32_t> lens, indices;
  dsa::PagedIndexerTopkParams p;
  std::size_t bytes = 0;

  explicit PagedCall(const Batch& in)
      : cache(in.row.batch * in.blocks * kBlockBytes, "the cache"),
        lens(std::vector<std::int32_t>(in.row.batch, static_cast<std::int32_t>(in.row.context)), "context_lens"),
        indices(in.rows * kTopK, "the indices") {
    const std::int64_t num_blocks = in.row.batch * in.blocks;
    scatter_kernel<<<4096, 256>>>(in.keys.data, in.scale.data, in.table.data, num_blocks, cache.data);
    cuda_ok(cudaGetLastError(), "the cache scatter");
    p.q = in.q.data;
    p.kv_cache = cache.data;
    p.block_table = in.table.data;
    p.context_lens = lens.data;
    p.w = in.w.data;
    p.batch = in.row.batch;
    p.next_n = in.row.next_n;
    p.num_heads = kHeads;
    p.num_blocks = num_blocks;
    p.block_size = kBlock;
    p.max_blocks_per_seq = in.blocks;
    p.block_table_stride = in.blocks;
    p.indices = indices.data;
    p.options.k = kTopK;
    dsa_ok(dsa::indexer_topk_paged_workspace_size(p, dsa::Backend::kCuda, &bytes),
           "indexer_topk_paged_workspace_size");
  }
  void operator()(const dsa::ExecutionContext& ctx) const {
    dsa_ok(dsa::indexer_topk_paged(p, ctx), "indexer_topk_paged");
  }
};

// Rows whose top-K scores differ between the paged op and topk over the
// logits (both exact, any tie at the K-th score: equal multisets of values).
std::int64_t mismatched_rows(const Batch& in) {
  PagedCall paged(in);
  TopkCall topk(in);
  const Context pc(paged.bytes), tc(topk.bytes);
  const std::vector<float> a = top_values(paged, pc, in.rows), b = top_values(topk, tc, in.rows);
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < in.rows; ++r) {
    bad += !std::equal(a.begin() + r * kTopK, a.begin() + (r + 1) * kTopK, b.begin() + r * kTopK);
  }
  return bad;
}
#endif

// The median time of `call` on `in`, its workspace allocated outside the timed calls.
template <class Call>
double time_call(const Batch& in, Timer& timer, int reps) {
  Call call(in);
  const Context c(call.bytes);
  return timer.median_ms([&] { call(c.ctx); }, reps);
}

}  // namespace

int main(int argc, char** argv) {
  std::string rows_text = kAnchorRows, op = DSA_PLACE_PAGED ? "paged" : "topk";
  int reps = 20;
  std::uint64_t seed = 0;
  [[maybe_unused]] bool verify = false;  // the paged op's top-K scores against topk over the logits
  [[maybe_unused]] std::int64_t mismatches = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) usage_error(std::string(name) + ": needs a value");
      return argv[++i];
    };
    if (arg == "--rows") {
      rows_text = value("--rows");
    } else if (arg == "--reps") {
      const std::string v = value("--reps");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 10000) usage_error("--reps: expected an integer in [1, 10000], got '" + v + "'");
      reps = static_cast<int>(n);
    } else if (arg == "--seed") {
      const std::string v = value("--seed");
      // strtoull would take "-1" as 2^64 - 1: digits only.
      if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
        usage_error("--seed: expected a non-negative integer, got '" + v + "'");
      }
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (DSA_PLACE_PAGED && arg == "--verify") {
      verify = true;
    } else if (DSA_PLACE_PAGED && arg == "--op") {
      op = value("--op");
      if (op != "paged" && op != "topk") usage_error("--op: expected paged or topk, got '" + op + "'");
    } else if (arg == "-h" || arg == "--help") {
      print_usage(stdout);
      return 0;
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  const std::vector<Row> rows = parse_rows(rows_text);
  const dsa::Operator needed = op == "topk" ? dsa::Operator::kTopk :
#if DSA_PLACE_PAGED
                                            dsa::Operator::kIndexerTopkPaged;
#else
                                            dsa::Operator::kTopk;
#endif
  std::string why;
  if (!dsa::cuda_backend_available(needed, &why)) {
    std::fprintf(stderr, "dsa_place_decode: no CUDA backend: %s\n", why.c_str());
    return 3;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# device %s, op %s, reps %d, seed %llu\n", prop.name,
              op == "topk" ? "topk over the logits" : "indexer_topk_paged", reps, static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  Timer timer;
  for (const Row& row : rows) {
    double ms = 0.0;
    {
      const Batch batch(row, seed);
#if DSA_PLACE_PAGED
      ms = op == "topk" ? time_call<TopkCall>(batch, timer, reps) : time_call<PagedCall>(batch, timer, reps);
      if (verify) {
        const std::int64_t bad = mismatched_rows(batch);
        std::printf("verify %dx%dx%lld: %lld of %lld rows' top-K scores differ from topk over the logits\n",
                    row.batch, row.next_n, static_cast<long long>(row.context), static_cast<long long>(bad),
                    static_cast<long long>(batch.rows));
        mismatches += bad;
      }
#else
      ms = time_call<TopkCall>(batch, timer, reps);
#endif
    }
    std::printf("row %dx%dx%lld %s %.4f\n", row.batch, row.next_n, static_cast<long long>(row.context), op.c_str(), ms);
    std::fflush(stdout);
  }
  return mismatches == 0 ? 0 : 1;
}
