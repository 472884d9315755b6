// Host-compiler stand-ins for the CUDA builtins kernels.cu uses, so that
// g++ can check the kernel source's syntax and struct layouts (abi_test.go).
// They are never run.
#include <cmath>
#include <cstddef>
#include <cstring>
struct attnrun_dim3 { unsigned x, y, z; };
static attnrun_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __shared__
#define __forceinline__ inline
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
static inline void __syncthreads() {}
static inline void __syncwarp() {}
static inline unsigned atomicExch(unsigned* p, unsigned v) { unsigned o = *p; *p = v; return o; }
