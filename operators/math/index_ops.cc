// Indexing ops of Fluid: gather_nd and scatter (with gradients), unique, gather_tree, one_hot,
// where_index, and the uniform / gaussian random ops whose batch dim comes from another tensor.
#include <algorithm>
#include <map>
#include <random>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == proto::INT64 ? t.data<int64_t>()[i]
                                   : static_cast<int64_t>(t.data<int32_t>()[i]);
}

// ---- gather_nd: Out[i...] = X[Index[i..., 0], ..., Index[i..., k - 1], ...] ----
Status GatherNdInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), idx = ctx->InputDim("Index");
  if (idx.size() < 1 || idx[idx.size() - 1] < 0)
    return ctx->Error(ctx->DescribeInput("Index"), " needs a static last dim");
  const int64_t k = idx[idx.size() - 1];
  if (k > x.size())
    return ctx->Error(ctx->DescribeInput("Index"), " indexes ", k, " dims of ",
                      ctx->DescribeInput("X"), " (rank ", x.size(), ")");
  const std::vector<int64_t> iv = idx.vec();
  std::vector<int64_t> out(iv.begin(), iv.end() - 1);
  for (int i = static_cast<int>(k); i < x.size(); ++i) out.push_back(x[i]);
  if (out.empty()) out.push_back(1);
  ctx->SetOutputDim("Out", DDim(out));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// The element offset in X of each gathered slice (slices of `inner` elements).
StatusOr<std::vector<int64_t>> GatherNdOffsets(const KernelContext& ctx, int64_t* inner) {
  const Tensor& x = ctx.Input("X");
  const Tensor& idx = ctx.Input("Index");
  const int64_t k = idx.dims()[idx.dims().size() - 1];
  *inner = 1;
  for (int i = static_cast<int>(k); i < x.dims().size(); ++i) *inner *= x.dims()[i];
  const int64_t slices = k > 0 ? idx.numel() / k : 0;
  std::vector<int64_t> offs(static_cast<size_t>(slices));
  for (int64_t s = 0; s < slices; ++s) {
    int64_t o = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t v = IndexAt(idx, s * k + j);
      if (v < 0 || v >= x.dims()[j])
        return ctx.Error("Index ", v, " at slice ", s, " is outside dim ", j, " of X (",
                         x.dims()[j], ")");
      o = o * x.dims()[j] + v;
    }
    offs[s] = o * *inner;
  }
  return offs;
}

template <typename T>
Status GatherNdKernel(const KernelContext& ctx) {
  int64_t inner = 0;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> offs, GatherNdOffsets(ctx, &inner));
  const T* x = ctx.Input("X").data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (size_t s = 0; s < offs.size(); ++s) std::copy_n(x + offs[s], inner, o + s * inner);
  return Status::OK();
}

template <typename T>
Status GatherNdGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  int64_t inner = 0;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> offs, GatherNdOffsets(ctx, &inner));
  const T* g = ctx.Input("Out@GRAD").data<T>();
  dx->Resize(ctx.Input("X").dims());
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + dx->numel(), T(0));
  for (size_t s = 0; s < offs.size(); ++s)
    for (int64_t j = 0; j < inner; ++j) o[offs[s] + j] += g[s * inner + j];
  return Status::OK();
}

// ---- scatter: Out = X with rows Ids[i] set to (or, without overwrite, summed from) Updates[i] --
Status ScatterInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), u = ctx->InputDim("Updates");
  if (x.size() != u.size())
    return ctx->Error(ctx->DescribeInput("Updates"), " must have the rank of ",
                      ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

StatusOr<std::vector<int64_t>> ScatterRows(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& ids = ctx.Input("Ids");
  const Tensor& up = ctx.Input("Updates");
  if (up.dims()[0] != ids.numel())
    return ctx.Error("Updates has ", up.dims()[0], " rows for ", ids.numel(), " ids");
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t r = IndexAt(ids, i);
    if (r < 0 || r >= x.dims()[0])
      return ctx.Error("Ids[", i, "] = ", r, " is not a row of X (", x.dims()[0], " rows)");
    rows.push_back(r);
  }
  return rows;
}

template <typename T>
Status ScatterKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rows, ScatterRows(ctx));
  const Tensor& x = ctx.Input("X");
  const int64_t w = x.dims()[0] > 0 ? x.numel() / x.dims()[0] : 0;
  const T* u = ctx.Input("Updates").data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  if (o != x.data<T>()) std::copy_n(x.data<T>(), x.numel(), o);
  if (ctx.Attr<bool>("overwrite")) {
    for (size_t i = 0; i < rows.size(); ++i) std::copy_n(u + i * w, w, o + rows[i] * w);
  } else {
    for (int64_t r : rows) std::fill_n(o + r * w, w, T(0));
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < w; ++j) o[rows[i] * w + j] += u[i * w + j];
  }
  return Status::OK();
}

template <typename T>
Status ScatterGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rows, ScatterRows(ctx));
  const Tensor& x = ctx.Input("X");
  const int64_t w = x.dims()[0] > 0 ? x.numel() / x.dims()[0] : 0;
  const T* g = ctx.Input("Out@GRAD").data<T>();
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD")) {
    dx->Resize(x.dims());
    T* o = dx->mutable_data<T>(ctx.place());
    std::copy_n(g, x.numel(), o);
    for (int64_t r : rows) std::fill_n(o + r * w, w, T(0));  // those rows were replaced
  }
  if (Tensor* du = ctx.OutputOrNull("Updates@GRAD")) {
    du->Resize(ctx.Input("Updates").dims());
    T* o = du->mutable_data<T>(ctx.place());
    // With overwrite only the last update of a row reached Out.
    std::map<int64_t, size_t> last;
    for (size_t i = 0; i < rows.size(); ++i) last[rows[i]] = i;
    const bool overwrite = ctx.Attr<bool>("overwrite");
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < w; ++j)
        o[i * w + j] = !overwrite || last[rows[i]] == i ? g[rows[i] * w + j] : T(0);
  }
  return Status::OK();
}

// ---- unique: Out = the distinct values of X in order of first appearance; Index[i] = the
// position of X[i] in Out ----
template <typename T>
Status UniqueKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  std::map<T, int64_t> seen;
  std::vector<T> values;
  Tensor* idx = ctx.Output("Index");
  idx->Resize(DDim({x.numel()}));
  const auto idx_dtype = static_cast<DataType>(ctx.Attr<int>("dtype"));
  std::vector<int64_t> pos(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto [it, fresh] = seen.emplace(x.data<T>()[i], static_cast<int64_t>(values.size()));
    if (fresh) values.push_back(x.data<T>()[i]);
    pos[i] = it->second;
  }
  if (idx_dtype == proto::INT64) {
    std::copy(pos.begin(), pos.end(), idx->mutable_data<int64_t>(ctx.place()));
  } else if (idx_dtype == proto::INT32) {
    int32_t* p = idx->mutable_data<int32_t>(ctx.place());
    for (size_t i = 0; i < pos.size(); ++i) p[i] = static_cast<int32_t>(pos[i]);
  } else {
    return ctx.Error("dtype (of Index) must be int32 or int64");
  }
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(values.size())}));
  std::copy(values.begin(), values.end(), out->mutable_data<T>(ctx.place()));
  return Status::OK();
}

// ---- gather_tree: backtraces beam search. Ids and Parents are [time, batch, beam]; Out[t]
// holds the tokens of the path that ends in each final beam: Out[T-1] = Ids[T-1], and going
// back, Out[t][b][k] = Ids[t][b][p] with p the parent chosen at t + 1 along that path ----
template <typename T>
Status GatherTreeKernel(const KernelContext& ctx) {
  const Tensor& ids = ctx.Input("Ids");
  const Tensor& parents = ctx.Input("Parents");
  if (ids.dims().size() != 3 || ids.dims() != parents.dims()) {
    return ctx.Error(StrCat("Ids and Parents must be [time, batch, beam] of the same dims, got ",
                            ids.dims().ToString(), " and ", parents.dims().ToString()));
  }
  if (ids.dtype() != parents.dtype()) {
    return ctx.Error("Ids and Parents must have the same dtype");
  }
  const int64_t steps = ids.dims()[0], batch = ids.dims()[1], beam = ids.dims()[2];
  Tensor* out = ctx.Output("Out");
  out->Resize(ids.dims());
  const T* id = ids.data<T>();
  const T* par = parents.data<T>();
  T* o = out->mutable_data<T>(ctx.place());
  auto at = [&](int64_t t, int64_t b, int64_t k) { return (t * batch + b) * beam + k; };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = 0; k < beam; ++k) {
      int64_t from = k;
      for (int64_t t = steps - 1; t >= 0; --t) {
        o[at(t, b, k)] = id[at(t, b, from)];
        const T p = par[at(t, b, from)];
        if (p < 0 || p >= beam) {
          return ctx.Error(StrCat("Parents[", t, "][", b, "][", from, "] = ", p,
                                  " is outside [0, beam = ", beam, ")"));
        }
        from = static_cast<int64_t>(p);
      }
    }
  }
  return Status::OK();
}

// ---- uniform / gaussian random with a batch dim from Input ----
Status RandomLikeInferShape(InferShapeContext* ctx) {
  std::vector<int64_t> shape = ctx->Attr<std::vector<int64_t>>("shape");
  const int in_idx = ctx->Attr<int>("input_dim_idx"), out_idx = ctx->Attr<int>("output_dim_idx");
  DDim in = ctx->InputDim("Input");
  if (out_idx < 0 || out_idx >= static_cast<int>(shape.size()) || in_idx < 0 || in_idx >= in.size())
    return ctx->Error("input_dim_idx / output_dim_idx out of range");
  shape[out_idx] = in[in_idx];
  ctx->SetOutputDim("Out", DDim(shape));
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

template <bool kGaussian>
Status RandomLikeKernel(const KernelContext& ctx) {
  std::vector<int64_t> shape = ctx.Attr<std::vector<int64_t>>("shape");
  shape[ctx.Attr<int>("output_dim_idx")] =
      ctx.Input("Input").dims()[ctx.Attr<int>("input_dim_idx")];
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim(shape));
  const int seed = ctx.Attr<int>("seed");
  std::mt19937_64 rng(seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}());
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    if constexpr (kGaussian) {
      std::normal_distribution<T> dist(ctx.Attr<float>("mean"), ctx.Attr<float>("std"));
      for (int64_t i = 0; i < out->numel(); ++i) o[i] = dist(rng);
    } else {
      std::uniform_real_distribution<T> dist(ctx.Attr<float>("min"), ctx.Attr<float>("max"));
      for (int64_t i = 0; i < out->numel(); ++i) o[i] = dist(rng);
    }
    return Status::OK();
  };
  switch (static_cast<DataType>(ctx.Attr<int>("dtype"))) {
    case proto::FP32: return fill(out->mutable_data<float>(ctx.place()));
    case proto::FP64: return fill(out->mutable_data<double>(ctx.place()));
    default: return ctx.Error("dtype must be float32 or float64");
  }
}

// ---- one_hot ----
Status OneHotInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() < 1 || (x[x.size() - 1] >= 0 && x[x.size() - 1] != 1))
    return ctx->Error(ctx->DescribeInput("X"), " must end in a dim of 1 (ids [..., 1])");
  const int depth = ctx->Attr<int>("depth");
  if (depth < 1) return ctx->Error("depth must be >= 1, got ", depth);
  DDim out = x;
  out[x.size() - 1] = depth;
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

template <typename I>
Status OneHotKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t depth = ctx.Attr<int>("depth");
  const bool allow = ctx.Attr<bool>("allow_out_of_range");
  const I* ids = x.data<I>();
  Tensor* out = ctx.Output("Out");
  DDim d = x.dims();
  d[d.size() - 1] = depth;
  out->Resize(d);
  const int64_t n = x.numel();
  const auto dtype = static_cast<DataType>(ctx.Attr<int>("dtype"));
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    std::fill(o, o + n * depth, T(0));
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= depth) {
        if (allow) continue;
        return ctx.Error("id ", static_cast<int64_t>(ids[i]), " at ", i,
                         " is outside [0, depth = ", depth, ")");
      }
      o[i * depth + static_cast<int64_t>(ids[i])] = T(1);
    }
    return Status::OK();
  };
  switch (dtype) {
    case proto::FP32: return fill(out->mutable_data<float>(ctx.place()));
    case proto::FP64: return fill(out->mutable_data<double>(ctx.place()));
    case proto::INT32: return fill(out->mutable_data<int32_t>(ctx.place()));
    case proto::INT64: return fill(out->mutable_data<int64_t>(ctx.place()));
    default: return ctx.Error("dtype ", DataTypeName(dtype), " is not float or int");
  }
}

// ---- where_index ----
Status WhereIndexInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim({-1, static_cast<int64_t>(ctx->InputDim("Condition").size())}));
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

template <typename T>
Status WhereIndexKernel(const KernelContext& ctx) {
  const Tensor& c = ctx.Input("Condition");
  const DDim& d = c.dims();
  const T* v = c.data<T>();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < c.numel(); ++i)
    if (v[i] != T(0)) hits.push_back(i);
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(hits.size()), static_cast<int64_t>(d.size())}));
  int64_t* o = out->mutable_data<int64_t>(ctx.place());
  for (size_t h = 0; h < hits.size(); ++h) {
    int64_t rest = hits[h];
    for (int a = d.size() - 1; a >= 0; --a) {
      o[h * d.size() + a] = rest % d[a];
      rest /= d[a];
    }
  }
  return Status::OK();
}

#define LOOM_INDEX_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

#define LOOM_RANDOM_LIKE_ATTRS                                           \
  Attr<std::vector<int64_t>>("shape", {1}, "dims of Out (one replaced)") \
      .Attr<int>("input_dim_idx", 0, "the dim of Input to copy")         \
      .Attr<int>("output_dim_idx", 0, "the dim of Out it replaces")      \
      .Attr<int>("seed", 0, "random seed; 0 draws a fresh one")          \
      .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())

}  // namespace

LOOM_REGISTER_OP(gather_nd)
    .Doc("Out[i...] = X[Index[i..., 0], ..., Index[i..., k - 1], ...] (k = Index's last dim).")
    .Input("X", "the source")
    .Input("Index", "int32 / int64 [..., k]")
    .Output("Out", "Index's dims without the last, then X's dims after the first k")
    .InferShape(GatherNdInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Index", "Out@GRAD"}, {"X"})};
    })
    .LOOM_INDEX_KERNELS(GatherNdKernel)
    .Kernel(Place::kCPU, proto::INT64, GatherNdKernel<int64_t>);

LOOM_REGISTER_OP(gather_nd_grad)
    .Doc("X@GRAD = Out@GRAD added back at the gathered places.")
    .Input("X", "forward X")
    .Input("Index", "forward Index")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GradInferShape)
    .LOOM_INDEX_KERNELS(GatherNdGradKernel);

LOOM_REGISTER_OP(scatter)
    .Doc(
        "Out = X with row Ids[i] replaced by Updates[i] (overwrite; a repeated id keeps the "
        "last), or set to the sum of the updates of that row (overwrite = false).")
    .Input("X", "the tensor")
    .Input("Ids", "int32 / int64 row ids")
    .Input("Updates", "[ids, ...]")
    .Output("Out", "X's dims")
    .Attr<bool>("overwrite", true, "replace rows (else sum the updates of each row)")
    .InferShape(ScatterInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Ids", "Updates", "Out@GRAD"}, {"X", "Updates"})};
    })
    .LOOM_INDEX_KERNELS(ScatterKernel);

LOOM_REGISTER_OP(scatter_grad)
    .Doc("X@GRAD = Out@GRAD outside the scattered rows; Updates@GRAD = Out@GRAD at them.")
    .Input("X", "forward X")
    .Input("Ids", "forward Ids")
    .Input("Updates", "forward Updates")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Updates@GRAD", "gradient of Updates", false, true)
    .AttrsFrom("scatter")
    .InferShape([](InferShapeContext* ctx) {
      for (const char* slot : {"X", "Updates"}) {
        const std::string grad = StrCat(slot, "@GRAD");
        if (ctx->OutputSize(grad) == 0) continue;
        ctx->SetOutputDim(grad, ctx->InputDim(slot));
        ctx->SetOutputDtype(grad, ctx->InputDtype(slot));
      }
      return Status::OK();
    })
    .LOOM_INDEX_KERNELS(ScatterGradKernel);

LOOM_REGISTER_OP(unique)
    .Doc("Out = X's distinct values in order of first appearance; Index[i] = X[i]'s place in Out.")
    .Input("X", "a tensor (read flat)")
    .Output("Out", "the distinct values")
    .Output("Index", "[numel(X)]")
    .Attr<int>("dtype", proto::INT64, "DataType code of Index (int32 or int64)", ValidDtype())
    .InferShape([](InferShapeContext* ctx) {
      ctx->SetOutputDim("Out", DDim({-1}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
      ctx->SetOutputDim("Index", DDim({ctx->InputDim("X").numel()}));
      ctx->SetOutputDtype("Index", static_cast<DataType>(ctx->Attr<int>("dtype")));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, UniqueKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, UniqueKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, UniqueKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, UniqueKernel<int64_t>);

LOOM_REGISTER_OP(uniform_random_batch_size_like)
    .Doc("Out ~ U[min, max) of `shape`, its dim output_dim_idx taken from Input's input_dim_idx.")
    .Input("Input", "the tensor whose batch size Out takes")
    .Output("Out", "random tensor")
    .LOOM_RANDOM_LIKE_ATTRS.Attr<float>("min", -1.0f, "lower bound")
    .Attr<float>("max", 1.0f, "upper bound")
    .InferShape(RandomLikeInferShape)
    .Kernel(Place::kCPU, proto::FP32, RandomLikeKernel<false>)
    .Kernel(Place::kCPU, proto::FP64, RandomLikeKernel<false>)
    .Kernel(Place::kCPU, proto::INT64, RandomLikeKernel<false>);

LOOM_REGISTER_OP(gaussian_random_batch_size_like)
    .Doc("Out ~ N(mean, std^2) of `shape`, its dim output_dim_idx from Input's input_dim_idx.")
    .Input("Input", "the tensor whose batch size Out takes")
    .Output("Out", "random tensor")
    .LOOM_RANDOM_LIKE_ATTRS.Attr<float>("mean", 0.0f, "mean")
    .Attr<float>("std", 1.0f, "standard deviation")
    .InferShape(RandomLikeInferShape)
    .Kernel(Place::kCPU, proto::FP32, RandomLikeKernel<true>)
    .Kernel(Place::kCPU, proto::FP64, RandomLikeKernel<true>)
    .Kernel(Place::kCPU, proto::INT64, RandomLikeKernel<true>);

LOOM_REGISTER_OP(gather_tree)
    .Doc(
        "Backtraces beam search: Ids and Parents are [time, batch, beam] (the token chosen and "
        "the beam it extends, per step); Out[t][b][k] is the token at step t of the path ending "
        "in beam k at the last step. Integer outputs: no gradient.")
    .Input("Ids", "int32 / int64 [time, batch, beam] tokens chosen per step")
    .Input("Parents", "[time, batch, beam] the beam each token extends (Ids' dtype)")
    .Output("Out", "[time, batch, beam] the full paths")
    .InferShape([](InferShapeContext* ctx) {
      const DDim ids = ctx->InputDim("Ids");
      if (ids.size() != 3) {
        return ctx->Error(StrCat("Ids must be [time, batch, beam], got ", ids.ToString()));
      }
      ctx->SetOutputDim("Out", ids);
      ctx->SetOutputDtype("Out", ctx->InputDtype("Ids"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::INT32, GatherTreeKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, GatherTreeKernel<int64_t>);

LOOM_REGISTER_OP(one_hot)
    .Doc(
        "Out[..., j] = 1 if X[..., 0] == j else 0, for j < depth (X holds int ids, last dim 1). "
        "An id outside [0, depth) is an error, or a row of zeros with allow_out_of_range.")
    .Input("X", "ids [..., 1], int32 or int64")
    .Output("Out", "[..., depth]")
    .Attr<int>("depth", 1, "the number of classes")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .Attr<bool>("allow_out_of_range", false, "zeros for ids outside [0, depth)")
    .InferShape(OneHotInferShape)
    .Kernel(Place::kCPU, proto::INT64, OneHotKernel<int64_t>)
    .Kernel(Place::kCPU, proto::INT32, OneHotKernel<int32_t>);

LOOM_REGISTER_OP(where_index)
    .Doc("Out = the coordinates [K, rank] of the K non-zero (true) elements of Condition.")
    .Input("Condition", "a bool (or numeric) tensor")
    .Output("Out", "int64 coordinates, one row per hit, in row-major order")
    .InferShape(WhereIndexInferShape)
    .Kernel(Place::kCPU, proto::BOOL, WhereIndexKernel<bool>)
    .Kernel(Place::kCPU, proto::INT32, WhereIndexKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, WhereIndexKernel<int64_t>)
    .LOOM_INDEX_KERNELS(WhereIndexKernel);

}  // namespace loom::ops
