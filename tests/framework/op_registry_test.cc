// The op registry's attribute lookup: a grad op registered with AttrsFrom(fwd) accepts exactly
// its forward op's attributes (specs, defaults, checks) plus its own, read from the registry
// when looked up, whatever order the two were registered in.
#include <gtest/gtest.h>

#include <algorithm>

#include "framework/op_registry.h"

namespace loom {
namespace {

// The grad op is registered before its forward op: AttrsFrom must not depend on the order.
LOOM_REGISTER_OP(test_attrs_grad)
    .Doc("test: a grad op taking its attributes from test_attrs")
    .Input("X", "")
    .Output("X@GRAD", "", false, true)
    .AttrsFrom("test_attrs")
    .Attr<bool>("grad_only", false, "an attribute of the grad op alone");
LOOM_REGISTER_OP(test_attrs)
    .Doc("test: a forward op with a checked, a defaulted and a required attribute")
    .Input("X", "")
    .Output("Out", "")
    .Attr<int>("width", 3, "checked: > 0", Positive("width"))
    .Attr<std::string>("mode", "fast", "defaulted")
    .RequiredAttr<float>("scale", "required");

StatusOr<AttributeMap> Resolve(const std::string& type, const AttributeMap& attrs) {
  proto::OpDesc proto;
  OpDesc desc(&proto);
  desc.SetType(type);
  for (const auto& [name, value] : attrs) desc.SetAttr(name, value);
  const OpInfo* info = OpRegistry::Global().Find(type);
  EXPECT_NE(info, nullptr) << type;
  return info->ResolveAttrs(desc, "op '" + type + "'");
}

std::vector<std::string> Names(const OpInfo& info) {
  std::vector<std::string> out;
  for (const AttrSpec* a : info.AllAttrs()) out.push_back(a->name);
  return out;
}

TEST(OpRegistryTest, GradOpListsItsOwnThenItsForwardAttributes) {
  const OpInfo* grad = OpRegistry::Global().Find("test_attrs_grad");
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(Names(*grad), (std::vector<std::string>{"grad_only", "width", "mode", "scale"}));
  const OpInfo* fwd = OpRegistry::Global().Find("test_attrs");
  EXPECT_EQ(grad->FindAttr("width"), fwd->FindAttr("width"));  // the forward's own spec
  EXPECT_NE(grad->FindAttr(kOpRoleAttr), nullptr);             // common attributes too
  EXPECT_EQ(fwd->FindAttr("grad_only"), nullptr);              // nothing flows back
}

TEST(OpRegistryTest, GradOpTakesTheForwardDefaultsAndRequirements) {
  auto attrs = Resolve("test_attrs_grad", {{"scale", 2.0f}});
  ASSERT_TRUE(attrs.ok()) << attrs.status().ToString();
  EXPECT_EQ(GetAttr<int>(attrs.value(), "width"), 3);
  EXPECT_EQ(GetAttr<std::string>(attrs.value(), "mode"), "fast");
  EXPECT_EQ(GetAttr<bool>(attrs.value(), "grad_only"), false);

  auto missing = Resolve("test_attrs_grad", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("required attribute 'scale'"), std::string::npos)
      << missing.status().message();
}

TEST(OpRegistryTest, ForwardChecksAndTypesApplyToTheGradOp) {
  auto bad = Resolve("test_attrs_grad", {{"scale", 1.0f}, {"width", 0}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("width must be > 0"), std::string::npos)
      << bad.status().message();

  auto mistyped = Resolve("test_attrs_grad", {{"scale", 1.0f}, {"mode", 1}});
  ASSERT_FALSE(mistyped.ok());
  EXPECT_NE(mistyped.status().message().find("'mode' must be string"), std::string::npos)
      << mistyped.status().message();
}

TEST(OpRegistryTest, GradOpStillRejectsUnknownAttributes) {
  auto unknown = Resolve("test_attrs_grad", {{"scale", 1.0f}, {"height", 2}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown attribute 'height'"), std::string::npos)
      << unknown.status().message();
}

// Real ops: mul_grad once re-declared mul's attributes without their checks.
TEST(OpRegistryTest, MulGradChecksItsForwardAttributes) {
  auto bad = Resolve("mul_grad", {{"x_num_col_dims", 0}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x_num_col_dims must be > 0"), std::string::npos)
      << bad.status().message();
  EXPECT_TRUE(Resolve("mul_grad", {{"x_num_col_dims", 2}}).ok());
}

TEST(OpRegistryTest, EveryAttrsFromNamesARegisteredOpAndShadowsNothing) {
  const auto& registry = OpRegistry::Global();
  int inheriting = 0;
  for (const auto& type : registry.Types()) {
    const OpInfo& info = *registry.Find(type);
    if (info.attrs_from.empty()) continue;
    ++inheriting;
    const OpInfo* fwd = registry.Find(info.attrs_from);
    ASSERT_NE(fwd, nullptr) << type << " takes attributes from " << info.attrs_from;
    std::vector<std::string> names = Names(info);
    for (const AttrSpec* a : fwd->AllAttrs()) {
      EXPECT_NE(std::find(names.begin(), names.end(), a->name), names.end())
          << type << " lacks " << info.attrs_from << "'s attribute " << a->name;
      // A grad op declaring a forward attribute again is what AttrsFrom replaces.
      for (const AttrSpec& own : info.attrs)
        EXPECT_NE(own.name, a->name) << type << " declares " << a->name << " again";
    }
  }
  EXPECT_GE(inheriting, 20);  // conv2d_grad, mul_grad, the elementwise and reduce grads, ...
  const OpInfo* conv_grad = registry.Find("conv2d_grad");
  ASSERT_NE(conv_grad, nullptr);
  EXPECT_EQ(conv_grad->attrs_from, "conv2d");
}

}  // namespace
}  // namespace loom
