// LOOM_HOST_DEVICE marks small functions that the host compiler and nvcc both compile: for the
// CPU kernels and, in .cu files, as __host__ __device__ for the CUDA ones.
#pragma once

#ifdef __CUDACC__
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif
