// Program IR: desc wrappers, editing, binary and text round trips.
#include <gtest/gtest.h>

#include "framework/program_desc.h"
#include "framework/serialization.h"

namespace loom {
namespace {

ProgramDesc TwoOpProgram() {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  VarDesc x = b->Var("x");
  x.SetDims({-1, 4});
  b->Var("y").SetDims({-1, 4});
  b->Var("z").SetDims({-1, 4});
  b->AppendOp("scale", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"scale", 2.0f}});
  b->AppendOp("scale", {{"X", {"y"}}}, {{"Out", {"z"}}}, {{"scale", 3.0f}, {"bias", 1.0f}});
  return p;
}

TEST(IrTest, BuildAndReadOps) {
  ProgramDesc p = TwoOpProgram();
  BlockDesc* b = p.GlobalBlock();
  ASSERT_EQ(b->OpSize(), 2);
  OpDesc op = b->Op(1);
  EXPECT_EQ(op.Type(), "scale");
  EXPECT_EQ(op.Input("X"), std::vector<std::string>{"y"});
  EXPECT_EQ(op.Output("Out"), std::vector<std::string>{"z"});
  EXPECT_FLOAT_EQ(op.Attr<float>("scale", 0.f), 3.0f);
  EXPECT_EQ(op.Role(), kOpRoleForward);
  EXPECT_TRUE(b->FindVar("x"));
  EXPECT_FALSE(b->FindVar("nope"));
  EXPECT_EQ(b->FindVar("x").Dims(), (DDim{-1, 4}));
}

TEST(IrTest, InsertAndRemoveOpsKeepOrder) {
  ProgramDesc p = TwoOpProgram();
  BlockDesc* b = p.GlobalBlock();
  OpDesc first = b->Op(0);
  OpDesc inserted = b->InsertOp(1);
  inserted.SetType("relu");
  ASSERT_EQ(b->OpSize(), 3);
  EXPECT_EQ(b->Op(0).Type(), "scale");
  EXPECT_EQ(b->Op(1).Type(), "relu");
  EXPECT_EQ(b->Op(2).Type(), "scale");
  // Views of existing ops stay valid across inserts.
  EXPECT_EQ(first.Output("Out"), std::vector<std::string>{"y"});
  b->RemoveOp(1);
  ASSERT_EQ(b->OpSize(), 2);
  EXPECT_EQ(b->Op(1).Input("X"), std::vector<std::string>{"y"});
}

TEST(IrTest, RenameAndRemoveVars) {
  ProgramDesc p = TwoOpProgram();
  BlockDesc* b = p.GlobalBlock();
  b->Op(1).RenameInput("y", "y2");
  EXPECT_EQ(b->Op(1).Input("X"), std::vector<std::string>{"y2"});
  EXPECT_TRUE(b->RemoveVar("z"));
  EXPECT_FALSE(b->HasVar("z"));
  EXPECT_TRUE(b->HasVar("x"));
}

TEST(IrTest, AttributesOfEveryType) {
  ProgramDesc p;
  OpDesc op = p.GlobalBlock()->AppendOp();
  op.SetType("t");
  AttributeMap attrs = {{"i", 3},
                        {"f", 1.5f},
                        {"s", std::string("hi")},
                        {"ints", std::vector<int>{1, 2}},
                        {"floats", std::vector<float>{0.5f}},
                        {"strings", std::vector<std::string>{"a", "b"}},
                        {"b", true},
                        {"bools", std::vector<bool>{true, false}},
                        {"blk", BlockIndex{1}},
                        {"l", int64_t{1} << 40},
                        {"longs", std::vector<int64_t>{-1, 7}}};
  for (const auto& [k, v] : attrs) op.SetAttr(k, v);
  ProgramDesc copy(p);
  OpDesc c = copy.GlobalBlock()->Op(0);
  for (const auto& [k, v] : attrs) {
    auto got = c.GetAttr(k);
    ASSERT_TRUE(got.ok()) << k;
    EXPECT_EQ(got.value(), v) << k;
  }
  EXPECT_FALSE(c.GetAttr("missing").ok());
}

TEST(IrTest, BinaryAndTextRoundTrip) {
  ProgramDesc p = TwoOpProgram();
  std::string bytes;
  ASSERT_TRUE(p.proto().SerializeToString(&bytes));
  auto back = ParseProgram(bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->proto().SerializeAsString(), bytes);

  std::string text = ProgramToText(p);
  EXPECT_NE(text.find("scale"), std::string::npos);
  auto from_text = ParseProgramText(text, "mem.pbtxt");
  ASSERT_TRUE(from_text.ok()) << from_text.status().ToString();
  EXPECT_EQ(from_text->proto().SerializeAsString(), bytes);
}

TEST(IrTest, SubBlocksKnowTheirParent) {
  ProgramDesc p;
  BlockDesc* sub = p.AppendBlock(*p.GlobalBlock());
  p.GlobalBlock()->Var("outer");
  EXPECT_EQ(sub->Idx(), 1);
  EXPECT_EQ(sub->ParentIdx(), 0);
  EXPECT_TRUE(sub->FindVarRecursive("outer"));
  EXPECT_FALSE(sub->FindVar("outer"));
  // The global block's pointer survives appending blocks.
  EXPECT_EQ(p.Block(0), p.GlobalBlock());
}

}  // namespace
}  // namespace loom
