// Per-process memo for kernel launchers (host code): the current device's
// attributes, and one set-up per (kernel, device) - function attributes and
// whatever the set-up derives from them (an occupancy). Both are fixed for
// the process's lifetime; reading or setting them on every launch cost host
// time on each call. Thread-safe; a failed set-up is not remembered, so the
// next launch retries it.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "common/cuda_status.h"
#include "common/device_limits.h"
#include "dsa_topk/dsa_topk.h"

namespace dsa {

class LaunchCache {
 public:
  static LaunchCache& get() {
    static LaunchCache cache;
    return cache;
  }

  // The current device and its limits.
  Status current(int* device, DeviceLimits* out) {
    cudaError_t err = cudaGetDevice(device);
    if (err != cudaSuccess) return error(err, "cudaGetDevice");
    const std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = limits_.find(*device); it != limits_.end()) {
      *out = it->second;
      return Status::Ok();
    }
    DeviceLimits l;
    err = cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, *device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&l.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, *device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&l.reserved_per_block, cudaDevAttrReservedSharedMemoryPerBlock, *device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&l.l2_bytes, cudaDevAttrL2CacheSize, *device);
    if (err != cudaSuccess) return error(err, "reading the device's attributes");
    limits_.emplace(*device, l);
    *out = l;
    return Status::Ok();
  }

  // Runs set_up(int* value) -> Status once per (kernel, device, tag) and
  // returns the value it stored (e.g. CTAs per SM) on every call; the tag
  // tells apart set-ups of one kernel that derive different values.
  template <class SetUp>
  Status once(const void* kernel, int device, SetUp&& set_up, int* value, int tag = 0) {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_tuple(kernel, device, tag);
    if (const auto it = done_.find(key); it != done_.end()) {
      *value = it->second;
      return Status::Ok();
    }
    int v = 0;
    const Status st = set_up(&v);
    if (!st.ok()) return st;
    done_.emplace(key, v);
    *value = v;
    return Status::Ok();
  }

  // once() for the common set-up: the kernel's dynamic shared-memory limit
  // (bytes: the most any launch of it asks for).
  Status allow_shared_memory(const void* kernel, int device, int bytes) {
    int unused = 0;
    return once(
        kernel, device,
        [&](int*) -> Status {
          const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
          return e == cudaSuccess ? Status::Ok() : error(e, "setting the shared-memory size");
        },
        &unused);
  }

  static Status error(cudaError_t err, const char* what) {
    return cuda_status(err, std::string("kernel launch set-up: ") + what);
  }

 private:
  std::mutex mu_;
  std::map<int, DeviceLimits> limits_;
  std::map<std::tuple<const void*, int, int>, int> done_;
};

}  // namespace dsa
