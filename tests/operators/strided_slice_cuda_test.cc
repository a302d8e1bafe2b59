// strided_slice's CUDA kernels against its CPU ones (forward and gradient), over positive and
// negative strides, clamped bounds, Fluid's end = -1 with a negative stride, and int64 data.
// Skips (with the reason) where no CUDA device is present.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "tests/gpu_required.h"

namespace loom::testing {
namespace {

constexpr const char* kNoDevice = "no CUDA device: CUDA kernels compiled, not run";

TEST(StridedSliceCudaTest, MatchesCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  struct Case {
    DDim x;
    std::vector<int> axes, starts, ends, strides;
  };
  std::vector<Case> cases = {
      {{1, 6}, {1}, {1}, {5}, {2}},                         // batch size 1
      {{4, 5, 6}, {0, 2}, {3, -1}, {0, -100}, {-1, -2}},    // walking back, clamped
      {{3, 4, 5}, {1}, {2}, {-1}, {-1}},                    // end -1: through index 0
      {{2, 3, 2, 4}, {1, 3}, {-100, 0}, {100, 4}, {2, 3}},  // clamped forward
  };
  for (DataType dt : {proto::FP32, proto::FP64}) {
    for (const auto& c : cases) {
      OpTest t("strided_slice");
      t.Input("Input", Random(dt, c.x, 191))
          .Output("Out")
          .Attr("axes", c.axes)
          .Attr("starts", c.starts)
          .Attr("ends", c.ends)
          .Attr("strides", c.strides);
      ExpectCudaMatchesCpu(t, {"Out"}, "Out", 0,
                           "strided_slice " + c.x.ToString() + " " + DataTypeName(dt));
    }
  }
  OpTest t("strided_slice");
  t.Input("Input", Ints(DDim{2, 3}, {1, 2, 3, 4, 5, 6}))
      .Output("Out")
      .Attr("axes", std::vector<int>{1})
      .Attr("starts", std::vector<int>{2})
      .Attr("ends", std::vector<int>{-1})
      .Attr("strides", std::vector<int>{-2});
  ExpectCudaMatchesCpu(t, {"Out"}, "", 0, "strided_slice int64");
}

}  // namespace
}  // namespace loom::testing
