// Errors instead of aborts: a failed LOOM_CHECK and an allocation that cannot be made throw
// StatusError; the op boundary (Operator::Run), the executor and every other boundary turn it into
// an error Status that names where it happened. Element counts that overflow int64 are an error.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "executor/executor.h"
#include "framework/allocator.h"
#include "framework/ddim.h"
#include "framework/tensor.h"

namespace loom {
namespace {

TEST(Errors, FailedChecksThrowAnInternalStatus) {
  try {
    LOOM_CHECK(1 + 1 == 3, "arithmetic is ", "broken");
    FAIL() << "LOOM_CHECK did not throw";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInternal);
    EXPECT_NE(e.status().message().find("arithmetic is broken"), std::string::npos);
  }
  StatusOr<int> missing = NotFound("no such thing");
  EXPECT_THROW(missing.value(), StatusError);
}

TEST(Errors, ExceptionsBecomeStatuses) {
  auto of = [](auto thrower) {
    try {
      thrower();
    } catch (...) {
      return StatusOfException(std::current_exception());
    }
    return Status::OK();
  };
  EXPECT_EQ(of([] { throw std::bad_alloc(); }).code(), StatusCode::kResourceExhausted);
  Status rt = of([] { throw std::runtime_error("boom"); });
  EXPECT_EQ(rt.code(), StatusCode::kInternal);
  EXPECT_NE(rt.message().find("boom"), std::string::npos);
  EXPECT_EQ(of([] { throw 42; }).code(), StatusCode::kInternal);
  EXPECT_EQ(of([] { throw StatusError(Timeout("late")); }).code(), StatusCode::kTimeout);
}

TEST(Errors, ElementCountsThatOverflowAreAnError) {
  DDim d({int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_THROW(d.numel(), StatusError);
  EXPECT_EQ(DDim({-1, int64_t{1} << 62}).numel(), -1);  // unknown dims stay unknown
  EXPECT_EQ(DDim({int64_t{1} << 31, 4}).numel(), int64_t{1} << 33);
}

TEST(Errors, AllocationsPastTheHostLimitAreResourceExhausted) {
  Tensor t(proto::FP32, DDim({int64_t{1} << 61}));  // 8 EiB
  try {
    t.mutable_data<float>(Place::CPU());
    FAIL() << "allocated 8 EiB";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(e.status().message().find("out of host memory"), std::string::npos)
        << e.status().message();
  }
  EXPECT_GT(HostMemoryLimit(), size_t{1} << 20);
}

// An op whose output cannot be allocated fails with its own name and the output's dims, and the
// executor (and the process) go on.
TEST(Errors, AnOpThatCannotAllocateNamesItselfAndItsOutput) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  VarDesc out = b->Var("huge");
  out.SetType(proto::VarType::DENSE_TENSOR);
  out.SetDtype(proto::FP32);
  b->AppendOp("fill_constant", {}, {{"Out", {"huge"}}},
              {{"shape", std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 20}},
               {"value", 1.0f},
               {"dtype", static_cast<int>(proto::FP32)}});
  Executor exe;
  Scope scope;
  Status st = exe.Run(p, &scope);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("fill_constant"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'huge'"), std::string::npos) << st.message();
  // The same executor runs a sane program afterwards.
  ProgramDesc q;
  q.GlobalBlock()->Var("small").SetDtype(proto::FP32);
  q.GlobalBlock()->AppendOp("fill_constant", {}, {{"Out", {"small"}}},
                            {{"shape", std::vector<int64_t>{2}},
                             {"value", 1.0f},
                             {"dtype", static_cast<int>(proto::FP32)}});
  EXPECT_TRUE(exe.Run(q, &scope).ok());
}

}  // namespace
}  // namespace loom
