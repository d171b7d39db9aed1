#include "common/sm90/tma.h"

#include <cuda_runtime.h>

#include <string>

namespace dsa::sm90 {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Status encoder(EncodeTiled* fn) {
  static EncodeTiled cached = nullptr;
  if (cached == nullptr) {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query);
    if (err != cudaSuccess || query != cudaDriverEntryPointSuccess || ptr == nullptr) {
      return {StatusCode::kCudaError, "cuTensorMapEncodeTiled is not available from the driver"};
    }
    cached = reinterpret_cast<EncodeTiled>(ptr);
  }
  *fn = cached;
  return Status::Ok();
}

Status encode_result(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  return {StatusCode::kCudaError, std::string("cuTensorMapEncodeTiled failed for ") + what +
                                      " (CUresult " + std::to_string(static_cast<int>(r)) + ")"};
}

}  // namespace

Status make_tensor_map_rows_sw128(CUtensorMap* map, const void* base, std::uint64_t rows, std::uint64_t row_bytes,
                                  std::uint64_t stride_bytes, std::uint32_t box_rows) {
  EncodeTiled encode = nullptr;
  if (Status st = encoder(&encode); !st.ok()) return st;
  const cuuint64_t dims[2] = {row_bytes, rows};
  const cuuint64_t strides[1] = {stride_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(row_bytes), box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode_result(encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                              element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                       "a row tensor");
}

Status make_tensor_map_f32_1d(CUtensorMap* map, const float* base, std::uint64_t n, std::uint32_t box) {
  EncodeTiled encode = nullptr;
  if (Status st = encoder(&encode); !st.ok()) return st;
  // Encoded as one row of a 2-D tensor: the driver rejects this rank-1 map.
  const cuuint64_t dims[2] = {n, 1};
  const cuuint64_t strides[1] = {(n * sizeof(float) + 15) / 16 * 16};
  const cuuint32_t box_dims[2] = {box, 1};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode_result(encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides,
                              box_dims, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                       "a vector");
}

Status make_tensor_map_paged_rows_sw128(CUtensorMap* map, const void* base, std::uint64_t blocks,
                                        std::uint32_t block_rows, std::uint64_t row_bytes, std::uint64_t block_stride,
                                        std::uint32_t box_rows) {
  EncodeTiled encode = nullptr;
  if (Status st = encoder(&encode); !st.ok()) return st;
  const cuuint64_t dims[3] = {row_bytes, block_rows, blocks};
  const cuuint64_t strides[2] = {row_bytes, block_stride};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(row_bytes), box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode_result(encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims, strides, box,
                              element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                       "a paged key cache");
}

}  // namespace dsa::sm90
