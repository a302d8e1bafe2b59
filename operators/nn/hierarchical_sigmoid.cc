// hierarchical_sigmoid: Fluid's hsigmoid loss. Each class is a leaf of a binary tree; the
// loss of row i is a sum of logistic losses, one per inner node on its class's path:
//   p_j = clip(X[i] · W[node_j] + Bias[node_j], -40, 40),
//   Out[i] = sum_j log(1 + exp(p_j)) - sum_j bit_j * p_j,
// where bit_j says which child the path takes at node_j. The default tree is the complete
// binary tree of num_classes leaves (class c is code c + num_classes: node_j =
// (code >> (j + 1)) - 1, bit_j = bit j of code, num_classes - 1 inner nodes); a custom tree
// gives each row its nodes (PathTable, ended by a negative id) and bits (PathCode).
// PreOut [N, L] keeps log(1 + exp(p_j)), L the longest path; as in Fluid, the positions past
// a row's path hold p = 0, so each adds log 2 to Out (a constant: no gradient).
#include <cmath>
#include <map>
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// 1-based index of the highest set bit (0 for 0).
int FindLastSet(int64_t x) {
  int n = 0;
  for (; x > 0; x >>= 1) ++n;
  return n;
}

bool IsCustom(InferShapeContext* ctx) { return ctx->HasInput("PathTable"); }

Status HsigmoidInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), w = ctx->InputDim("W"), label = ctx->InputDim("Label");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be 2-D [N, D]");
  if (w.size() != 2) return ctx->Error(ctx->DescribeInput("W"), " must be 2-D [nodes, D]");
  if (x[1] >= 0 && w[1] >= 0 && x[1] != w[1])
    return ctx->Error(ctx->DescribeInput("W"), " must have ", x[1], " columns, the width of ",
                      ctx->DescribeInput("X"));
  if (ctx->InputDtype("W") != ctx->InputDtype("X") || !IsFloatingPoint(ctx->InputDtype("X")))
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("W"),
                      " must have one floating-point dtype");
  if (ctx->InputDtype("Label") != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Label"), " must be int64");
  if (label.numel() >= 0 && x[0] >= 0 && label.numel() != x[0])
    return ctx->Error(ctx->DescribeInput("Label"), " must hold one class per row of ",
                      ctx->DescribeInput("X"));
  int64_t num_classes = ctx->Attr<int>("num_classes");
  int64_t length;
  if (IsCustom(ctx)) {
    if (!ctx->HasInput("PathCode"))
      return ctx->Error("a custom tree needs both PathTable and PathCode");
    DDim table = ctx->InputDim("PathTable"), code = ctx->InputDim("PathCode");
    if (table.size() != 2 || !(table == code))
      return ctx->Error(ctx->DescribeInput("PathTable"), " and ", ctx->DescribeInput("PathCode"),
                        " must be 2-D [N, L] of the same dims");
    if (ctx->InputDtype("PathTable") != proto::INT64 || ctx->InputDtype("PathCode") != proto::INT64)
      return ctx->Error("PathTable and PathCode must be int64");
    length = table[1];
  } else {
    if (num_classes < 2)
      return ctx->Error("num_classes (", num_classes, ") must be >= 2 with the default tree");
    if (w[0] >= 0 && w[0] != num_classes - 1)
      return ctx->Error(ctx->DescribeInput("W"), " must have num_classes - 1 (", num_classes - 1,
                        ") rows with the default tree");
    length = FindLastSet(num_classes - 1);
  }
  if (ctx->HasInput("Bias")) {
    DDim b = ctx->InputDim("Bias");
    if (b.numel() >= 0 && w[0] >= 0 && b.numel() != w[0])
      return ctx->Error(ctx->DescribeInput("Bias"), " must hold one value per row of W (", w[0],
                        ")");
  }
  ctx->SetOutputDim("Out", DDim{x[0], 1});
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  ctx->SetOutputDim("PreOut", DDim{x[0], length});
  ctx->SetOutputDtype("PreOut", ctx->InputDtype("X"));
  return Status::OK();
}

// The (node, bit) pairs of every row's path, checked against W's rows.
struct Paths {
  int64_t length = 0;  // the width L of PreOut
  std::vector<std::vector<std::pair<int64_t, bool>>> rows;
};

Status MakePaths(const KernelContext& ctx, Paths* paths) {
  const Tensor& label = ctx.Input("Label");
  const int64_t n = ctx.Input("X").dims()[0], nodes = ctx.Input("W").dims()[0];
  const int64_t num_classes = ctx.Attr<int>("num_classes");
  const Tensor* table = ctx.InputOrNull("PathTable");
  paths->rows.assign(n, {});
  if (table) {
    const Tensor& code = ctx.Input("PathCode");
    const int64_t l = table->dims()[1];
    paths->length = l;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < l && table->data<int64_t>()[i * l + j] >= 0; ++j) {
        int64_t node = table->data<int64_t>()[i * l + j];
        if (node >= nodes)
          return ctx.Error("PathTable[", i, ", ", j, "] = ", node, " is out of range [0, ", nodes,
                           ") of W's rows");
        paths->rows[i].emplace_back(node, code.data<int64_t>()[i * l + j] != 0);
      }
    return Status::OK();
  }
  paths->length = FindLastSet(num_classes - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = label.data<int64_t>()[i];
    if (c < 0 || c >= num_classes)
      return ctx.Error("label ", c, " of row ", i,
                       " is out of range [0, num_classes = ", num_classes, ")");
    const int64_t code = c + num_classes;
    for (int j = 0, len = FindLastSet(code) - 1; j < len; ++j)
      paths->rows[i].emplace_back((code >> (j + 1)) - 1, ((code >> j) & 1) != 0);
  }
  return Status::OK();
}

template <typename T>
Status HsigmoidKernel(const KernelContext& ctx) {
  Paths paths;
  LOOM_RETURN_IF_ERROR(MakePaths(ctx, &paths));
  const Tensor& x = ctx.Input("X");
  const T* xd = x.data<T>();
  const T* wd = ctx.Input("W").data<T>();
  const Tensor* bias = ctx.InputOrNull("Bias");
  const int64_t n = x.dims()[0], d = x.dims()[1], l = paths.length;
  Tensor* pre_t = ctx.Output("PreOut");
  pre_t->Resize({n, l});
  T* pre = pre_t->mutable_data<T>(ctx.place());
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i) {
    double loss = 0;
    for (int64_t j = 0; j < l; ++j) {
      double p = 0;
      if (j < static_cast<int64_t>(paths.rows[i].size())) {
        const auto [node, bit] = paths.rows[i][j];
        p = bias ? static_cast<double>(bias->data<T>()[node]) : 0.0;
        for (int64_t k = 0; k < d; ++k) p += static_cast<double>(xd[i * d + k]) * wd[node * d + k];
        p = std::min(40.0, std::max(-40.0, p));
        if (bit) loss -= p;
      }
      const double softrelu = std::log1p(std::exp(p));
      pre[i * l + j] = static_cast<T>(softrelu);
      loss += softrelu;
    }
    out[i] = static_cast<T>(loss);
  }
  return Status::OK();
}

// d Out[i] / d p_j = sigmoid(p_j) - bit_j (sigmoid recovered from PreOut = log(1 + exp(p))).
template <typename T>
Status HsigmoidGradKernel(const KernelContext& ctx) {
  Paths paths;
  LOOM_RETURN_IF_ERROR(MakePaths(ctx, &paths));
  const Tensor& x = ctx.Input("X");
  const Tensor& w = ctx.Input("W");
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  const T* pre = ctx.Input("PreOut").data<T>();
  const T* dout = ctx.Input("Out@GRAD").data<T>();
  const int64_t n = x.dims()[0], d = x.dims()[1], l = paths.length;
  std::vector<std::vector<T>> g(n);
  for (int64_t i = 0; i < n; ++i)
    for (size_t j = 0; j < paths.rows[i].size(); ++j) {
      const double sig = 1.0 - std::exp(-static_cast<double>(pre[i * l + j]));
      g[i].push_back(static_cast<T>((sig - (paths.rows[i][j].second ? 1.0 : 0.0)) * dout[i]));
    }
  if (Tensor* dx_t = ctx.OutputOrNull("X@GRAD")) {
    T* dx = dx_t->mutable_data<T>(ctx.place());
    std::fill(dx, dx + n * d, T(0));
    for (int64_t i = 0; i < n; ++i)
      for (size_t j = 0; j < g[i].size(); ++j)
        for (int64_t k = 0; k < d; ++k)
          dx[i * d + k] += g[i][j] * wd[paths.rows[i][j].first * d + k];
  }
  if (Tensor* db_t = ctx.OutputOrNull("Bias@GRAD")) {
    T* db = db_t->mutable_data<T>(ctx.place());
    std::fill(db, db + db_t->numel(), T(0));
    for (int64_t i = 0; i < n; ++i)
      for (size_t j = 0; j < g[i].size(); ++j) db[paths.rows[i][j].first] += g[i][j];
  }
  auto add_w_grad = [&](T* dw, const std::map<int64_t, int64_t>* row_of) {
    for (int64_t i = 0; i < n; ++i)
      for (size_t j = 0; j < g[i].size(); ++j) {
        int64_t node = paths.rows[i][j].first;
        T* dst = dw + (row_of ? row_of->at(node) : node) * d;
        for (int64_t k = 0; k < d; ++k) dst[k] += g[i][j] * xd[i * d + k];
      }
  };
  if (ctx.Attr<bool>("is_sparse")) {
    // One SelectedRows row per node on any path, ascending.
    if (SelectedRows* dw = ctx.OutputSelectedRows("W@GRAD")) {
      std::map<int64_t, int64_t> row_of;
      for (const auto& path : paths.rows)
        for (const auto& step : path) row_of.emplace(step.first, 0);
      dw->height = w.dims()[0];
      dw->rows.clear();
      for (auto& [node, row] : row_of) {
        row = static_cast<int64_t>(dw->rows.size());
        dw->rows.push_back(node);
      }
      dw->value.Resize({static_cast<int64_t>(dw->rows.size()), d});
      T* v = dw->value.template mutable_data<T>(ctx.place());
      std::fill(v, v + dw->value.numel(), T(0));
      add_w_grad(v, &row_of);
    }
  } else if (Tensor* dw_t = ctx.OutputOrNull("W@GRAD")) {
    T* dw = dw_t->mutable_data<T>(ctx.place());
    std::fill(dw, dw + dw_t->numel(), T(0));
    add_w_grad(dw, nullptr);
  }
  return Status::OK();
}

std::vector<proto::OpDesc> HsigmoidGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd,
                         {"X", "W", "Label", "PathTable", "PathCode", "Bias", "PreOut", "Out@GRAD"},
                         {"X", "W", "Bias"})};
}

Status HsigmoidGradInferShape(InferShapeContext* ctx) {
  for (const char* slot : {"X", "W", "Bias"}) {
    std::string grad = GradVarName(slot);
    if (ctx->HasOutput(grad) && ctx->OutputVarName(grad) != kEmptyVarName)
      ctx->ShareDimAndDtype(slot, grad);
  }
  return Status::OK();
}

Status HsigmoidGradVarType(InferShapeContext* ctx) {
  if (ctx->HasOutput("W@GRAD"))
    ctx->SetOutputVarType("W@GRAD", ctx->Attr<bool>("is_sparse") ? proto::VarType::SELECTED_ROWS
                                                                 : proto::VarType::DENSE_TENSOR);
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(hierarchical_sigmoid)
    .Doc(
        "Hierarchical sigmoid loss: a logistic loss at each inner node of the class's path in a "
        "binary tree (the complete tree of num_classes leaves, or PathTable / PathCode).")
    .Input("X", "input features [N, D]")
    .Input("W", "inner-node weights [nodes, D]")
    .Input("Label", "int64 classes [N, 1]")
    .Input("PathTable", "custom tree: int64 inner nodes of each row's path [N, L], -1 ended", false,
           true)
    .Input("PathCode", "custom tree: int64 bits of each row's path [N, L]", false, true)
    .Input("Bias", "inner-node biases [nodes, 1]", false, true)
    .Output("Out", "the loss per row [N, 1]")
    .Output("PreOut", "log(1 + exp(p)) of each node on the path [N, L]")
    .Attr<int>("num_classes", 2, "the number of classes (leaves)", Positive("num_classes"))
    .Attr<bool>("is_sparse", false, "the gradient of W is a SelectedRows of the visited nodes")
    .Attr<bool>("remote_prefetch", false, "accepted (Fluid's distributed prefetch)")
    .KernelDtypeFrom("X")
    .InferShape(HsigmoidInferShape)
    .GradMaker(HsigmoidGradMaker)
    .Kernel(Place::kCPU, proto::FP32, HsigmoidKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, HsigmoidKernel<double>);

LOOM_REGISTER_OP(hierarchical_sigmoid_grad)
    .Doc("Gradients of hierarchical_sigmoid for X, W and Bias.")
    .Input("X", "forward X")
    .Input("W", "forward W")
    .Input("Label", "forward Label")
    .Input("PathTable", "forward PathTable", false, true)
    .Input("PathCode", "forward PathCode", false, true)
    .Input("Bias", "forward Bias", false, true)
    .Input("PreOut", "forward PreOut")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("W@GRAD", "gradient of W", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("hierarchical_sigmoid")
    .KernelDtypeFrom("X")
    .InferVarType(HsigmoidGradVarType)
    .InferShape(HsigmoidGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, HsigmoidGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, HsigmoidGradKernel<double>);

}  // namespace loom::ops
