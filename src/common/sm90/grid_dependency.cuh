// Programmatic dependent launch (PTX ISA "griddepcontrol"): a kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization may start
// once every CTA of the kernel before it in the stream has called
// allow_dependent_launch() (or exited), instead of when that kernel ends.
// Both instructions are no-ops in a kernel launched without the attribute.
#pragma once

#include <cuda_runtime.h>

namespace dsa::sm90 {

// Host: the launch attribute that makes a launch programmatic (its kernel
// may start before the one ahead of it in the stream ends).
inline cudaLaunchAttribute programmatic_serialization() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// Lets the next kernel in the stream, if launched programmatically, have its
// CTAs scheduled as SMs free up. It promises nothing about this kernel's
// writes: the dependent reads them only after wait_for_prerequisite_grids().
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Waits until the kernel this one was programmatically launched after has
// completed and its writes are visible.
__device__ __forceinline__ void wait_for_prerequisite_grids() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace dsa::sm90
