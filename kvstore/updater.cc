#include "kvstore/updater.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace loom::kvstore {
namespace {

class Sgd final : public Updater {
 public:
  Sgd(double lr, double momentum, double wd, double rescale, double clip)
      : lr_(lr), momentum_(momentum), wd_(wd), rescale_(rescale), clip_(clip) {}

  Status Update(const std::string& key, const Tensor& grad, int parts, Tensor* weight) override {
    if (grad.dtype() == proto::FP32) return Apply<float>(key, grad, weight);
    if (grad.dtype() == proto::FP64) return Apply<double>(key, grad, weight);
    return InvalidArgument("sgd updates fp32 and fp64 values; key ", key, " is ",
                           DataTypeName(grad.dtype()));
  }

 private:
  template <typename T>
  Status Apply(const std::string& key, const Tensor& grad, Tensor* weight) {
    const int64_t n = weight->numel();
    const T* g = grad.data<T>();
    T* w = weight->data<T>();
    T* m = nullptr;
    if (momentum_ != 0) {
      Tensor& mom = mom_[key];
      if (!mom.initialized()) {
        mom = Tensor(weight->dtype(), weight->dims());
        std::fill_n(mom.mutable_data<T>(Place::CPU()), n, T(0));
      }
      m = mom.data<T>();
    }
    const T lr = static_cast<T>(lr_), wd = static_cast<T>(wd_), rs = static_cast<T>(rescale_);
    const T mu = static_cast<T>(momentum_), clip = static_cast<T>(clip_);
    for (int64_t i = 0; i < n; ++i) {
      T gi = rs * g[i];
      if (clip_ > 0) gi = std::min(clip, std::max(-clip, gi));
      gi += wd * w[i];
      if (m) {
        m[i] = mu * m[i] - lr * gi;
        w[i] += m[i];
      } else {
        w[i] -= lr * gi;
      }
    }
    return Status::OK();
  }

  double lr_, momentum_, wd_, rescale_, clip_;
  std::map<std::string, Tensor> mom_;
};

class Elastic final : public Updater {
 public:
  explicit Elastic(double alpha) : alpha_(alpha) {}

  Status Update(const std::string& key, const Tensor& sum, int parts, Tensor* centre) override {
    if (sum.dtype() == proto::FP32) return Apply<float>(sum, parts, centre);
    if (sum.dtype() == proto::FP64) return Apply<double>(sum, parts, centre);
    return InvalidArgument("elastic updates fp32 and fp64 values; key ", key, " is ",
                           DataTypeName(sum.dtype()));
  }

 private:
  template <typename T>
  Status Apply(const Tensor& sum, int parts, Tensor* centre) {
    const T* w = sum.data<T>();
    T* c = centre->data<T>();
    const T a = static_cast<T>(alpha_), k = static_cast<T>(parts);
    for (int64_t i = 0; i < centre->numel(); ++i) c[i] += a * (w[i] - k * c[i]);
    return Status::OK();
  }

  double alpha_;
};

Status CheckParams(const OptimizerSpec& spec, const std::set<std::string>& known) {
  for (const auto& [name, value] : spec.params) {
    if (!known.count(name)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument("optimizer '", spec.name, "' has no hyper-parameter '", name,
                             "' (it takes ", list, ")");
    }
    if (!std::isfinite(value))
      return InvalidArgument("optimizer '", spec.name, "': ", name, " = ", value, " is not finite");
  }
  return Status::OK();
}

double Param(const OptimizerSpec& spec, const std::string& name, double fallback) {
  auto it = spec.params.find(name);
  return it == spec.params.end() ? fallback : it->second;
}

}  // namespace

StatusOr<std::unique_ptr<Updater>> MakeUpdater(const OptimizerSpec& spec) {
  if (spec.name == "sgd") {
    LOOM_RETURN_IF_ERROR(
        CheckParams(spec, {"learning_rate", "momentum", "wd", "rescale_grad", "clip_gradient"}));
    const double lr = Param(spec, "learning_rate", 0.01), mom = Param(spec, "momentum", 0);
    if (lr < 0) return InvalidArgument("sgd: learning_rate must be >= 0, got ", lr);
    if (mom < 0 || mom >= 1) return InvalidArgument("sgd: momentum must be in [0, 1), got ", mom);
    return std::unique_ptr<Updater>(new Sgd(lr, mom, Param(spec, "wd", 0),
                                            Param(spec, "rescale_grad", 1),
                                            Param(spec, "clip_gradient", -1)));
  }
  if (spec.name == "elastic") {
    LOOM_RETURN_IF_ERROR(CheckParams(spec, {"alpha"}));
    const double alpha = Param(spec, "alpha", 0.5);
    if (alpha <= 0 || alpha > 1)
      return InvalidArgument("elastic: alpha must be in (0, 1], got ", alpha);
    return std::unique_ptr<Updater>(new Elastic(alpha));
  }
  return InvalidArgument("unknown optimizer '", spec.name, "' (a KVStore runs: sgd, elastic)");
}

}  // namespace loom::kvstore
