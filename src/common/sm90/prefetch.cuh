// Bulk L2 prefetch (PTX ISA "cp.async.bulk.prefetch.L2"): one instruction
// from one thread has the copy engine bring a contiguous range of global
// memory into L2, with no registers, shared memory or barrier involved.
#pragma once

#include <cstdint>

namespace dsa::sm90 {

// Starts a prefetch of [begin, end) into L2 (no wait; no-op when empty).
// begin and end must be multiples of 16 bytes.
__device__ __forceinline__ void prefetch_l2_bulk(std::uintptr_t begin, std::uintptr_t end) {
  if (end <= begin) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(begin), "r"(static_cast<std::uint32_t>(end - begin))
               : "memory");
}

// Starts bringing the line at p into L2 (no wait). Its address translation
// happens now, so a later access to the same page finds it done.
__device__ __forceinline__ void prefetch_l2_line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p) : "memory");
}

}  // namespace dsa::sm90
