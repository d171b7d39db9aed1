// Reading and writing safetensors files (contract section 6): an 8-byte
// little-endian header length, a JSON header, then the raw tensor bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dsa_topk/dsa_topk.h"
#include "tools/problem.h"

namespace dsa::tools {

enum class DType { kF8E4M3, kF32, kI32 };
const char* to_string(DType d);  // "F8_E4M3", "F32", "I32"

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;  // little-endian, row-major, exactly numel * itemsize bytes
  std::int64_t numel() const;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // "__metadata__" (string -> string)
  std::map<std::string, Tensor> tensors;
};

// Errors are reported as Status{kInvalidArgument, "<path>: <problem>"} naming what
// is wrong (bad header, unknown dtype, shape/size mismatch, overlapping or
// truncated data, ...). Never crashes on malformed input.
Status read_safetensors(const std::string& path, SafetensorsFile* out);
Status write_safetensors(const std::string& path, const SafetensorsFile& file);
// The same over memory buffers (used by the fuzz-style tests).
Status parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& origin,
                         SafetensorsFile* out);
std::vector<std::uint8_t> serialize_safetensors(const SafetensorsFile& file);

// Dump <-> problem. Requires q [T,H,D] F8_E4M3, k [N,D] F8_E4M3, k_scale [N] F32,
// w [T,H] F32, ks [T] I32, ke [T] I32; names the missing or mismatched tensor.
// `topk` comes from metadata "topk" (default 2048) when present.
Status indexer_problem_from_file(const SafetensorsFile& file, IndexerProblem* out, int* topk);
SafetensorsFile file_from_indexer_problem(const IndexerProblem& problem, int topk);
// Adds indices [T,K] I32 (and values [T,K] F32 when non-empty) to `file`.
void add_output(const TopkOutput& out, SafetensorsFile* file);

}  // namespace dsa::tools
