// spectral_norm: Fluid's spectral normalization of a weight. Weight is viewed as a matrix
// W [h, w] with dim `dim` (0 or 1) as its rows (dim 1 is moved to the front); starting from
// U [h] and V [w], power_iters rounds of
//   V = Wᵀ U / (|Wᵀ U| + eps),   U = W V / (|W V| + eps)
// estimate the largest singular value sigma = Uᵀ W V, and Out = Weight / sigma. As in Fluid,
// U and V are read and never written (each run iterates from the same U and V), and the
// gradient holds U and V fixed: Weight@GRAD = (dOut - U Vᵀ · sum(dOut * Out)) / sigma.
#include <cmath>
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// The matrix view of Weight: rows h = dims[dim], columns w = the other dims' product; for
// dim 1, element (i0, i1, k) of Weight [d0, d1, r] is row i1, column i0 * r + k.
struct MatView {
  int64_t h = 0, w = 0, d0 = 0, d1 = 0, r = 0;
  int dim = 0;
  int64_t Offset(int64_t row, int64_t col) const {
    if (dim == 0) return row * w + col;
    return (col / r) * d1 * r + row * r + col % r;
  }
};

MatView MakeView(const DDim& dims, int dim) {
  MatView m;
  m.dim = dim;
  m.d0 = dims[0];
  m.d1 = dims.size() > 1 ? dims[1] : 1;
  m.r = dims.size() > 2 ? dims.product(2, dims.size()) : 1;
  m.h = dims[dim];
  m.w = dims.numel() / std::max<int64_t>(m.h, 1);
  return m;
}

Status SpectralNormInferShape(InferShapeContext* ctx) {
  DDim wd = ctx->InputDim("Weight");
  int dim = ctx->Attr<int>("dim");
  if (wd.size() < 2 || wd.size() > 5)
    return ctx->Error(ctx->DescribeInput("Weight"), " must have rank 2 to 5");
  if (dim != 0 && dim != 1) return ctx->Error("dim must be 0 or 1, got ", dim);
  if (!IsFloatingPoint(ctx->InputDtype("Weight")))
    return ctx->Error(ctx->DescribeInput("Weight"), " must be floating point");
  if (wd.known()) {
    const int64_t h = wd[dim], w = wd.numel() / std::max<int64_t>(h, 1);
    if (ctx->InputDim("U").numel() >= 0 && ctx->InputDim("U").numel() != h)
      return ctx->Error(ctx->DescribeInput("U"), " must hold ", h, " values (Weight's dim ", dim,
                        ")");
    if (ctx->InputDim("V").numel() >= 0 && ctx->InputDim("V").numel() != w)
      return ctx->Error(ctx->DescribeInput("V"), " must hold ", w,
                        " values (the product of Weight's other dims)");
  }
  ctx->ShareDimAndDtype("Weight", "Out");
  return Status::OK();
}

// sigma, U and V after the power iterations.
template <typename T>
double PowerIterate(const KernelContext& ctx, const T* wt, const MatView& m, std::vector<double>* u,
                    std::vector<double>* v) {
  const Tensor& ut = ctx.Input("U");
  const Tensor& vt = ctx.Input("V");
  u->assign(ut.data<T>(), ut.data<T>() + m.h);
  v->assign(vt.data<T>(), vt.data<T>() + m.w);
  const double eps = ctx.Attr<float>("eps");
  auto normalize = [eps](std::vector<double>* x) {
    double norm = 0;
    for (double e : *x) norm += e * e;
    norm = std::sqrt(norm) + eps;
    for (double& e : *x) e /= norm;
  };
  std::vector<double> wv(m.h);
  auto mul_wv = [&]() {
    for (int64_t i = 0; i < m.h; ++i) {
      double s = 0;
      for (int64_t j = 0; j < m.w; ++j) s += wt[m.Offset(i, j)] * (*v)[j];
      wv[i] = s;
    }
  };
  for (int it = 0, n = ctx.Attr<int>("power_iters"); it < n; ++it) {
    std::fill(v->begin(), v->end(), 0.0);
    for (int64_t i = 0; i < m.h; ++i)
      for (int64_t j = 0; j < m.w; ++j) (*v)[j] += wt[m.Offset(i, j)] * (*u)[i];
    normalize(v);
    mul_wv();
    *u = wv;
    normalize(u);
  }
  mul_wv();
  double sigma = 0;
  for (int64_t i = 0; i < m.h; ++i) sigma += (*u)[i] * wv[i];
  return sigma;
}

template <typename T>
Status SpectralNormKernel(const KernelContext& ctx) {
  const Tensor& weight = ctx.Input("Weight");
  const MatView m = MakeView(weight.dims(), ctx.Attr<int>("dim"));
  std::vector<double> u, v;
  const double sigma = PowerIterate<T>(ctx, weight.data<T>(), m, &u, &v);
  if (sigma == 0) return ctx.Error("the spectral norm estimate of Weight is 0");
  const T* w = weight.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t k = 0, n = weight.numel(); k < n; ++k) out[k] = static_cast<T>(w[k] / sigma);
  return Status::OK();
}

template <typename T>
Status SpectralNormGradKernel(const KernelContext& ctx) {
  Tensor* dw_t = ctx.OutputOrNull("Weight@GRAD");
  if (!dw_t) return Status::OK();
  const Tensor& weight = ctx.Input("Weight");
  const MatView m = MakeView(weight.dims(), ctx.Attr<int>("dim"));
  std::vector<double> u, v;
  const T* w = weight.data<T>();
  const double sigma = PowerIterate<T>(ctx, w, m, &u, &v);
  const T* dout = ctx.Input("Out@GRAD").data<T>();
  const int64_t n = weight.numel();
  double dot = 0;  // sum(dOut * Out)
  for (int64_t k = 0; k < n; ++k) dot += dout[k] * (w[k] / sigma);
  T* dw = dw_t->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < m.h; ++i)
    for (int64_t j = 0; j < m.w; ++j) {
      const int64_t k = m.Offset(i, j);
      dw[k] = static_cast<T>((dout[k] - u[i] * v[j] * dot) / sigma);
    }
  return Status::OK();
}

std::vector<proto::OpDesc> SpectralNormGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Weight", "U", "V", "Out@GRAD"}, {"Weight"})};
}

Status SpectralNormGradInferShape(InferShapeContext* ctx) {
  if (ctx->HasOutput("Weight@GRAD")) ctx->ShareDimAndDtype("Weight", "Weight@GRAD");
  return Status::OK();
}

std::function<Status(const int&)> NonNegativeIters() { return NonNegative("power_iters"); }

}  // namespace

LOOM_REGISTER_OP(spectral_norm)
    .Doc("Out = Weight / sigma, sigma its largest singular value estimated by power iteration.")
    .Input("Weight", "the weight, rank 2 to 5")
    .Input("U", "the left singular vector's start [Weight.dims[dim]]")
    .Input("V", "the right singular vector's start [the other dims' product]")
    .Output("Out", "the normalized weight, Weight's dims")
    .Attr<int>("dim", 0, "the dim of Weight that forms the rows: 0 or 1")
    .Attr<int>("power_iters", 1, "power iterations", NonNegativeIters())
    .Attr<float>("eps", 1e-12f, "added to the norms the vectors are divided by")
    .KernelDtypeFrom("Weight")
    .InferShape(SpectralNormInferShape)
    .GradMaker(SpectralNormGradMaker)
    .Kernel(Place::kCPU, proto::FP32, SpectralNormKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SpectralNormKernel<double>);

LOOM_REGISTER_OP(spectral_norm_grad)
    .Doc("Weight@GRAD of spectral_norm with U and V held fixed.")
    .Input("Weight", "forward Weight")
    .Input("U", "forward U")
    .Input("V", "forward V")
    .Input("Out@GRAD", "gradient of Out")
    .Output("Weight@GRAD", "gradient of Weight", false, true)
    .AttrsFrom("spectral_norm")
    .KernelDtypeFrom("Weight")
    .InferShape(SpectralNormGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SpectralNormGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SpectralNormGradKernel<double>);

}  // namespace loom::ops
