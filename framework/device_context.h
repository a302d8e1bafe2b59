// DeviceContext: what a kernel needs to run on a place. CPU: nothing but the place and a
// random-number seed stream. CUDA: a stream and a cuBLAS handle (opaque here so that code
// built without CUDA never sees CUDA headers; .cu files cast them back).
// Thread-safety: one context per place, used by that place's worker thread.
#pragma once

#include <cstdint>
#include <memory>

#include "framework/place.h"

namespace loom {

class DeviceContext {
 public:
  explicit DeviceContext(Place place) : place_(place) {}
  virtual ~DeviceContext() = default;
  const Place& place() const { return place_; }
  // Blocks until all work queued on this context has finished.
  virtual void Wait() const {}

 private:
  Place place_;
};

class CPUDeviceContext : public DeviceContext {
 public:
  explicit CPUDeviceContext(Place place) : DeviceContext(place) {}
};

class CUDADeviceContext : public DeviceContext {
 public:
  explicit CUDADeviceContext(Place place);
  ~CUDADeviceContext() override;
  void Wait() const override;
  void* stream() const { return stream_; }         // cudaStream_t
  void* cublas_handle() const { return cublas_; }  // cublasHandle_t

 private:
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
};

// The context of a place, created on first use and kept for the process.
DeviceContext* GetDeviceContext(const Place& place);

// Number of CUDA devices visible (0 in a build without CUDA or on a machine without GPUs).
int CudaDeviceCount();

}  // namespace loom
