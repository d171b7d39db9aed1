// safetensors reading/writing (contract section 6): round trips, the exact byte
// layout, one test per rejected malformation, and truncation/corruption sweeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tools/safetensors.h"

namespace dsa::tools {
namespace {

using Bytes = std::vector<std::uint8_t>;

template <typename T>
Bytes to_bytes(const std::vector<T>& values) {
  Bytes b(values.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
  return b;
}

Tensor tensor(DType dtype, std::vector<std::int64_t> shape, Bytes data) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

// A hand-built file: 8-byte little-endian header length, the header, the data.
Bytes make_file(const std::string& header, const Bytes& data) {
  Bytes b(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<std::uint8_t>(std::uint64_t{header.size()} >> (8 * i));
  std::copy(header.begin(), header.end(), b.begin() + 8);
  std::copy(data.begin(), data.end(), b.begin() + 8 + header.size());
  return b;
}

Status parse(const Bytes& b, SafetensorsFile* out) {
  return parse_safetensors(b.data(), b.size(), "mem.safetensors", out);
}

// Asserts rejection as kInvalidArgument with the origin and every phrase in the message.
void expect_rejected(const Bytes& b, const std::vector<std::string>& phrases) {
  SafetensorsFile f;
  const Status s = parse(b, &f);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_EQ(s.message().rfind("mem.safetensors: ", 0), 0u) << s.message();
  for (const auto& p : phrases) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
}

// One tensor "x" of dtype/shape/offsets as raw header text, with `data_bytes` of data.
Bytes one_tensor(const std::string& entry, std::size_t data_bytes) {
  return make_file("{\"x\":" + entry + "}", Bytes(data_bytes, 0xAB));
}

SafetensorsFile every_dtype_file() {
  SafetensorsFile f;
  f.tensors["f8"] = tensor(DType::kF8E4M3, {2, 3}, {0x00, 0x38, 0xB8, 0x7E, 0xFE, 0x7F});
  f.tensors["f32"] = tensor(DType::kF32, {4}, to_bytes<float>({1.5f, -0.0f, 3.25e-7f, -1e30f}));
  f.tensors["i32"] =
      tensor(DType::kI32, {2, 2}, to_bytes<std::int32_t>({-1, 0, 2147483647, -2147483647 - 1}));
  f.tensors["scalar"] = tensor(DType::kF32, {}, to_bytes<float>({42.0f}));
  f.tensors["empty"] = tensor(DType::kI32, {0, 7}, {});
  f.metadata["model"] = "DeepSeek-V3.2";
  f.metadata["layer"] = "17";
  f.metadata["note"] = "caf\xc3\xa9 \"quoted\"";
  return f;
}

void expect_same(const SafetensorsFile& a, const SafetensorsFile& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    EXPECT_EQ(it->second.dtype, t.dtype) << name;
    EXPECT_EQ(it->second.shape, t.shape) << name;
    EXPECT_EQ(it->second.data, t.data) << name;
  }
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

// ------------------------------------------------------------ round trips ---

TEST(Safetensors, DtypeNames) {
  EXPECT_STREQ(to_string(DType::kF8E4M3), "F8_E4M3");
  EXPECT_STREQ(to_string(DType::kF32), "F32");
  EXPECT_STREQ(to_string(DType::kI32), "I32");
}

TEST(Safetensors, NumelIsShapeProduct) {
  EXPECT_EQ(tensor(DType::kF32, {3, 4, 5}, {}).numel(), 60);
  EXPECT_EQ(tensor(DType::kF32, {}, {}).numel(), 1);
  EXPECT_EQ(tensor(DType::kF32, {0, 9}, {}).numel(), 0);
}

TEST(Safetensors, RoundTripInMemory) {
  const SafetensorsFile f = every_dtype_file();
  SafetensorsFile back;
  ASSERT_TRUE(parse(serialize_safetensors(f), &back).ok());
  expect_same(f, back);
  // Concrete values, not just equality with the input.
  ASSERT_EQ(back.tensors.at("i32").data.size(), 16u);
  std::int32_t last = 0;
  std::memcpy(&last, back.tensors.at("i32").data.data() + 12, 4);
  EXPECT_EQ(last, -2147483647 - 1);
  EXPECT_EQ(back.metadata.at("layer"), "17");
}

TEST(Safetensors, RoundTripThroughFile) {
  const SafetensorsFile f = every_dtype_file();
  const std::string path = temp_path("roundtrip.safetensors");
  ASSERT_TRUE(write_safetensors(path, f).ok());
  EXPECT_EQ(std::filesystem::file_size(path), serialize_safetensors(f).size());
  SafetensorsFile back;
  const Status s = read_safetensors(path, &back);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_same(f, back);
}

TEST(Safetensors, NoMetadataWritesNoMetadataKey) {
  SafetensorsFile f;
  f.tensors["a"] = tensor(DType::kI32, {1}, to_bytes<std::int32_t>({7}));
  const Bytes b = serialize_safetensors(f);
  const std::string text(b.begin() + 8, b.end());
  EXPECT_EQ(text.find("__metadata__"), std::string::npos);
  SafetensorsFile back;
  ASSERT_TRUE(parse(b, &back).ok());
  EXPECT_TRUE(back.metadata.empty());
}

// ---------------------------------------------------------- byte layout -----

// Data is stored b then a: offsets are relative to the first data byte, not
// the file, and tensors need not appear in data order in the header.
TEST(Safetensors, ReadsHandBuiltFile) {
  const std::string header =
      "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[8,11]},"
      "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"__metadata__\":{\"topk\":\"1024\"}}";
  const Bytes data = {0x01, 0x00, 0x00, 0x00, 0xFE, 0xFF, 0xFF, 0xFF, 0x38, 0xC0, 0x7E};
  SafetensorsFile f;
  const Status s = parse(make_file(header, data), &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(f.tensors.at("a").data, Bytes({0x38, 0xC0, 0x7E}));
  EXPECT_EQ(f.tensors.at("a").dtype, DType::kF8E4M3);
  EXPECT_EQ(f.tensors.at("b").data, to_bytes<std::int32_t>({1, -2}));
  EXPECT_EQ(f.tensors.at("b").shape, std::vector<std::int64_t>({2}));
  EXPECT_EQ(f.metadata.at("topk"), "1024");
}

TEST(Safetensors, WritesStandardLayoutByteExact) {
  SafetensorsFile f;
  f.tensors["b"] = tensor(DType::kF8E4M3, {3}, {0x38, 0xC0, 0x7E});
  f.tensors["a"] = tensor(DType::kI32, {2}, to_bytes<std::int32_t>({1, -2}));
  f.metadata["topk"] = "512";
  // 142 bytes of JSON + 2 spaces of padding = 144 = 0x90.
  const std::string header =
      "{\"__metadata__\":{\"topk\":\"512\"},"
      "\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[8,11]}}  ";
  Bytes expected = {0x90, 0, 0, 0, 0, 0, 0, 0};
  expected.insert(expected.end(), header.begin(), header.end());
  for (std::uint8_t v : {0x01, 0x00, 0x00, 0x00, 0xFE, 0xFF, 0xFF, 0xFF, 0x38, 0xC0, 0x7E})
    expected.push_back(v);
  EXPECT_EQ(serialize_safetensors(f), expected);
}

TEST(Safetensors, HeaderPaddedToEightBytes) {
  for (int len = 0; len < 10; ++len) {
    SafetensorsFile f;
    f.tensors[std::string(len + 1, 'n')] = tensor(DType::kF8E4M3, {1}, {0x11});
    const Bytes b = serialize_safetensors(f);
    std::uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= std::uint64_t{b[i]} << (8 * i);
    EXPECT_EQ(header_len % 8, 0u) << len;
    EXPECT_EQ(b.size(), 8 + header_len + 1) << len;
    EXPECT_EQ(b.back(), 0x11) << len;
  }
}

// --------------------------------------------------------- rejected files ---

TEST(SafetensorsReject, MissingFile) {
  SafetensorsFile f;
  const std::string path = temp_path("does-not-exist.safetensors");
  const Status s = read_safetensors(path, &f);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": file does not exist");
}

TEST(SafetensorsReject, DirectoryIsNotAFile) {
  SafetensorsFile f;
  const Status s = read_safetensors(::testing::TempDir(), &f);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
}

TEST(SafetensorsReject, ShorterThanLengthField) {
  expect_rejected(Bytes(5, 0), {"file is 5 bytes, shorter than the 8-byte header length field"});
  expect_rejected(Bytes(), {"file is 0 bytes"});
}

TEST(SafetensorsReject, HeaderLengthBeyondFile) {
  Bytes b = make_file("{}", {});
  b[0] = 3;  // claims 3 header bytes, 2 follow
  expect_rejected(b, {"header length 3 exceeds the 2 bytes after the length field"});
  std::fill(b.begin(), b.begin() + 8, 0xFF);  // 2^64 - 1: must not wrap around
  expect_rejected(b, {"header length 18446744073709551615 exceeds"});
}

TEST(SafetensorsReject, HeaderNotJson) {
  expect_rejected(make_file("{\"x\":", {}), {"header is not valid JSON"});
  expect_rejected(make_file("", {}), {"header is not valid JSON"});
  expect_rejected(make_file("{\"\xff\":1}", {}), {"header is not valid JSON"});  // bad UTF-8
}

TEST(SafetensorsReject, HeaderNotObject) {
  expect_rejected(make_file("[1, 2]", {}), {"header is not a JSON object"});
  expect_rejected(make_file("\"s\"", {}), {"header is not a JSON object"});
}

TEST(SafetensorsReject, EntryMissingFields) {
  expect_rejected(one_tensor("{\"shape\":[1],\"data_offsets\":[0,4]}", 4),
                  {"tensor 'x'", "missing \"dtype\""});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", 4),
                  {"tensor 'x'", "missing \"shape\""});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[1]}", 4),
                  {"tensor 'x'", "missing \"data_offsets\""});
}

TEST(SafetensorsReject, EntryWrongJsonTypes) {
  expect_rejected(one_tensor("7", 0), {"tensor 'x': entry is not a JSON object"});
  expect_rejected(one_tensor("{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}", 4),
                  {"tensor 'x': \"dtype\" is not a string"});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}", 4),
                  {"tensor 'x': \"shape\" is not an array"});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}", 4),
                  {"tensor 'x': \"shape\" holds a value that is not a 64-bit integer"});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}", 4),
                  {"tensor 'x': \"data_offsets\" is not two non-negative integers"});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}", 4),
                  {"tensor 'x': \"data_offsets\" is not two non-negative integers"});
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}", 4),
                  {"tensor 'x': \"data_offsets\" is not two non-negative integers"});
}

TEST(SafetensorsReject, UnknownDtype) {
  expect_rejected(one_tensor("{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}", 4),
                  {"tensor 'x': dtype BF16 is not supported (supported: F8_E4M3, F32, I32)"});
}

TEST(SafetensorsReject, NegativeDimension) {
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,0]}", 0),
                  {"tensor 'x': \"shape\" has a negative dimension -1"});
}

TEST(SafetensorsReject, SizeDoesNotMatchShape) {
  expect_rejected(one_tensor("{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}", 20),
                  {"tensor 'x': F32 [2, 3] needs 24 bytes but data_offsets [0, 20] span 20"});
}

TEST(SafetensorsReject, OffsetsOutsideDataArea) {
  expect_rejected(one_tensor("{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}", 7),
                  {"tensor 'x': data_offsets [0, 8] outside the data area of 7 bytes"});
}

TEST(SafetensorsReject, EndBeforeBegin) {
  expect_rejected(one_tensor("{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,4]}", 8),
                  {"tensor 'x': data_offsets [8, 4] end before begin"});
}

TEST(SafetensorsReject, OverlappingTensors) {
  const std::string header =
      "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  expect_rejected(make_file(header, Bytes(12)), {"tensors 'a' and 'b' overlap"});
}

TEST(SafetensorsReject, HoleInDataArea) {
  const std::string header =
      "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[7,11]}}";
  expect_rejected(make_file(header, Bytes(11)),
                  {"data area has 3 bytes not covered by any tensor"});
}

TEST(SafetensorsReject, TrailingBytes) {
  expect_rejected(one_tensor("{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}", 9),
                  {"data area has 5 bytes not covered by any tensor"});
}

TEST(SafetensorsReject, MetadataValueNotString) {
  expect_rejected(make_file("{\"__metadata__\":{\"topk\":2048}}", {}),
                  {"__metadata__ value of 'topk' is not a string"});
}

TEST(SafetensorsReject, MetadataNotObject) {
  expect_rejected(make_file("{\"__metadata__\":[\"a\"]}", {}),
                  {"__metadata__ is not a JSON object"});
}

TEST(SafetensorsReject, NumelOverflow) {
  // 2^32 * 2^32 elements: the product wraps to 0 in 64 bits, matching 0 bytes.
  expect_rejected(
      one_tensor("{\"dtype\":\"F8_E4M3\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}",
                 0),
      {"tensor 'x': shape [4294967296, 4294967296] overflows a 64-bit byte count"});
  // numel fits but numel * 4 does not.
  expect_rejected(
      one_tensor("{\"dtype\":\"F32\",\"shape\":[4611686018427387905],\"data_offsets\":[0,4]}", 4),
      {"tensor 'x'", "overflows"});
  // Beyond int64 entirely.
  expect_rejected(
      one_tensor("{\"dtype\":\"F32\",\"shape\":[18446744073709551615],\"data_offsets\":[0,4]}", 4),
      {"tensor 'x': \"shape\" holds a value that is not a 64-bit integer"});
}

TEST(SafetensorsReject, WriterRefusesInconsistentTensor) {
  SafetensorsFile f;
  f.tensors["x"] = tensor(DType::kF32, {3}, Bytes(8));
  const std::string path = temp_path("inconsistent.safetensors");
  const Status s = write_safetensors(path, f);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": tensor 'x': 8 data bytes do not match F32 [3]");
}

TEST(SafetensorsReject, WriterReportsUnwritablePath) {
  const std::string path = temp_path("no-such-dir/out.safetensors");
  const Status s = write_safetensors(path, every_dtype_file());
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": cannot open for writing");
}

// ------------------------------------------------------------ fuzz sweeps ---

TEST(SafetensorsFuzz, EveryTruncationIsRejected) {
  const Bytes b = serialize_safetensors(every_dtype_file());
  for (std::size_t len = 0; len < b.size(); ++len) {
    SafetensorsFile f;
    const Status s = parse_safetensors(b.data(), len, "cut", &f);
    ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << "length " << len;
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(SafetensorsFuzz, CorruptedHeadersNeverCrash) {
  const Bytes good = serialize_safetensors(every_dtype_file());
  std::uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= std::uint64_t{good[i]} << (8 * i);
  std::mt19937 rng(20240917);
  std::uniform_int_distribution<std::size_t> pos(0, 8 + header_len - 1);  // length field + header
  std::uniform_int_distribution<int> flip(1, 255);
  std::uniform_int_distribution<int> count(1, 4);
  int rejected = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Bytes b = good;
    for (int n = count(rng); n > 0; --n) b[pos(rng)] ^= static_cast<std::uint8_t>(flip(rng));
    SafetensorsFile f;
    const Status s = parse(b, &f);
    if (s.ok()) continue;  // a flip inside a string can leave a valid file
    ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    ASSERT_EQ(s.message().rfind("mem.safetensors: ", 0), 0u) << s.message();
    ++rejected;
  }
  // Most corruptions break the JSON or the offsets; a sweep that rejects
  // nothing is not exercising the checks.
  EXPECT_GT(rejected, 2000);
}

// ------------------------------------------------------ indexer problems ----

constexpr std::int64_t kT = 3, kN = 5, kStride = 144;
constexpr int kH = 64, kD = 128;

// A tiny problem whose k rows carry 16 padding bytes that must not be written.
IndexerProblem tiny_problem() {
  IndexerProblem p;
  p.name = "handmade";
  p.seed = 99;
  p.T = kT;
  p.N = kN;
  p.H = kH;
  p.D = kD;
  p.k_row_stride = kStride;
  p.q.resize(kT * kH * kD);
  for (std::size_t i = 0; i < p.q.size(); ++i) p.q[i] = static_cast<std::uint8_t>(i * 7 + 3);
  p.k.assign(kN * kStride, 0xEE);  // padding marker
  for (std::int64_t s = 0; s < kN; ++s) {
    for (int d = 0; d < kD; ++d) p.k[s * kStride + d] = static_cast<std::uint8_t>(s * 31 + d);
  }
  p.k_scale = {0.5f, 1.0f, 2.0f, 0.25f, 3.0f};
  for (std::int64_t i = 0; i < kT * kH; ++i) p.w.push_back(static_cast<float>(i) - 90.5f);
  p.ks = {0, 1, 5};
  p.ke = {5, 3, 5};
  return p;
}

SafetensorsFile tiny_file() { return file_from_indexer_problem(tiny_problem(), 512); }

// Parses `file`'s problem, expecting the exact message.
void expect_problem_error(const SafetensorsFile& file, const std::string& message) {
  IndexerProblem p;
  int topk = 0;
  const Status s = indexer_problem_from_file(file, &p, &topk);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_EQ(s.message(), message);
}

TEST(SafetensorsProblem, WritesDumpFormat) {
  const SafetensorsFile f = tiny_file();
  EXPECT_EQ(f.tensors.at("q").shape, std::vector<std::int64_t>({kT, kH, kD}));
  EXPECT_EQ(f.tensors.at("k").shape, std::vector<std::int64_t>({kN, kD}));
  EXPECT_EQ(f.tensors.at("k").data.size(), static_cast<std::size_t>(kN * kD));  // packed
  EXPECT_EQ(f.tensors.at("k").data[kD], 31);  // row 1, column 0 follows row 0 directly
  EXPECT_EQ(f.tensors.at("k_scale").dtype, DType::kF32);
  EXPECT_EQ(f.tensors.at("w").shape, std::vector<std::int64_t>({kT, kH}));
  EXPECT_EQ(f.tensors.at("ks").dtype, DType::kI32);
  EXPECT_EQ(f.tensors.at("ke").shape, std::vector<std::int64_t>({kT}));
  EXPECT_EQ(f.metadata.at("topk"), "512");
  EXPECT_EQ(f.tensors.size(), 6u);
}

TEST(SafetensorsProblem, RoundTripWithOutputs) {
  const IndexerProblem p = tiny_problem();
  SafetensorsFile f = file_from_indexer_problem(p, 1024);
  TopkOutput out;
  out.T = kT;
  out.K = 4;
  out.indices = {4, 0, 2, -1, 1, 2, -1, -1, -1, -1, -1, -1};
  const float pad = -INFINITY;
  out.values = {9.f, 8.f, 7.f, pad, 1.f, 0.5f, pad, pad, pad, pad, pad, pad};
  add_output(out, &f);

  const std::string path = temp_path("problem.safetensors");
  ASSERT_TRUE(write_safetensors(path, f).ok());
  SafetensorsFile back;
  ASSERT_TRUE(read_safetensors(path, &back).ok());
  IndexerProblem r;
  int topk = 0;
  const Status s = indexer_problem_from_file(back, &r, &topk);
  ASSERT_TRUE(s.ok()) << s.to_string();

  EXPECT_EQ(topk, 1024);
  EXPECT_EQ(r.name, "handmade");
  EXPECT_EQ(r.seed, 0u);
  EXPECT_EQ(r.T, kT);
  EXPECT_EQ(r.N, kN);
  EXPECT_EQ(r.H, kH);
  EXPECT_EQ(r.D, kD);
  EXPECT_EQ(r.k_row_stride, kD);
  EXPECT_EQ(r.q, p.q);
  ASSERT_EQ(r.k.size(), static_cast<std::size_t>(kN * kD));
  for (std::int64_t row = 0; row < kN; ++row) {
    for (int d = 0; d < kD; ++d)
      ASSERT_EQ(r.k[row * kD + d], p.k[row * kStride + d]) << row << "," << d;
  }
  EXPECT_EQ(r.k_scale, p.k_scale);
  EXPECT_EQ(r.w, p.w);
  EXPECT_EQ(r.ks, p.ks);
  EXPECT_EQ(r.ke, p.ke);

  const Tensor& idx = back.tensors.at("indices");
  EXPECT_EQ(idx.dtype, DType::kI32);
  EXPECT_EQ(idx.shape, std::vector<std::int64_t>({kT, 4}));
  EXPECT_EQ(idx.data, to_bytes(out.indices));
  const Tensor& val = back.tensors.at("values");
  EXPECT_EQ(val.dtype, DType::kF32);
  EXPECT_EQ(val.shape, std::vector<std::int64_t>({kT, 4}));
  EXPECT_EQ(val.data, to_bytes(out.values));
}

TEST(SafetensorsProblem, IndicesOnlyOutput) {
  SafetensorsFile f;
  TopkOutput out;
  out.T = 1;
  out.K = 2;
  out.indices = {3, -1};
  add_output(out, &f);
  EXPECT_EQ(f.tensors.count("values"), 0u);
  EXPECT_EQ(f.tensors.at("indices").data, to_bytes<std::int32_t>({3, -1}));
}

TEST(SafetensorsProblem, DefaultsWithoutMetadata) {
  SafetensorsFile f = tiny_file();
  f.metadata.clear();
  IndexerProblem p;
  int topk = 0;
  ASSERT_TRUE(indexer_problem_from_file(f, &p, &topk).ok());
  EXPECT_EQ(topk, 2048);
  EXPECT_EQ(p.name, "replay");
}

TEST(SafetensorsProblem, RangesAreLeftToValidation) {
  SafetensorsFile f = tiny_file();
  f.tensors["ks"].data = to_bytes<std::int32_t>({4, -1, 9});
  f.tensors["ke"].data = to_bytes<std::int32_t>({1, 100, 9});
  IndexerProblem p;
  int topk = 0;
  ASSERT_TRUE(indexer_problem_from_file(f, &p, &topk).ok());
  EXPECT_EQ(p.ks, std::vector<std::int32_t>({4, -1, 9}));
  EXPECT_EQ(p.ke, std::vector<std::int32_t>({1, 100, 9}));
}

TEST(SafetensorsProblem, EachMissingTensorIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"q", "q: missing tensor, expected F8_E4M3 [T, H, D]"},
      {"k", "k: missing tensor, expected F8_E4M3 [N, D=128]"},
      {"k_scale", "k_scale: missing tensor, expected F32 [N=5]"},
      {"w", "w: missing tensor, expected F32 [T=3, H=64]"},
      {"ks", "ks: missing tensor, expected I32 [T=3]"},
      {"ke", "ke: missing tensor, expected I32 [T=3]"},
  };
  for (const auto& [name, message] : cases) {
    SafetensorsFile f = tiny_file();
    f.tensors.erase(name);
    SCOPED_TRACE(name);
    expect_problem_error(f, message);
  }
}

TEST(SafetensorsProblem, MismatchedTensorsAreNamed) {
  SafetensorsFile f = tiny_file();
  f.tensors["k_scale"] = tensor(DType::kF32, {4}, Bytes(16));
  expect_problem_error(f, "k_scale: expected F32 [N=5], got F32 [4]");

  f = tiny_file();
  f.tensors["q"] = tensor(DType::kF32, {kT, kH}, Bytes(kT * kH * 4));
  expect_problem_error(f, "q: expected F8_E4M3 [T, H, D], got F32 [3, 64]");

  f = tiny_file();
  f.tensors["k"] = tensor(DType::kF8E4M3, {kN, 64}, Bytes(kN * 64));
  expect_problem_error(f, "k: expected F8_E4M3 [N, D=128], got F8_E4M3 [5, 64]");

  f = tiny_file();
  f.tensors["w"] = tensor(DType::kF32, {kT, 32}, Bytes(kT * 32 * 4));
  expect_problem_error(f, "w: expected F32 [T=3, H=64], got F32 [3, 32]");

  f = tiny_file();
  f.tensors["ks"] = tensor(DType::kF32, {kT}, Bytes(kT * 4));
  expect_problem_error(f, "ks: expected I32 [T=3], got F32 [3]");

  f = tiny_file();
  f.tensors["ke"] = tensor(DType::kI32, {kT, 1}, Bytes(kT * 4));
  expect_problem_error(f, "ke: expected I32 [T=3], got I32 [3, 1]");
}

TEST(SafetensorsProblem, NonIntegerTopkRejected) {
  for (const std::string text : {"abc", "12x", "", " 512", "1e3", "99999999999"}) {
    SafetensorsFile f = tiny_file();
    f.metadata["topk"] = text;
    SCOPED_TRACE(text);
    expect_problem_error(f, "__metadata__: topk '" + text + "' is not an integer");
  }
}

TEST(SafetensorsProblem, FailureLeavesOutputsUntouched) {
  SafetensorsFile f = tiny_file();
  f.tensors.erase("ke");
  IndexerProblem p;
  p.name = "untouched";
  int topk = 7;
  EXPECT_FALSE(indexer_problem_from_file(f, &p, &topk).ok());
  EXPECT_EQ(p.name, "untouched");
  EXPECT_EQ(topk, 7);
}

}  // namespace
}  // namespace dsa::tools
