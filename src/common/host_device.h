// Lets one definition serve host code, device code and both compilers.
#pragma once

#if defined(__CUDACC__)
#define DSA_HD __host__ __device__ __forceinline__
#else
#define DSA_HD inline
#endif
