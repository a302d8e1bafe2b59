// The verifier and compile-time shape inference: one test per kind of bad program.
#include <gtest/gtest.h>

#include "framework/verifier.h"
#include "test_programs.h"

namespace loom {
namespace {

using testing::MlpProgram;

void ExpectError(const ProgramDesc& p, std::initializer_list<const char*> fragments) {
  Status st = VerifyProgram(p);
  ASSERT_FALSE(st.ok()) << "expected a verification error";
  for (const char* f : fragments)
    EXPECT_NE(st.message().find(f), std::string::npos)
        << "message lacks '" << f << "': " << st.message();
}

TEST(VerifierTest, AcceptsAWellFormedProgramAndInfersShapes) {
  ProgramDesc p = MlpProgram(proto::FP32);
  Status st = VerifyProgram(p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(InferShapes(p.GlobalBlock()).ok());
  EXPECT_EQ(p.GlobalBlock()->FindVar("h0").Dims(), (DDim{-1, 5}));
  EXPECT_EQ(p.GlobalBlock()->FindVar("o1").Dims(), (DDim{-1, 3}));
  EXPECT_EQ(p.GlobalBlock()->FindVar("loss").Dims(), (DDim{1}));
}

TEST(VerifierTest, UnknownOpType) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->Op(2).SetType("relu_typo");
  ExpectError(p, {"relu_typo", "block 0, #2", "unknown op type"});
}

TEST(VerifierTest, MissingInputVar) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->Op(0).SetInput("Y", {"w_missing"});
  ExpectError(p, {"mul", "w_missing", "'Y'"});
}

TEST(VerifierTest, UnknownAndMissingSlots) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->Op(2).SetInput("Z", {"h1"});
  ExpectError(p, {"relu", "unknown input slot 'Z'"});
  ProgramDesc q = MlpProgram(proto::FP32);
  q.GlobalBlock()->Op(0).RemoveInput("Y");
  ExpectError(q, {"mul", "required input slot 'Y'"});
}

TEST(VerifierTest, WrongAttributeType) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->Op(0).SetAttr("x_num_col_dims", std::string("one"));
  ExpectError(p, {"mul", "x_num_col_dims", "must be int", "got string"});
}

TEST(VerifierTest, UnknownAttribute) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->Op(2).SetAttr("alpha", 0.5f);
  ExpectError(p, {"relu", "unknown attribute 'alpha'"});
}

TEST(VerifierTest, ShapeMismatchInMul) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->FindVar("w1").SetDims({6, 5});
  ExpectError(p, {"mul", "block 0, #0", "x", "w1", "[6, 5]"});
}

TEST(VerifierTest, DeclaredOutputDimsMustAgree) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->FindVar("h0").SetDims({-1, 7});
  ExpectError(p, {"h0", "[-1, 7]", "[-1, 5]"});
}

TEST(VerifierTest, BadBlockStructure) {
  ProgramDesc p;
  p.mutable_proto()->mutable_blocks(0)->set_parent_idx(3);
  p.Rebuild();
  ExpectError(p, {"parent"});
  ProgramDesc empty;
  empty.mutable_proto()->clear_blocks();
  empty.Rebuild();
  ExpectError(empty, {"no blocks"});
  ProgramDesc dup = MlpProgram(proto::FP32);
  *dup.mutable_proto()->mutable_blocks(0)->add_vars() = dup.proto().blocks(0).vars(0);
  dup.Rebuild();
  ExpectError(dup, {"declared twice"});
}

TEST(VerifierTest, DuplicatedVarsInSingleSlot) {
  ProgramDesc p = MlpProgram(proto::FP32);
  p.GlobalBlock()->Op(2).SetInput("X", {"h1", "h0"});
  ExpectError(p, {"relu", "takes one var"});
}

}  // namespace
}  // namespace loom
