// reduce_sum, reduce_mean, reduce_max over a set of dims (or all), with keep_dim.
#include <algorithm>
#include <limits>
#include <optional>

#include "operators/common.h"
#include "operators/math/reduce_geom.h"

namespace loom::ops {
namespace {

Status ReduceInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  auto mask = ReducedMask(x, ctx->Attr<std::vector<int>>("dim"), ctx->Attr<bool>("reduce_all"));
  if (!mask.ok()) return ctx->Error(ctx->DescribeInput("X"), ": ", mask.status().message());
  bool keep = ctx->Attr<bool>("keep_dim");
  DDim out;
  for (int i = 0; i < x.size(); ++i) {
    if (!mask.value()[i])
      out.push_back(x[i]);
    else if (keep)
      out.push_back(1);
  }
  if (out.size() == 0) out.push_back(1);
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// Maps every input element to its output element: out_index(i) via strides.
struct ReduceIndexer {
  std::vector<int64_t> in_dims, out_strides;  // out_strides[k] = 0 for reduced dims
  int64_t groups = 1;                         // elements per output element
  ReduceIndexer(const DDim& x, const std::vector<bool>& mask) {
    in_dims = x.vec();
    out_strides.assign(x.size(), 0);
    int64_t s = 1;
    for (int k = x.size() - 1; k >= 0; --k) {
      if (mask[k]) {
        groups *= x[k];
      } else {
        out_strides[k] = s;
        s *= x[k];
      }
    }
  }
  template <typename F>
  void ForEach(F f) const {  // f(input flat index, output flat index)
    int64_t n = 1;
    for (int64_t d : in_dims) n *= d;
    std::vector<int64_t> idx(in_dims.size(), 0);
    int64_t out = 0;
    for (int64_t i = 0; i < n; ++i) {
      f(i, out);
      for (int k = static_cast<int>(in_dims.size()) - 1; k >= 0; --k) {
        if (++idx[k] < in_dims[k]) {
          out += out_strides[k];
          break;
        }
        out -= out_strides[k] * (in_dims[k] - 1);
        idx[k] = 0;
      }
    }
  }
};

// x viewed as [pre, mid, post] with the mid dims reduced: the reduced dims form one contiguous
// run (all dims, leading or trailing dims, or a middle run; dims of size 1 join either side).
// Other masks (e.g. dims 0 and 2 of 3) go through ReduceIndexer.
struct ContiguousReduce {
  int64_t pre = 1, mid = 1, post = 1;
  static std::optional<ContiguousReduce> Plan(const DDim& x, const std::vector<bool>& mask) {
    ContiguousReduce r;
    int stage = 0;  // 0: before the reduced run, 1: inside it, 2: after it
    for (int k = 0; k < x.size(); ++k) {
      if (x[k] == 1) continue;
      if (mask[k]) {
        if (stage == 2) return std::nullopt;
        stage = 1;
        r.mid *= x[k];
      } else {
        if (stage == 1) stage = 2;
        (stage == 0 ? r.pre : r.post) *= x[k];
      }
    }
    return r;
  }
};

enum class Kind { kSum, kMean, kMax };

template <typename T, Kind K>
T Fold(T a, T b) {
  return K == Kind::kMax ? std::max(a, b) : a + b;
}

// o[p, q] = fold over k of in[p, k, q], o already holding the fold's identity.
template <typename T, Kind K>
void ReduceContiguous(const ContiguousReduce& r, const T* in, T* o) {
  for (int64_t p = 0; p < r.pre; ++p) {
    const T* ip = in + p * r.mid * r.post;
    T* op = o + p * r.post;
    if (r.post == 1) {
      // Eight independent partial folds: the loop vectorizes, and sums lose less precision.
      T acc[8];
      std::fill(acc, acc + 8, op[0]);
      int64_t k = 0;
      for (; k + 8 <= r.mid; k += 8)
        for (int l = 0; l < 8; ++l) acc[l] = Fold<T, K>(acc[l], ip[k + l]);
      for (; k < r.mid; ++k) acc[0] = Fold<T, K>(acc[0], ip[k]);
      T total = acc[0];
      for (int l = 1; l < 8; ++l) total = Fold<T, K>(total, acc[l]);
      op[0] = total;
    } else {
      for (int64_t k = 0; k < r.mid; ++k) {
        const T* row = ip + k * r.post;
        for (int64_t q = 0; q < r.post; ++q) op[q] = Fold<T, K>(op[q], row[q]);
      }
    }
  }
}

template <typename T, Kind K>
Status ReduceKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  auto mask =
      ReducedMask(x.dims(), ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"));
  if (!mask.ok()) return ctx.Error(mask.status().message());
  ReduceIndexer ix(x.dims(), mask.value());
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + out->numel(), K == Kind::kMax ? std::numeric_limits<T>::lowest() : T(0));
  const T* in = x.data<T>();
  if (auto plan = ContiguousReduce::Plan(x.dims(), mask.value())) {
    ReduceContiguous<T, K>(*plan, in, o);
  } else {
    ix.ForEach([&](int64_t i, int64_t j) { o[j] = Fold<T, K>(o[j], in[i]); });
  }
  if (K == Kind::kMean && ix.groups > 0)
    for (int64_t j = 0, j_end = out->numel(); j < j_end; ++j) o[j] /= static_cast<T>(ix.groups);
  return Status::OK();
}

// sum: dx = g[j]; mean: dx = g[j] / groups; max: dx = g[j] where x == out[j] (all ties).
template <typename T, Kind K>
Status ReduceGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  auto mask =
      ReducedMask(x.dims(), ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"));
  if (!mask.ok()) return ctx.Error(mask.status().message());
  ReduceIndexer ix(x.dims(), mask.value());
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const T* in = x.data<T>();
  const T* out = K == Kind::kMax ? ctx.Input("Out").data<T>() : nullptr;
  T* o = dx->mutable_data<T>(ctx.place());
  T scale = K == Kind::kMean ? T(1) / static_cast<T>(ix.groups ? ix.groups : 1) : T(1);
  auto one = [&](int64_t i, int64_t j) {
    if (K == Kind::kMax)
      o[i] = in[i] == out[j] ? g[j] : T(0);
    else
      o[i] = g[j] * scale;
  };
  if (auto plan = ContiguousReduce::Plan(x.dims(), mask.value())) {
    for (int64_t p = 0; p < plan->pre; ++p)
      for (int64_t k = 0; k < plan->mid; ++k) {
        int64_t base = (p * plan->mid + k) * plan->post, j0 = p * plan->post;
        for (int64_t q = 0; q < plan->post; ++q) one(base + q, j0 + q);
      }
  } else {
    ix.ForEach(one);
  }
  return Status::OK();
}

Status ReduceGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

}  // namespace

#define LOOM_REDUCE_OP(NAME, KIND, DOC)                                                    \
  LOOM_REGISTER_OP(NAME)                                                                   \
      .Doc(DOC)                                                                            \
      .Input("X", "input")                                                                 \
      .Output("Out", "reduced tensor")                                                     \
      .Attr<std::vector<int>>("dim", {0}, "dims to reduce (negative counts from the end)") \
      .Attr<bool>("keep_dim", false, "keep reduced dims with size 1")                      \
      .Attr<bool>("reduce_all", false, "reduce every dim (ignores dim)")                   \
      .InferShape(ReduceInferShape)                                                        \
      .GradMaker(DefaultGradMaker())                                                       \
      .Kernel(Place::kCPU, proto::FP32, ReduceKernel<float, KIND>)                         \
      .Kernel(Place::kCPU, proto::FP64, ReduceKernel<double, KIND>)                        \
      .Kernel(Place::kCPU, proto::INT32, ReduceKernel<int32_t, KIND>)                      \
      .Kernel(Place::kCPU, proto::INT64, ReduceKernel<int64_t, KIND>);                     \
  LOOM_REGISTER_OP(NAME##_grad)                                                            \
      .Doc("gradient of " #NAME)                                                           \
      .Input("X", "forward input")                                                         \
      .Input("Out", "forward output")                                                      \
      .Input("Out@GRAD", "gradient of Out")                                                \
      .Output("X@GRAD", "gradient of X", false, true)                                      \
      .AttrsFrom(#NAME)                                                                    \
      .InferShape(ReduceGradInferShape)                                                    \
      .Kernel(Place::kCPU, proto::FP32, ReduceGradKernel<float, KIND>)                     \
      .Kernel(Place::kCPU, proto::FP64, ReduceGradKernel<double, KIND>)

LOOM_REDUCE_OP(reduce_sum, Kind::kSum, "Out = sum of X over dims.");
LOOM_REDUCE_OP(reduce_mean, Kind::kMean, "Out = mean of X over dims.");
LOOM_REDUCE_OP(reduce_max, Kind::kMax,
               "Out = max of X over dims (every tied maximum receives the gradient).");

}  // namespace loom::ops
