// Writes a copy of a safetensors dump with one element made NaN, for the CLI
// test of replay --check-finite (generated dumps are finite).
//   plant_nan IN OUT TENSOR INDEX
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "tools/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: plant_nan IN OUT TENSOR INDEX\n");
    return 2;
  }
  dsa::tools::SafetensorsFile file;
  dsa::Status st = dsa::tools::read_safetensors(argv[1], &file);
  const auto it = file.tensors.find(argv[3]);
  const long long index = std::atoll(argv[4]);
  if (st.ok() && (it == file.tensors.end() || index < 0 || index >= it->second.numel())) {
    st = {dsa::StatusCode::kInvalidArgument, std::string("no element ") + argv[4] + " of tensor " + argv[3]};
  }
  if (st.ok()) {
    dsa::tools::Tensor& t = it->second;
    if (t.dtype == dsa::tools::DType::kF8E4M3) {
      t.data[static_cast<std::size_t>(index)] = 0x7F;  // the FP8 e4m3fn NaN
    } else {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(t.data.data() + index * sizeof(float), &nan, sizeof(nan));
    }
    st = dsa::tools::write_safetensors(argv[2], file);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "plant_nan: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
