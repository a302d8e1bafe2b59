// CUDA pieces of the framework core: the CUDA allocator, copies and the device context.
// Compiled only when CUDA is enabled (see framework/CMakeLists.txt).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "framework/allocator.h"
#include "framework/device_context.h"

namespace loom {

#define LOOM_CUDA_CHECK(expr)                                                  \
  do {                                                                         \
    cudaError_t _e = (expr);                                                   \
    LOOM_CHECK(_e == cudaSuccess, #expr, " failed: ", cudaGetErrorString(_e)); \
  } while (0)

namespace {
class CudaDeviceAllocator : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device) : device_(device) {}
  void* Allocate(size_t bytes) override {
    LOOM_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear it: the device stays usable
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw StatusError(ResourceExhausted("out of memory on cuda:", device_, " allocating ", bytes,
                                          " bytes (", cudaGetErrorString(err), "; ", free >> 20,
                                          " of ", total >> 20, " MiB free)"));
    }
    Account(static_cast<ptrdiff_t>(bytes));
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    cudaSetDevice(device_);
    cudaFree(ptr);
    Account(-static_cast<ptrdiff_t>(bytes));
  }

 private:
  int device_;
};
}  // namespace

namespace internal {
Allocator* CudaAllocator(int device) {
  static std::mutex mu;
  static auto* allocators = new std::map<int, std::unique_ptr<Allocator>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*allocators)[device];
  if (!slot) slot = std::make_unique<CudaDeviceAllocator>(device);
  return slot.get();
}

void CudaMemCopy(const Place& dst_place, void* dst, const Place& src_place, const void* src,
                 size_t bytes) {
  if (dst_place.is_cuda() && src_place.is_cuda() && dst_place.device != src_place.device) {
    LOOM_CUDA_CHECK(cudaMemcpyPeer(dst, dst_place.device, src, src_place.device, bytes));
    return;
  }
  LOOM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}
}  // namespace internal

CUDADeviceContext::CUDADeviceContext(Place place) : DeviceContext(place) {
  LOOM_CUDA_CHECK(cudaSetDevice(place.device));
  cudaStream_t s;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  cublasHandle_t h;
  LOOM_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed on ",
             place.ToString());
  cublasSetStream(h, s);
  cublas_ = h;
}

CUDADeviceContext::~CUDADeviceContext() {
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CUDADeviceContext::Wait() const {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace loom
