#include "tools/safetensors.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace dsa::tools {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kLengthFieldBytes = 8;  // u64 little-endian header length
constexpr std::size_t kHeaderAlignment = 8;   // the writer pads the header with spaces to this
constexpr char kMetadataKey[] = "__metadata__";
constexpr char kSupportedDtypes[] = "F8_E4M3, F32, I32";
constexpr int kDefaultTopk = 2048;  // contract section 6

Status invalid(const std::string& origin, const std::string& what) {
  return Status{StatusCode::kInvalidArgument, origin + ": " + what};
}

std::int64_t itemsize(DType d) {
  switch (d) {
    case DType::kF8E4M3: return 1;
    case DType::kF32: return 4;
    case DType::kI32: return 4;
  }
  return 0;
}

bool dtype_from_string(const std::string& name, DType* out) {
  for (DType d : {DType::kF8E4M3, DType::kF32, DType::kI32}) {
    if (name == to_string(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string tensor_label(const std::string& name) { return "tensor '" + name + "'"; }

// JSON integers come as signed or unsigned; both must fit int64 (no floats, no
// unsigned values past INT64_MAX, which get<int64_t> would silently wrap).
bool json_to_int64(const Json& v, std::int64_t* out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    *out = static_cast<std::int64_t>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  *out = v.get<std::int64_t>();
  return true;
}

// Little-endian regardless of the host, byte by byte (no unaligned loads).
std::uint64_t load_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < kLengthFieldBytes; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

void store_u64_le(std::uint64_t v, std::uint8_t* p) {
  for (std::size_t i = 0; i < kLengthFieldBytes; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

// One header entry after its JSON has been checked; offsets are relative to
// the first byte after the header.
struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

Status parse_metadata(const Json& value, const std::string& origin,
                      std::map<std::string, std::string>* out) {
  if (!value.is_object())
    return invalid(origin, std::string(kMetadataKey) + " is not a JSON object");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return invalid(origin, std::string(kMetadataKey) + " value of '" + key + "' is not a string");
    }
    (*out)[key] = v.get_ref<const std::string&>();
  }
  return Status::Ok();
}

Status parse_dtype(const Json& entry, const std::string& label, const std::string& origin,
                   DType* out) {
  const auto it = entry.find("dtype");
  if (it == entry.end()) return invalid(origin, label + ": missing \"dtype\"");
  if (!it->is_string()) return invalid(origin, label + ": \"dtype\" is not a string");
  const auto& name = it->get_ref<const std::string&>();
  if (!dtype_from_string(name, out)) {
    return invalid(origin, label + ": dtype " + name +
                               " is not supported (supported: " + kSupportedDtypes + ")");
  }
  return Status::Ok();
}

Status parse_shape(const Json& entry, const std::string& label, const std::string& origin,
                   std::vector<std::int64_t>* out) {
  const auto it = entry.find("shape");
  if (it == entry.end()) return invalid(origin, label + ": missing \"shape\"");
  if (!it->is_array()) return invalid(origin, label + ": \"shape\" is not an array");
  for (const auto& dim : *it) {
    std::int64_t d = 0;
    if (!json_to_int64(dim, &d))
      return invalid(origin, label + ": \"shape\" holds a value that is not a 64-bit integer");
    if (d < 0)
      return invalid(origin, label + ": \"shape\" has a negative dimension " + std::to_string(d));
    out->push_back(d);
  }
  return Status::Ok();
}

Status parse_offsets(const Json& entry, const std::string& label, const std::string& origin,
                     Entry* out) {
  const auto it = entry.find("data_offsets");
  if (it == entry.end()) return invalid(origin, label + ": missing \"data_offsets\"");
  if (!it->is_array() || it->size() != 2 || !json_to_int64((*it)[0], &out->begin) ||
      !json_to_int64((*it)[1], &out->end) || out->begin < 0 || out->end < 0) {
    return invalid(origin, label + ": \"data_offsets\" is not two non-negative integers");
  }
  return Status::Ok();
}

// Bytes the shape needs, or false when numel * itemsize overflows int64.
bool byte_size(const std::vector<std::int64_t>& shape, DType dtype, std::int64_t* bytes) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t n = itemsize(dtype);
  for (std::int64_t d : shape) {
    if (d != 0 && n > kMax / d) return false;
    n *= d;
  }
  *bytes = n;
  return true;
}

Status parse_entry(const std::string& name, const Json& value, const std::string& origin,
                   std::uint64_t data_size, Entry* out) {
  const std::string label = tensor_label(name);
  if (!value.is_object()) return invalid(origin, label + ": entry is not a JSON object");
  out->name = name;
  Status s = parse_dtype(value, label, origin, &out->dtype);
  if (s.ok()) s = parse_shape(value, label, origin, &out->shape);
  if (s.ok()) s = parse_offsets(value, label, origin, out);
  if (!s.ok()) return s;

  const std::string offsets =
      "data_offsets [" + std::to_string(out->begin) + ", " + std::to_string(out->end) + "]";
  if (out->end < out->begin) return invalid(origin, label + ": " + offsets + " end before begin");
  if (static_cast<std::uint64_t>(out->end) > data_size) {
    return invalid(origin, label + ": " + offsets + " outside the data area of " +
                               std::to_string(data_size) + " bytes");
  }
  std::int64_t bytes = 0;
  if (!byte_size(out->shape, out->dtype, &bytes)) {
    return invalid(
        origin, label + ": shape " + shape_string(out->shape) + " overflows a 64-bit byte count");
  }
  if (bytes != out->end - out->begin) {
    return invalid(origin, label + ": " + to_string(out->dtype) + " " + shape_string(out->shape) +
                               " needs " + std::to_string(bytes) + " bytes but " + offsets +
                               " span " + std::to_string(out->end - out->begin));
  }
  return Status::Ok();
}

// Like the reference implementation, the tensors must tile the data area
// exactly: no overlaps, no holes, no trailing bytes.
Status check_coverage(std::vector<Entry>* entries, std::uint64_t data_size,
                      const std::string& origin) {
  std::sort(entries->begin(), entries->end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const Entry& e = (*entries)[i];
    if (i > 0 && e.begin < (*entries)[i - 1].end) {
      return invalid(origin,
                     "tensors '" + (*entries)[i - 1].name + "' and '" + e.name + "' overlap");
    }
    covered += static_cast<std::uint64_t>(e.end - e.begin);
  }
  if (covered != data_size) {
    return invalid(origin, "data area has " + std::to_string(data_size - covered) +
                               " bytes not covered by any tensor");
  }
  return Status::Ok();
}

// Splits the buffer into header JSON and data area.
Status parse_framing(const std::uint8_t* bytes, std::size_t size, const std::string& origin,
                     Json* header, std::uint64_t* header_len) {
  if (size < kLengthFieldBytes) {
    return invalid(origin, "file is " + std::to_string(size) + " bytes, shorter than the " +
                               std::to_string(kLengthFieldBytes) + "-byte header length field");
  }
  *header_len = load_u64_le(bytes);
  const std::uint64_t available = size - kLengthFieldBytes;
  if (*header_len > available) {
    return invalid(origin, "header length " + std::to_string(*header_len) + " exceeds the " +
                               std::to_string(available) + " bytes after the length field");
  }
  const std::uint8_t* first = bytes + kLengthFieldBytes;
  *header = Json::parse(first, first + *header_len, nullptr, /*allow_exceptions=*/false);
  if (header->is_discarded()) return invalid(origin, "header is not valid JSON");
  if (!header->is_object()) return invalid(origin, "header is not a JSON object");
  return Status::Ok();
}

template <typename T>
Tensor make_tensor(DType dtype, std::vector<std::int64_t> shape, const T* values,
                   std::size_t count) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(count * sizeof(T));
  if (count > 0) std::memcpy(t.data.data(), values, t.data.size());
  return t;
}

template <typename T>
std::vector<T> tensor_values(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

// A dimension of an expected shape: a fixed size, or kFree where this tensor
// defines the size (q defines T, H, D; k defines N).
struct Dim {
  static constexpr std::int64_t kFree = -1;
  const char* name;
  std::int64_t size;
};

std::string expected_string(DType dtype, const std::vector<Dim>& dims) {
  std::string s = std::string(to_string(dtype)) + " [";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    s += (i ? ", " : "") + std::string(dims[i].name);
    if (dims[i].size != Dim::kFree) s += "=" + std::to_string(dims[i].size);
  }
  return s + "]";
}

bool matches(const Tensor& t, DType dtype, const std::vector<Dim>& dims) {
  if (t.dtype != dtype || t.shape.size() != dims.size()) return false;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].size != Dim::kFree && dims[i].size != t.shape[i]) return false;
  }
  return true;
}

// Finds `name` and checks its dtype and shape; the error reads
// "k_scale: expected F32 [N=1000], got F32 [999]".
Status expect_tensor(const SafetensorsFile& file, const std::string& name, DType dtype,
                     const std::vector<Dim>& dims, const Tensor** out) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) {
    return invalid(name, "missing tensor, expected " + expected_string(dtype, dims));
  }
  if (!matches(it->second, dtype, dims)) {
    return invalid(name, "expected " + expected_string(dtype, dims) + ", got " +
                             to_string(it->second.dtype) + " " + shape_string(it->second.shape));
  }
  *out = &it->second;
  return Status::Ok();
}

Status parse_topk(const SafetensorsFile& file, int* topk) {
  const auto it = file.metadata.find("topk");
  if (it == file.metadata.end()) {
    *topk = kDefaultTopk;
    return Status::Ok();
  }
  const std::string& text = it->second;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), last, *topk);
  if (ec != std::errc{} || ptr != last || text.empty()) {
    return invalid(kMetadataKey, "topk '" + text + "' is not an integer");
  }
  return Status::Ok();
}

// k rows are k_row_stride bytes apart in the problem; the file holds them dense.
std::vector<std::uint8_t> pack_keys(const IndexerProblem& p) {
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(p.N * p.D));
  for (std::int64_t s = 0; s < p.N; ++s) {
    std::memcpy(packed.data() + s * p.D, p.k.data() + s * p.k_row_stride,
                static_cast<std::size_t>(p.D));
  }
  return packed;
}

}  // namespace

const char* to_string(DType d) {
  switch (d) {
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
  }
  return "unknown";
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

Status parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& origin,
                         SafetensorsFile* out) {
  Json header;
  std::uint64_t header_len = 0;
  Status s = parse_framing(bytes, size, origin, &header, &header_len);
  if (!s.ok()) return s;
  const std::uint8_t* data = bytes + kLengthFieldBytes + header_len;
  const std::uint64_t data_size = size - kLengthFieldBytes - header_len;

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      s = parse_metadata(value, origin, &file.metadata);
    } else {
      entries.emplace_back();
      s = parse_entry(name, value, origin, data_size, &entries.back());
    }
    if (!s.ok()) return s;
  }
  s = check_coverage(&entries, data_size, origin);
  if (!s.ok()) return s;

  for (Entry& e : entries) {
    Tensor& t = file.tensors[e.name];
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.assign(data + e.begin, data + e.end);
  }
  *out = std::move(file);
  return Status::Ok();
}

Status read_safetensors(const std::string& path, SafetensorsFile* out) {
  // Checked first because opening a directory "succeeds" and then fails to read.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found)
    return invalid(path, "file does not exist");
  if (ec) return invalid(path, "cannot access file: " + ec.message());
  if (!std::filesystem::is_regular_file(st)) return invalid(path, "not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return invalid(path, "cannot read file size: " + ec.message());

  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in || static_cast<std::uintmax_t>(in.gcount()) != size)
    return invalid(path, "cannot read file");
  return parse_safetensors(bytes.data(), bytes.size(), path, out);
}

std::vector<std::uint8_t> serialize_safetensors(const SafetensorsFile& file) {
  // ordered_json keeps the reference writer's key order: metadata first, then
  // each entry as dtype, shape, data_offsets.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header[kMetadataKey] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {  // std::map: name order = data order
    header[name] = {{"dtype", to_string(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  // Invalid UTF-8 in a name or metadata is replaced rather than thrown.
  std::string json = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  json.append((kHeaderAlignment - json.size() % kHeaderAlignment) % kHeaderAlignment, ' ');

  std::vector<std::uint8_t> bytes(kLengthFieldBytes + json.size());
  store_u64_le(json.size(), bytes.data());
  std::memcpy(bytes.data() + kLengthFieldBytes, json.data(), json.size());
  bytes.reserve(bytes.size() + offset);
  for (const auto& [name, t] : file.tensors)
    bytes.insert(bytes.end(), t.data.begin(), t.data.end());
  return bytes;
}

Status write_safetensors(const std::string& path, const SafetensorsFile& file) {
  // Refuse what the reader would reject, so a written file always reads back.
  for (const auto& [name, t] : file.tensors) {
    if (name == kMetadataKey)
      return invalid(path, "a tensor cannot be named " + std::string(kMetadataKey));
    std::int64_t bytes = 0;
    if (!byte_size(t.shape, t.dtype, &bytes) ||
        static_cast<std::uint64_t>(bytes) != t.data.size()) {
      return invalid(path, tensor_label(name) + ": " + std::to_string(t.data.size()) +
                               " data bytes do not match " + to_string(t.dtype) + " " +
                               shape_string(t.shape));
    }
  }
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid(path, "cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return invalid(path, "write failed");
  return Status::Ok();
}

Status indexer_problem_from_file(const SafetensorsFile& file, IndexerProblem* out, int* topk) {
  const Tensor *q = nullptr, *k = nullptr, *k_scale = nullptr, *w = nullptr, *ks = nullptr,
               *ke = nullptr;
  Status s = expect_tensor(file, "q", DType::kF8E4M3,
                           {{"T", Dim::kFree}, {"H", Dim::kFree}, {"D", Dim::kFree}}, &q);
  if (!s.ok()) return s;
  const std::int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
  if (H > INT_MAX || D > INT_MAX) return invalid("q", "H or D does not fit in int");
  s = expect_tensor(file, "k", DType::kF8E4M3, {{"N", Dim::kFree}, {"D", D}}, &k);
  if (!s.ok()) return s;
  const std::int64_t N = k->shape[0];
  s = expect_tensor(file, "k_scale", DType::kF32, {{"N", N}}, &k_scale);
  if (s.ok()) s = expect_tensor(file, "w", DType::kF32, {{"T", T}, {"H", H}}, &w);
  if (s.ok()) s = expect_tensor(file, "ks", DType::kI32, {{"T", T}}, &ks);
  if (s.ok()) s = expect_tensor(file, "ke", DType::kI32, {{"T", T}}, &ke);
  int k_top = 0;
  if (s.ok()) s = parse_topk(file, &k_top);
  if (!s.ok()) return s;

  // Ranges (ks <= ke <= N) are left to the API's validate(), which names them.
  IndexerProblem p;
  const auto name = file.metadata.find("name");
  p.name = name != file.metadata.end() ? name->second : "replay";
  p.T = T;
  p.N = N;
  p.H = static_cast<int>(H);
  p.D = static_cast<int>(D);
  p.k_row_stride = D;
  p.q = q->data;
  p.k = k->data;
  p.k_scale = tensor_values<float>(*k_scale);
  p.w = tensor_values<float>(*w);
  p.ks = tensor_values<std::int32_t>(*ks);
  p.ke = tensor_values<std::int32_t>(*ke);
  *out = std::move(p);
  *topk = k_top;
  return Status::Ok();
}

SafetensorsFile file_from_indexer_problem(const IndexerProblem& p, int topk) {
  SafetensorsFile file;
  const std::vector<std::uint8_t> k = pack_keys(p);
  file.tensors["q"] = make_tensor(DType::kF8E4M3, {p.T, p.H, p.D}, p.q.data(), p.q.size());
  file.tensors["k"] = make_tensor(DType::kF8E4M3, {p.N, p.D}, k.data(), k.size());
  file.tensors["k_scale"] = make_tensor(DType::kF32, {p.N}, p.k_scale.data(), p.k_scale.size());
  file.tensors["w"] = make_tensor(DType::kF32, {p.T, p.H}, p.w.data(), p.w.size());
  file.tensors["ks"] = make_tensor(DType::kI32, {p.T}, p.ks.data(), p.ks.size());
  file.tensors["ke"] = make_tensor(DType::kI32, {p.T}, p.ke.data(), p.ke.size());
  file.metadata["topk"] = std::to_string(topk);
  if (!p.name.empty()) file.metadata["name"] = p.name;  // provenance; read back as the name
  return file;
}

void add_output(const TopkOutput& out, SafetensorsFile* file) {
  file->tensors["indices"] =
      make_tensor(DType::kI32, {out.T, out.K}, out.indices.data(), out.indices.size());
  if (!out.values.empty()) {
    file->tensors["values"] =
        make_tensor(DType::kF32, {out.T, out.K}, out.values.data(), out.values.size());
  }
}

}  // namespace dsa::tools
