// Forward vs reference and numeric gradient checks of the shape operators: reshape, transpose,
// concat, split, slice, squeeze, unsqueeze, flatten, stack, gather, cast and assign.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/backward.h"
#include "framework/verifier.h"
#include "op_test_util.h"

namespace loom::testing {
namespace {

constexpr double kEps = 1e-6, kRtol = 1e-6, kAtol = 1e-8;

void ExpectValues(const Tensor& got, const std::vector<double>& want, double tol = 0) {
  std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

void ExpectMentions(const std::string& message, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(message.find(p), std::string::npos) << message;
}

// Compile-time error of the one-op program of t.
std::string CompileError(OpTest& t) {
  Status st = VerifyProgram(t.BuildProgram());
  EXPECT_FALSE(st.ok());
  return st.message();
}

std::vector<int64_t> Unravel(int64_t flat, const DDim& dims) {
  std::vector<int64_t> idx(dims.size());
  for (int d = dims.size() - 1; d >= 0; --d) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  return idx;
}

int64_t Ravel(const std::vector<int64_t>& idx, const DDim& dims) {
  int64_t flat = 0;
  for (int d = 0; d < dims.size(); ++d) flat = flat * dims[d] + idx[d];
  return flat;
}

Tensor Int32s(DDim dims, std::vector<int32_t> values) {
  Tensor t(proto::INT32, dims);
  int32_t* p = t.mutable_data<int32_t>(Place::CPU());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = values[i];
  return t;
}

// Dims a one-op program gives its output at compile time when input X is declared with dims
// `declared` (may hold -1).
StatusOr<DDim> CompileTimeDims(OpTest& t, const std::string& in_var, const DDim& declared,
                               const std::string& out_var) {
  ProgramDesc p = t.BuildProgram();
  p.GlobalBlock()->FindVar(in_var).SetDims(declared);
  LOOM_RETURN_IF_ERROR(InferShapes(p.GlobalBlock()));
  return p.GlobalBlock()->FindVar(out_var).Dims();
}

// ---------------------------------------------------------------- reshape

TEST(ReshapeOpTest, ZeroCopiesAndMinusOneIsInferred) {
  struct Case {
    DDim in;
    std::vector<int> shape;
    DDim want;
  };
  for (const Case& c :
       {Case{DDim{2, 3, 4}, {0, -1}, DDim{2, 12}}, Case{DDim{2, 3, 4}, {-1}, DDim{24}},
        Case{DDim{2, 3, 4}, {4, 0, -1}, DDim{4, 3, 2}},
        Case{DDim{2, 3, 4}, {0, 0, 2, 2}, DDim{2, 3, 2, 2}}, Case{DDim{1, 6}, {-1, 3}, DDim{2, 3}},
        Case{DDim{1, 6}, {0, 2, 3}, DDim{1, 2, 3}}}) {
    Tensor x = Random(proto::FP64, c.in, 1);
    OpTest t("reshape");
    t.Input("X", x).Output("Out").Attr("shape", c.shape);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), c.want) << c.in.ToString();
    ExpectValues(out.value()["Out"], Values(x));
    EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "") << c.in.ToString();
  }
}

TEST(ReshapeOpTest, IntegersAndZeroSize) {
  OpTest t("reshape");
  t.Input("X", Ints(DDim{2, 3}, {1, 2, 3, 4, 5, 6}))
      .Output("Out")
      .Attr("shape", std::vector<int>{3, -1});
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{3, 2}));
  ExpectValues(out.value()["Out"], {1, 2, 3, 4, 5, 6});

  OpTest z("reshape");
  z.Input("X", Random(proto::FP32, DDim{0, 3}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{3, -1});
  auto zo = z.Forward();
  ASSERT_TRUE(zo.ok()) << zo.status().ToString();
  EXPECT_EQ(zo.value()["Out"].dims(), (DDim{3, 0}));
}

TEST(ReshapeOpTest, UnknownDimsAtCompileTime) {
  OpTest t("reshape");
  t.Input("X", Random(proto::FP64, DDim{4, 3}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{0, 3, 1});
  auto d = CompileTimeDims(t, "X_in", DDim{-1, 3}, "Out_out");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d.value(), (DDim{-1, 3, 1}));
  OpTest f("reshape");
  f.Input("X", Random(proto::FP64, DDim{4, 3}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{-1});
  d = CompileTimeDims(f, "X_in", DDim{-1, 3}, "Out_out");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d.value(), (DDim{-1}));
  // The -1 is inferred when the unknown dims are copied by a 0.
  OpTest c("reshape");
  c.Input("X", Random(proto::FP64, DDim{4, 6}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{0, -1, 2});
  d = CompileTimeDims(c, "X_in", DDim{-1, 6}, "Out_out");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d.value(), (DDim{-1, 3, 2}));
  OpTest bad("reshape");
  bad.Input("X", Random(proto::FP64, DDim{4, 6}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{0, 4});
  Status st = CompileTimeDims(bad, "X_in", DDim{-1, 6}, "Out_out").status();
  ASSERT_FALSE(st.ok());
  ExpectMentions(st.message(), {"reshape", "X_in", "[-1, 6]", "6 elements", "[0, 4]"});
  // A zero-size copied dim does not hide the -1.
  OpTest z("reshape");
  z.Input("X", Random(proto::FP64, DDim{0, 6}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{0, -1, 3});
  auto zo = z.Forward();
  ASSERT_TRUE(zo.ok()) << zo.status().ToString();
  EXPECT_EQ(zo.value()["Out"].dims(), (DDim{0, 2, 3}));
}

TEST(ReshapeOpTest, NumelMismatchIsAnError) {
  OpTest t("reshape");
  t.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{4, 2});
  ExpectMentions(CompileError(t),
                 {"reshape", "X_in", "[2, 3]", "6 elements", "[4, 2]", "8 elements"});

  OpTest inf("reshape");
  inf.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{4, -1});
  ExpectMentions(CompileError(inf), {"reshape", "X_in", "[2, 3]", "[4, -1]", "cannot be inferred"});

  OpTest two("reshape");
  two.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{-1, -1});
  ExpectMentions(CompileError(two), {"reshape", "more than one -1"});

  OpTest copy("reshape");
  copy.Input("X", Random(proto::FP32, DDim{6}, 1))
      .Output("Out")
      .Attr("shape", std::vector<int>{2, 0});
  ExpectMentions(CompileError(copy), {"reshape", "X_in", "0 at position 1", "rank 1"});

  // Caught at run time when the declared dims are unknown.
  ProgramDesc p = t.BuildProgram();
  p.GlobalBlock()->FindVar("X_in").SetDims({-1, 3});
  ASSERT_TRUE(VerifyProgram(p).ok());
  Executor exe;
  Scope scope;
  Status run = exe.Run(p, &scope, t.Feeds(), {"Out_out"});
  ASSERT_FALSE(run.ok());
  ExpectMentions(run.message(), {"reshape", "block 0, #0", "X_in", "[2, 3]", "[4, 2]"});
}

// ---------------------------------------------------------------- transpose

std::vector<double> TransposeRef(const Tensor& x, const std::vector<int>& perm) {
  const DDim& in = x.dims();
  int rank = in.size();
  DDim od;
  for (int p : perm) od.push_back(in[p < 0 ? p + rank : p]);
  std::vector<double> xv = Values(x), out(xv.size());
  for (int64_t i = 0; i < od.numel(); ++i) {
    std::vector<int64_t> oi = Unravel(i, od), ii(rank);
    for (int k = 0; k < rank; ++k) ii[perm[k] < 0 ? perm[k] + rank : perm[k]] = oi[k];
    out[i] = xv[Ravel(ii, in)];
  }
  return out;
}

TEST(TransposeOpTest, ForwardAndGrad) {
  struct Case {
    DDim in;
    std::vector<int> perm;
    DDim want;
  };
  for (const Case& c : {Case{DDim{2, 3, 4}, {1, 0, 2}, DDim{3, 2, 4}},
                        Case{DDim{2, 3, 4}, {2, 0, 1}, DDim{4, 2, 3}},
                        Case{DDim{2, 3, 4}, {0, 2, 1}, DDim{2, 4, 3}},
                        Case{DDim{2, 3, 4}, {-1, 0, -2}, DDim{4, 2, 3}},
                        Case{DDim{1, 3, 2}, {2, 1, 0}, DDim{2, 3, 1}},
                        Case{DDim{2, 3, 1, 2}, {3, 1, 0, 2}, DDim{2, 3, 2, 1}},
                        Case{DDim{5, 3}, {1, 0}, DDim{3, 5}}}) {
    Tensor x = Random(proto::FP64, c.in, 2);
    OpTest t("transpose");
    t.Input("X", x).Output("Out").Attr("axis", c.perm);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), c.want);
    ExpectValues(out.value()["Out"], TransposeRef(x, c.perm));
    EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "") << c.in.ToString();
  }
}

TEST(TransposeOpTest, Float32IntegersAndZeroSize) {
  Tensor x = Random(proto::FP32, DDim{3, 4}, 3);
  OpTest t("transpose");
  t.Input("X", x).Output("Out").Attr("axis", std::vector<int>{1, 0});
  auto out = t.Forward();
  ASSERT_TRUE(out.ok());
  ExpectValues(out.value()["Out"], TransposeRef(x, {1, 0}));
  EXPECT_EQ(t.CheckGrad("Out", 1e-2, 5e-3, 5e-3), "");

  Tensor xi = Ints(DDim{2, 3}, {0, 1, 2, 3, 4, 5});
  OpTest ti("transpose");
  ti.Input("X", xi).Output("Out").Attr("axis", std::vector<int>{1, 0});
  auto oi = ti.Forward();
  ASSERT_TRUE(oi.ok());
  ExpectValues(oi.value()["Out"], {0, 3, 1, 4, 2, 5});

  OpTest z("transpose");
  z.Input("X", Random(proto::FP64, DDim{2, 0, 3}, 4))
      .Output("Out")
      .Attr("axis", std::vector<int>{2, 1, 0});
  auto oz = z.Forward();
  ASSERT_TRUE(oz.ok()) << oz.status().ToString();
  EXPECT_EQ(oz.value()["Out"].dims(), (DDim{3, 0, 2}));
}

TEST(TransposeOpTest, BadPermutationIsAnError) {
  auto make = [](std::vector<int> perm) {
    OpTest t("transpose");
    t.Input("X", Random(proto::FP32, DDim{2, 3, 4}, 1)).Output("Out").Attr("axis", perm);
    return t;
  };
  OpTest dup = make({0, 0, 1});
  ExpectMentions(CompileError(dup), {"transpose", "X_in", "[2, 3, 4]", "[0, 0, 1]", "twice"});
  OpTest short_perm = make({1, 0});
  ExpectMentions(CompileError(short_perm),
                 {"transpose", "X_in", "[2, 3, 4]", "[1, 0]", "2 entries"});
  OpTest range = make({0, 1, 3});
  ExpectMentions(CompileError(range), {"transpose", "X_in", "[0, 1, 3]", "out of range"});
}

// ---------------------------------------------------------------- concat

std::vector<double> ConcatRef(const std::vector<Tensor>& xs, int axis) {
  int rank = xs[0].dims().size();
  if (axis < 0) axis += rank;
  int64_t outer = xs[0].dims().product(0, axis);
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& x : xs) {
      int64_t inner = x.dims().product(axis, rank);
      std::vector<double> v = Values(x);
      out.insert(out.end(), v.begin() + o * inner, v.begin() + (o + 1) * inner);
    }
  return out;
}

TEST(ConcatOpTest, ForwardAndGrad) {
  struct Case {
    std::vector<DDim> ins;
    int axis;
    DDim want;
  };
  for (const Case& c : {Case{{DDim{2, 3, 4}, DDim{2, 1, 4}, DDim{2, 2, 4}}, 1, DDim{2, 6, 4}},
                        Case{{DDim{2, 3}, DDim{2, 2}}, -1, DDim{2, 5}},
                        Case{{DDim{2, 3}, DDim{1, 3}, DDim{3, 3}}, 0, DDim{6, 3}},
                        Case{{DDim{2, 3, 2}, DDim{2, 3, 1}}, -1, DDim{2, 3, 3}},
                        Case{{DDim{1, 3}, DDim{1, 2}}, 1, DDim{1, 5}},
                        Case{{DDim{2, 4}, DDim{0, 4}, DDim{1, 4}}, 0, DDim{3, 4}}}) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < c.ins.size(); ++i) xs.push_back(Random(proto::FP64, c.ins[i], 10 + i));
    OpTest t("concat");
    t.Inputs("X", xs).Output("Out").Attr("axis", c.axis);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), c.want);
    ExpectValues(out.value()["Out"], ConcatRef(xs, c.axis));
    EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "") << c.want.ToString();
  }
}

TEST(ConcatOpTest, Integers) {
  OpTest t("concat");
  t.Inputs("X", {Ints(DDim{2, 1}, {1, 2}), Ints(DDim{2, 2}, {3, 4, 5, 6})})
      .Output("Out")
      .Attr("axis", 1);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectValues(out.value()["Out"], {1, 3, 4, 2, 5, 6});
}

TEST(ConcatOpTest, DimsMismatchIsAnError) {
  OpTest t("concat");
  t.Inputs("X", {Random(proto::FP32, DDim{2, 3}, 1), Random(proto::FP32, DDim{3, 3}, 2)})
      .Output("Out")
      .Attr("axis", 1);
  ExpectMentions(CompileError(t), {"concat", "X_in1", "[3, 3]", "X_in0", "[2, 3]", "dim 0"});
  OpTest rank("concat");
  rank.Inputs("X", {Random(proto::FP32, DDim{2, 3}, 1), Random(proto::FP32, DDim{2, 3, 1}, 2)})
      .Output("Out");
  ExpectMentions(CompileError(rank), {"concat", "X_in1", "rank 3", "rank 2"});
  OpTest axis("concat");
  axis.Inputs("X", {Random(proto::FP32, DDim{2, 3}, 1), Random(proto::FP32, DDim{2, 3}, 2)})
      .Output("Out")
      .Attr("axis", 2);
  ExpectMentions(CompileError(axis), {"concat", "axis", "X_in0", "[2, 3]"});
  // Unknown dims are accepted at compile time and checked when the program runs.
  ProgramDesc p = t.BuildProgram();
  p.GlobalBlock()->FindVar("X_in1").SetDims({-1, 3});
  ASSERT_TRUE(VerifyProgram(p).ok());
  Executor exe;
  Scope scope;
  Status run = exe.Run(p, &scope, t.Feeds(), {"Out_out"});
  ASSERT_FALSE(run.ok());
  ExpectMentions(run.message(), {"concat", "X_in1", "[3, 3]", "[2, 3]"});
}

// ---------------------------------------------------------------- split

// A program: split of x into n outputs, then loss = sum over `used` of mean(out_k * w_k).
struct SplitProgram {
  ProgramDesc program;
  FeedMap feeds;
  std::vector<std::string> outs;
};

StatusOr<SplitProgram> BuildSplit(const Tensor& x, const AttributeMap& attrs, int n,
                                  const std::vector<int>& used) {
  SplitProgram sp;
  BlockDesc* b = sp.program.GlobalBlock();
  VarDesc xv = b->Var("x");
  xv.SetDtype(x.dtype());
  xv.SetDims(x.dims());
  xv.SetStopGradient(false);
  sp.feeds["x"] = x;
  for (int k = 0; k < n; ++k) {
    sp.outs.push_back(StrCat("out", k));
    b->Var(sp.outs.back());
  }
  b->AppendOp("split", {{"X", {"x"}}}, {{"Out", sp.outs}}, attrs);
  LOOM_RETURN_IF_ERROR(InferShapes(b));
  if (used.empty()) return sp;
  std::vector<std::string> means;
  for (int k : used) {
    std::string w = StrCat("w", k), prod = StrCat("prod", k), mean = StrCat("mean", k);
    DDim dims = b->FindVar(sp.outs[k]).Dims();
    VarDesc wv = b->Var(w);
    wv.SetDtype(x.dtype());
    wv.SetDims(dims);
    wv.SetStopGradient(true);
    sp.feeds[w] = Random(x.dtype(), dims, 100 + k, 0.5, 1.5);
    b->Var(prod);
    b->Var(mean);
    b->AppendOp("elementwise_mul", {{"X", {sp.outs[k]}}, {"Y", {w}}}, {{"Out", {prod}}});
    b->AppendOp("mean", {{"X", {prod}}}, {{"Out", {mean}}});
    means.push_back(mean);
  }
  b->Var("loss");
  b->AppendOp("sum", {{"X", means}}, {{"Out", {"loss"}}});
  LOOM_RETURN_IF_ERROR(InferShapes(b));
  return sp;
}

// Compares d loss / d x from the backward program with central differences; "" when equal.
std::string CheckSplitGrad(const Tensor& x, const AttributeMap& attrs, int n,
                           const std::vector<int>& used, bool* zero_filled) {
  auto built = BuildSplit(x, attrs, n, used);
  if (!built.ok()) return built.status().ToString();
  SplitProgram sp = std::move(built).value();
  ProgramDesc forward = sp.program;
  auto pairs = AppendBackward(&sp.program, "loss");
  if (!pairs.ok()) return pairs.status().ToString();
  Status st = VerifyProgram(sp.program);
  if (!st.ok()) return "backward program does not verify: " + st.ToString();
  *zero_filled = false;
  for (int i = 0; i < sp.program.GlobalBlock()->OpSize(); ++i)
    *zero_filled |= sp.program.GlobalBlock()->Op(i).Type() == "fill_zeros_like";
  Executor exe;
  std::vector<Tensor> grad;
  {
    Scope scope;
    st = exe.Run(sp.program, &scope, sp.feeds, {"x@GRAD"}, &grad);
    if (!st.ok()) return "backward run failed: " + st.ToString();
  }
  std::vector<double> got = Values(grad[0]);
  if (static_cast<int64_t>(got.size()) != x.numel()) return "x@GRAD has the wrong size";
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto loss_at = [&](double delta) {
      FeedMap feeds = sp.feeds;
      Tensor xp;
      TensorCopy(x, Place::CPU(), &xp);
      xp.data<double>()[i] += delta;
      feeds["x"] = xp;
      Scope scope;
      std::vector<Tensor> loss;
      Status s = exe.Run(forward, &scope, feeds, {"loss"}, &loss);
      return s.ok() ? Values(loss[0])[0] : NAN;
    };
    double numeric = (loss_at(kEps) - loss_at(-kEps)) / (2 * kEps);
    if (std::abs(got[i] - numeric) > kAtol + kRtol * std::abs(numeric))
      return StrCat("x@GRAD[", i, "]: analytic ", got[i], " vs numeric ", numeric);
  }
  return "";
}

std::vector<Tensor> RunSplit(const Tensor& x, const AttributeMap& attrs, int n) {
  auto built = BuildSplit(x, attrs, n, {});
  EXPECT_TRUE(built.ok()) << built.status().ToString();
  if (!built.ok()) return {};
  Executor exe;
  Scope scope;
  std::vector<Tensor> outs;
  Status st =
      exe.Run(built.value().program, &scope, built.value().feeds, built.value().outs, &outs);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return outs;
}

TEST(SplitOpTest, NumAndSectionsForward) {
  Tensor x = Random(proto::FP64, DDim{2, 6, 3}, 5);
  struct Case {
    AttributeMap attrs;
    std::vector<int64_t> sizes;  // along the split axis
    int axis;
  };
  for (const Case& c : {Case{{{"num", 3}, {"axis", 1}}, {2, 2, 2}, 1},
                        Case{{{"sections", std::vector<int>{1, 3, 2}}, {"axis", 1}}, {1, 3, 2}, 1},
                        Case{{{"sections", std::vector<int>{4, -1}}, {"axis", -2}}, {4, 2}, 1},
                        Case{{{"sections", std::vector<int>{1, 0, 2}}, {"axis", -1}}, {1, 0, 2}, 2},
                        Case{{{"num", 2}}, {1, 1}, 0}}) {
    std::vector<Tensor> outs = RunSplit(x, c.attrs, static_cast<int>(c.sizes.size()));
    ASSERT_EQ(outs.size(), c.sizes.size());
    std::vector<double> joined = ConcatRef(outs, c.axis);
    std::vector<double> xv = Values(x);
    ASSERT_EQ(joined.size(), xv.size());
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(joined[i], xv[i]);
    for (size_t k = 0; k < outs.size(); ++k) {
      DDim want = x.dims();
      want[c.axis] = c.sizes[k];
      EXPECT_EQ(outs[k].dims(), want) << "part " << k;
    }
  }
}

TEST(SplitOpTest, GradZeroFillsUnusedParts) {
  Tensor x = Random(proto::FP64, DDim{3, 4}, 6);
  bool zero_filled = false;
  EXPECT_EQ(CheckSplitGrad(x, {{"num", 2}, {"axis", 1}}, 2, {0, 1}, &zero_filled), "");
  EXPECT_FALSE(zero_filled);
  EXPECT_EQ(CheckSplitGrad(x, {{"sections", std::vector<int>{1, -1, 1}}}, 3, {2}, &zero_filled),
            "");
  EXPECT_TRUE(zero_filled);
  EXPECT_EQ(CheckSplitGrad(x, {{"num", 4}, {"axis", -1}}, 4, {1, 3}, &zero_filled), "");
  EXPECT_TRUE(zero_filled);
  Tensor one = Random(proto::FP64, DDim{1, 4}, 7);
  EXPECT_EQ(CheckSplitGrad(one, {{"num", 2}, {"axis", 1}}, 2, {1}, &zero_filled), "");
}

TEST(SplitOpTest, BadSplitsAreErrors) {
  Tensor x = Random(proto::FP64, DDim{2, 5}, 5);
  auto err = [&](const AttributeMap& attrs, int n) {
    auto built = BuildSplit(x, attrs, n, {});
    EXPECT_FALSE(built.ok());
    return built.ok() ? std::string() : built.status().message();
  };
  ExpectMentions(err({{"num", 2}, {"axis", 1}}, 2), {"split", "x", "[2, 5]", "2 equal parts"});
  ExpectMentions(err({{"sections", std::vector<int>{2, 2}}, {"axis", 1}}, 2),
                 {"split", "[2, 2]", "sums to 4", "[2, 5]"});
  ExpectMentions(err({{"num", 2}}, 3), {"split", "3 vars", "2 parts"});
  ExpectMentions(err({{"num", 1}, {"sections", std::vector<int>{5}}, {"axis", 1}}, 1),
                 {"split", "not both"});
}

// ---------------------------------------------------------------- slice

TEST(SliceOpTest, ForwardAndGradWithPythonBounds) {
  struct Case {
    DDim in;
    std::vector<int> axes, starts, ends;
    DDim want;
  };
  for (const Case& c : {Case{DDim{3, 4, 5}, {0, 2}, {1, -3}, {3, 100}, DDim{2, 4, 3}},
                        Case{DDim{3, 4, 5}, {-1}, {-100}, {-1}, DDim{3, 4, 4}},
                        Case{DDim{3, 4, 5}, {1}, {1}, {2}, DDim{3, 1, 5}},
                        Case{DDim{3, 4, 5}, {0, 1, 2}, {-2, 0, 2}, {-1, 3, 4}, DDim{1, 3, 2}},
                        Case{DDim{1, 6}, {1}, {2}, {-2}, DDim{1, 2}},
                        Case{DDim{3, 4}, {0}, {2}, {1}, DDim{0, 4}}}) {
    Tensor x = Random(proto::FP64, c.in, 8);
    OpTest t("slice");
    t.Input("Input", x)
        .Output("Out")
        .Attr("axes", c.axes)
        .Attr("starts", c.starts)
        .Attr("ends", c.ends);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), c.want);
    // Reference: the element of x at the clamped start offset plus the output index.
    int rank = c.in.size();
    std::vector<int64_t> start(rank, 0);
    for (size_t i = 0; i < c.axes.size(); ++i) {
      int a = c.axes[i] < 0 ? c.axes[i] + rank : c.axes[i];
      int64_t s = c.starts[i] < 0 ? c.starts[i] + c.in[a] : c.starts[i];
      start[a] = std::min<int64_t>(std::max<int64_t>(s, 0), c.in[a]);
    }
    std::vector<double> xv = Values(x), want;
    for (int64_t i = 0; i < c.want.numel(); ++i) {
      std::vector<int64_t> idx = Unravel(i, c.want);
      for (int d = 0; d < rank; ++d) idx[d] += start[d];
      want.push_back(xv[Ravel(idx, c.in)]);
    }
    ExpectValues(out.value()["Out"], want);
    // An empty slice too: its gradient is all zeros (the grad kernel reads no data).
    EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "") << c.want.ToString();
  }
}

TEST(SliceOpTest, BadAttributesAreErrors) {
  OpTest len("slice");
  len.Input("Input", Random(proto::FP32, DDim{3, 4}, 1))
      .Output("Out")
      .Attr("axes", std::vector<int>{0, 1})
      .Attr("starts", std::vector<int>{0})
      .Attr("ends", std::vector<int>{1, 2});
  ExpectMentions(CompileError(len), {"slice", "same length"});
  OpTest axis("slice");
  axis.Input("Input", Random(proto::FP32, DDim{3, 4}, 1))
      .Output("Out")
      .Attr("axes", std::vector<int>{2})
      .Attr("starts", std::vector<int>{0})
      .Attr("ends", std::vector<int>{1});
  ExpectMentions(CompileError(axis), {"slice", "Input_in", "[3, 4]", "out of range"});
}

// ---------------------------------------------------------------- squeeze, unsqueeze, flatten

struct ReshapeLikeCase {
  const char* type;
  DDim in;
  AttributeMap attrs;
  DDim want;
};

class SqueezeUnsqueezeFlattenTest : public ::testing::TestWithParam<ReshapeLikeCase> {};

TEST_P(SqueezeUnsqueezeFlattenTest, ForwardAndGrad) {
  const ReshapeLikeCase& c = GetParam();
  Tensor x = Random(proto::FP64, c.in, 9);
  OpTest t(c.type);
  t.Input("X", x).Output("Out");
  for (const auto& [name, value] : c.attrs) t.Attr(name, value);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), c.want);
  ExpectValues(out.value()["Out"], Values(x));
  if (x.numel() > 0) {
    EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SqueezeUnsqueezeFlattenTest,
    ::testing::Values(
        ReshapeLikeCase{"squeeze", DDim{1, 3, 1, 2}, {}, DDim{3, 2}},
        ReshapeLikeCase{
            "squeeze", DDim{1, 3, 1, 2}, {{"axes", std::vector<int>{2}}}, DDim{1, 3, 2}},
        ReshapeLikeCase{
            "squeeze", DDim{1, 3, 1, 2}, {{"axes", std::vector<int>{-2, 0}}}, DDim{3, 2}},
        ReshapeLikeCase{"squeeze", DDim{1, 0, 1}, {{"axes", std::vector<int>{-1}}}, DDim{1, 0}},
        ReshapeLikeCase{"unsqueeze", DDim{3, 2}, {{"axes", std::vector<int>{0}}}, DDim{1, 3, 2}},
        ReshapeLikeCase{"unsqueeze", DDim{3, 2}, {{"axes", std::vector<int>{-1}}}, DDim{3, 2, 1}},
        ReshapeLikeCase{
            "unsqueeze", DDim{3, 2}, {{"axes", std::vector<int>{0, 2}}}, DDim{1, 3, 1, 2}},
        ReshapeLikeCase{
            "unsqueeze", DDim{1, 2}, {{"axes", std::vector<int>{1, -1}}}, DDim{1, 1, 2, 1}},
        ReshapeLikeCase{"flatten", DDim{2, 3, 4}, {}, DDim{2, 12}},
        ReshapeLikeCase{"flatten", DDim{2, 3, 4}, {{"axis", 2}}, DDim{6, 4}},
        ReshapeLikeCase{"flatten", DDim{2, 3, 4}, {{"axis", 0}}, DDim{1, 24}},
        ReshapeLikeCase{"flatten", DDim{2, 3, 4}, {{"axis", 3}}, DDim{24, 1}},
        ReshapeLikeCase{"flatten", DDim{1, 5}, {}, DDim{1, 5}},
        ReshapeLikeCase{"flatten", DDim{0, 3, 2}, {}, DDim{0, 6}}),
    [](const ::testing::TestParamInfo<ReshapeLikeCase>& info) {
      return StrCat(info.param.type, info.index);
    });

TEST(SqueezeOpTest, ErrorsAndUnknownDims) {
  OpTest bad("squeeze");
  bad.Input("X", Random(proto::FP32, DDim{1, 3}, 1))
      .Output("Out")
      .Attr("axes", std::vector<int>{1});
  ExpectMentions(CompileError(bad), {"squeeze", "X_in", "[1, 3]", "axis 1", "size is 3"});
  OpTest range("unsqueeze");
  range.Input("X", Random(proto::FP32, DDim{1, 3}, 1))
      .Output("Out")
      .Attr("axes", std::vector<int>{4});
  ExpectMentions(CompileError(range), {"unsqueeze", "X_in", "[1, 3]", "axis 4", "out of range"});
  OpTest flat("flatten");
  flat.Input("X", Random(proto::FP32, DDim{1, 3}, 1)).Output("Out").Attr("axis", 3);
  ExpectMentions(CompileError(flat), {"flatten", "X_in", "[1, 3]", "axis"});

  OpTest f("flatten");
  f.Input("X", Random(proto::FP64, DDim{4, 3, 2}, 1)).Output("Out").Attr("axis", 1);
  auto d = CompileTimeDims(f, "X_in", DDim{-1, 3, 2}, "Out_out");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d.value(), (DDim{-1, 6}));
  OpTest u("unsqueeze");
  u.Input("X", Random(proto::FP64, DDim{4, 3}, 1)).Output("Out").Attr("axes", std::vector<int>{1});
  d = CompileTimeDims(u, "X_in", DDim{-1, 3}, "Out_out");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d.value(), (DDim{-1, 1, 3}));
}

// ---------------------------------------------------------------- stack

TEST(StackOpTest, ForwardAndGrad) {
  struct Case {
    DDim in;
    int n, axis;
    DDim want;
  };
  for (const Case& c :
       {Case{DDim{2, 3}, 3, 0, DDim{3, 2, 3}}, Case{DDim{2, 3}, 3, 1, DDim{2, 3, 3}},
        Case{DDim{2, 3}, 2, -1, DDim{2, 3, 2}}, Case{DDim{2, 3}, 2, -3, DDim{2, 2, 3}},
        Case{DDim{1, 4}, 1, 1, DDim{1, 1, 4}}, Case{DDim{0, 2}, 2, 1, DDim{0, 2, 2}}}) {
    std::vector<Tensor> xs;
    for (int i = 0; i < c.n; ++i) xs.push_back(Random(proto::FP64, c.in, 20 + i));
    OpTest t("stack");
    t.Inputs("X", xs).Output("Y").Attr("axis", c.axis);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Y"].dims(), c.want);
    // Reference: Y[..., i, ...] (i at the new axis) = X_i[...].
    int axis = c.axis < 0 ? c.axis + c.in.size() + 1 : c.axis;
    std::vector<double> want;
    for (int64_t j = 0; j < c.want.numel(); ++j) {
      std::vector<int64_t> idx = Unravel(j, c.want);
      int64_t i = idx[axis];
      idx.erase(idx.begin() + axis);
      want.push_back(Values(xs[i])[Ravel(idx, c.in)]);
    }
    ExpectValues(out.value()["Y"], want);
    if (c.in.numel() > 0) {
      EXPECT_EQ(t.CheckGrad("Y", kEps, kRtol, kAtol), "") << c.want.ToString();
    }
  }
}

TEST(StackOpTest, MismatchedInputsAreAnError) {
  OpTest t("stack");
  t.Inputs("X", {Random(proto::FP32, DDim{2, 3}, 1), Random(proto::FP32, DDim{3, 2}, 2)})
      .Output("Y");
  ExpectMentions(CompileError(t), {"stack", "X_in1", "[3, 2]", "X_in0", "[2, 3]"});
  OpTest axis("stack");
  axis.Inputs("X", {Random(proto::FP32, DDim{2, 3}, 1)}).Output("Y").Attr("axis", 3);
  ExpectMentions(CompileError(axis), {"stack", "axis", "X_in0"});
}

// ---------------------------------------------------------------- gather

TEST(GatherOpTest, ForwardAndGradWithRepeatedIndices) {
  Tensor x = Random(proto::FP64, DDim{5, 3}, 30);
  std::vector<double> xv = Values(x);
  for (Tensor index : {Ints(DDim{4}, {4, 0, 2, 2}), Int32s(DDim{4}, {1, 1, 3, 0}),
                       Ints(DDim{3, 1}, {2, 4, 2}), Ints(DDim{1}, {3})}) {
    OpTest t("gather");
    t.Input("X", x).Input("Index", index).Output("Out");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    int64_t n = index.dims()[0];
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{n, 3}));
    std::vector<double> want;
    for (double r : Values(index))
      for (int k = 0; k < 3; ++k) want.push_back(xv[static_cast<int64_t>(r) * 3 + k]);
    ExpectValues(out.value()["Out"], want);
    EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "") << index.dims().ToString();
  }
  // Higher rank X, integer X, empty index.
  Tensor x3 = Random(proto::FP64, DDim{3, 2, 2}, 31);
  OpTest t3("gather");
  t3.Input("X", x3).Input("Index", Ints(DDim{2}, {2, 0})).Output("Out");
  ASSERT_TRUE(t3.Forward().ok());
  EXPECT_EQ(t3.CheckGrad("Out", kEps, kRtol, kAtol), "");
  OpTest ti("gather");
  ti.Input("X", Ints(DDim{3}, {7, 8, 9})).Input("Index", Ints(DDim{2}, {2, 0})).Output("Out");
  auto oi = ti.Forward();
  ASSERT_TRUE(oi.ok()) << oi.status().ToString();
  ExpectValues(oi.value()["Out"], {9, 7});
  OpTest te("gather");
  te.Input("X", x).Input("Index", Ints(DDim{0}, {})).Output("Out");
  auto oe = te.Forward();
  ASSERT_TRUE(oe.ok()) << oe.status().ToString();
  EXPECT_EQ(oe.value()["Out"].dims(), (DDim{0, 3}));
}

TEST(GatherOpTest, OutOfRangeIndexIsAnError) {
  for (int64_t bad : {7, 5, -1}) {
    OpTest t("gather");
    t.Input("X", Random(proto::FP32, DDim{5, 3}, 1))
        .Input("Index", Ints(DDim{2}, {1, bad}))
        .Output("Out");
    auto out = t.Forward();
    ASSERT_FALSE(out.ok());
    std::string idx = StrCat("index ", bad, " (Index[1])");
    ExpectMentions(out.status().message(), {"gather", idx.c_str(), "[0, 5)", "[5, 3]"});
  }
  OpTest f("gather");
  f.Input("X", Random(proto::FP32, DDim{5, 3}, 1))
      .Input("Index", Random(proto::FP32, DDim{2}, 2))
      .Output("Out");
  ExpectMentions(CompileError(f), {"gather", "Index_in", "float32", "int32 or int64"});
}

// ---------------------------------------------------------------- cast, assign

TEST(CastOpTest, ConversionsAndGrad) {
  Tensor x = Random(proto::FP64, DDim{2, 3}, 40, -3, 3);
  std::vector<double> xv = Values(x);
  struct Case {
    DataType to;
    double (*ref)(double);
  };
  for (const Case& c : {Case{proto::FP32, [](double v) { return double(float(v)); }},
                        Case{proto::INT32, [](double v) { return double(int32_t(v)); }},
                        Case{proto::INT64, [](double v) { return double(int64_t(v)); }},
                        Case{proto::BOOL, [](double v) { return double(bool(v)); }},
                        Case{proto::FP64, [](double v) { return v; }}}) {
    OpTest t("cast");
    t.Input("X", x)
        .Output("Out")
        .Attr("in_dtype", static_cast<int>(proto::FP64))
        .Attr("out_dtype", static_cast<int>(c.to));
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dtype(), c.to);
    EXPECT_EQ(out.value()["Out"].dims(), x.dims());
    std::vector<double> want;
    for (double v : xv) want.push_back(c.ref(v));
    ExpectValues(out.value()["Out"], want);
  }
  // Gradients cast back: exact for float64 -> float64, to float32 rounding otherwise.
  OpTest same("cast");
  same.Input("X", x)
      .Output("Out")
      .Attr("in_dtype", static_cast<int>(proto::FP64))
      .Attr("out_dtype", static_cast<int>(proto::FP64));
  EXPECT_EQ(same.CheckGrad("Out", kEps, kRtol, kAtol), "");
  OpTest narrow("cast");
  narrow.Input("X", x)
      .Output("Out")
      .Attr("in_dtype", static_cast<int>(proto::FP64))
      .Attr("out_dtype", static_cast<int>(proto::FP32));
  EXPECT_EQ(narrow.CheckGrad("Out", 1e-3, 1e-3, 1e-5), "");
  OpTest widen("cast");
  widen.Input("X", Random(proto::FP32, DDim{3, 2}, 41))
      .Output("Out")
      .Attr("in_dtype", static_cast<int>(proto::FP32))
      .Attr("out_dtype", static_cast<int>(proto::FP64));
  EXPECT_EQ(widen.CheckGrad("Out", 1e-2, 5e-3, 5e-3), "");

  OpTest ints("cast");
  ints.Input("X", Ints(DDim{3}, {-2, 0, 5}))
      .Output("Out")
      .Attr("in_dtype", static_cast<int>(proto::INT64))
      .Attr("out_dtype", static_cast<int>(proto::FP32));
  auto oi = ints.Forward();
  ASSERT_TRUE(oi.ok()) << oi.status().ToString();
  ExpectValues(oi.value()["Out"], {-2, 0, 5});
}

TEST(CastOpTest, DtypeMismatchIsAnError) {
  OpTest t("cast");
  t.Input("X", Random(proto::FP32, DDim{2}, 1))
      .Output("Out")
      .Attr("in_dtype", static_cast<int>(proto::FP64))
      .Attr("out_dtype", static_cast<int>(proto::INT32));
  ExpectMentions(CompileError(t), {"cast", "X_in", "float32", "in_dtype", "float64"});
  OpTest missing("cast");
  missing.Input("X", Random(proto::FP32, DDim{2}, 1)).Output("Out");
  ExpectMentions(CompileError(missing), {"cast", "required attribute"});
}

TEST(AssignOpTest, CopiesAndPassesGradient) {
  Tensor x = Random(proto::FP64, DDim{3, 2}, 50);
  OpTest t("assign");
  t.Input("X", x).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectValues(out.value()["Out"], Values(x));
  EXPECT_EQ(t.CheckGrad("Out", kEps, kRtol, kAtol), "");
  OpTest ti("assign");
  ti.Input("X", Ints(DDim{1, 3}, {4, 5, 6})).Output("Out");
  auto oi = ti.Forward();
  ASSERT_TRUE(oi.ok()) << oi.status().ToString();
  ExpectValues(oi.value()["Out"], {4, 5, 6});
  OpTest tz("assign");
  tz.Input("X", Random(proto::FP32, DDim{0, 2}, 1)).Output("Out");
  auto oz = tz.Forward();
  ASSERT_TRUE(oz.ok()) << oz.status().ToString();
  EXPECT_EQ(oz.value()["Out"].dims(), (DDim{0, 2}));
}

// ---------------------------------------------------------------- a chain of shape ops

TEST(ShapeOpsChainTest, GradientFlowsThroughSeveralOps) {
  // x [2, 3, 4] -> transpose [4, 2, 3] -> reshape [4, 6] -> slice rows 1..3 -> flatten.
  Tensor x = Random(proto::FP64, DDim{2, 3, 4}, 60);
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  VarDesc xv = b->Var("x");
  xv.SetDtype(proto::FP64);
  xv.SetDims(x.dims());
  for (const char* v : {"t", "r", "s", "f", "loss"}) b->Var(v);
  b->AppendOp("transpose", {{"X", {"x"}}}, {{"Out", {"t"}}}, {{"axis", std::vector<int>{2, 0, 1}}});
  b->AppendOp("reshape", {{"X", {"t"}}}, {{"Out", {"r"}}}, {{"shape", std::vector<int>{0, -1}}});
  b->AppendOp("slice", {{"Input", {"r"}}}, {{"Out", {"s"}}},
              {{"axes", std::vector<int>{0}},
               {"starts", std::vector<int>{1}},
               {"ends", std::vector<int>{3}}});
  b->AppendOp("flatten", {{"X", {"s"}}}, {{"Out", {"f"}}}, {{"axis", 0}});
  b->AppendOp("mean", {{"X", {"f"}}}, {{"Out", {"loss"}}});
  ASSERT_TRUE(InferShapes(b).ok());
  EXPECT_EQ(b->FindVar("f").Dims(), (DDim{1, 12}));
  ASSERT_TRUE(AppendBackward(&p, "loss").ok());
  Status st = VerifyProgram(p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Executor exe;
  Scope scope;
  std::vector<Tensor> out;
  st = exe.Run(p, &scope, {{"x", x}}, {"x@GRAD"}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  // d mean / d x = 1/12 where x[i, j, k] lands in rows 1..2 of the transposed view (k in 1, 2).
  std::vector<double> want;
  for (int64_t i = 0; i < 24; ++i) want.push_back(i % 4 == 1 || i % 4 == 2 ? 1.0 / 12 : 0.0);
  ExpectValues(out[0], want, 1e-15);
}

TEST(ShapeOpsChainTest, StopGradientInputsOfConcatAndStack) {
  // loss = mean(concat(a, b)) + mean(stack(a, b)) with b stop_gradient: the grad ops write
  // only a@GRAD (the slot for b is pruned to an empty var).
  Tensor a = Random(proto::FP64, DDim{2, 3}, 70), bt = Random(proto::FP64, DDim{2, 3}, 71);
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* name : {"a", "b"}) {
    VarDesc v = b->Var(name);
    v.SetDtype(proto::FP64);
    v.SetDims({2, 3});
    v.SetStopGradient(std::string(name) == "b");
  }
  for (const char* v : {"c", "s", "mc", "ms", "loss"}) b->Var(v);
  b->AppendOp("concat", {{"X", {"a", "b"}}}, {{"Out", {"c"}}}, {{"axis", -1}});
  b->AppendOp("stack", {{"X", {"a", "b"}}}, {{"Y", {"s"}}}, {{"axis", 1}});
  b->AppendOp("mean", {{"X", {"c"}}}, {{"Out", {"mc"}}});
  b->AppendOp("mean", {{"X", {"s"}}}, {{"Out", {"ms"}}});
  b->AppendOp("sum", {{"X", {"mc", "ms"}}}, {{"Out", {"loss"}}});
  ASSERT_TRUE(InferShapes(b).ok());
  ASSERT_TRUE(AppendBackward(&p, "loss").ok());
  Status st = VerifyProgram(p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(b->HasVar("b@GRAD"));
  Executor exe;
  Scope scope;
  std::vector<Tensor> out;
  st = exe.Run(p, &scope, {{"a", a}, {"b", bt}}, {"a@GRAD"}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].dims(), (DDim{2, 3}));
  ExpectValues(out[0], std::vector<double>(6, 2.0 / 12), 1e-15);
}

}  // namespace
}  // namespace loom::testing
