#include "kvstore/updater.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace loom::kvstore {
namespace {

// MXNet's SGD over n elements; m is the velocity (null without momentum). Shared by the dense
// and the row-wise updaters, so both compute the same bits.
struct SgdParams {
  double lr, momentum, wd, rescale, clip;

  template <typename T>
  void Step(const T* g, T* w, T* m, int64_t n) const {
    const T tlr = static_cast<T>(lr), twd = static_cast<T>(wd), rs = static_cast<T>(rescale);
    const T mu = static_cast<T>(momentum), tclip = static_cast<T>(clip);
    for (int64_t i = 0; i < n; ++i) {
      T gi = rs * g[i];
      if (clip > 0) gi = std::min(tclip, std::max(-tclip, gi));
      gi += twd * w[i];
      if (m) {
        m[i] = mu * m[i] - tlr * gi;
        w[i] += m[i];
      } else {
        w[i] -= tlr * gi;
      }
    }
  }
};

// Elastic averaging's centre step over n elements: c += alpha * (sum - parts * c).
template <typename T>
void ElasticStep(double alpha, const T* w, int parts, T* c, int64_t n) {
  const T a = static_cast<T>(alpha), k = static_cast<T>(parts);
  for (int64_t i = 0; i < n; ++i) c[i] += a * (w[i] - k * c[i]);
}

class Sgd final : public Updater {
 public:
  explicit Sgd(SgdParams p) : p_(p) {}

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
    if (p_.momentum != 0) {
      Tensor& mom = mom_[key];
      if (!mom.initialized()) {
        mom = Tensor(weight->dtype(), weight->dims());
        std::fill_n(mom.mutable_data<T>(Place::CPU()), n, T(0));
      }
      m = mom.data<T>();
    }
    p_.Step(g, w, m, n);
    return Status::OK();
  }

  SgdParams p_;
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
    ElasticStep(alpha_, sum.data<T>(), parts, centre->data<T>(), centre->numel());
    return Status::OK();
  }

  double alpha_;
};

class RowSgd final : public RowUpdater {
 public:
  explicit RowSgd(SgdParams p) : p_(p) {}
  int state_slots() const override { return p_.momentum != 0 ? 1 : 0; }
  void Update(const float* g, int, float* w, float* s, int64_t n) const override {
    p_.Step(g, w, p_.momentum != 0 ? s : nullptr, n);
  }
  void Update(const double* g, int, double* w, double* s, int64_t n) const override {
    p_.Step(g, w, p_.momentum != 0 ? s : nullptr, n);
  }

 private:
  SgdParams p_;
};

class RowElastic final : public RowUpdater {
 public:
  explicit RowElastic(double alpha) : alpha_(alpha) {}
  int state_slots() const override { return 0; }
  void Update(const float* g, int parts, float* w, float*, int64_t n) const override {
    ElasticStep(alpha_, g, parts, w, n);
  }
  void Update(const double* g, int parts, double* w, double*, int64_t n) const override {
    ElasticStep(alpha_, g, parts, w, n);
  }

 private:
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

// The checked hyper-parameters of an sgd or elastic description.
StatusOr<SgdParams> SgdOf(const OptimizerSpec& spec) {
  LOOM_RETURN_IF_ERROR(
      CheckParams(spec, {"learning_rate", "momentum", "wd", "rescale_grad", "clip_gradient"}));
  const double lr = Param(spec, "learning_rate", 0.01), mom = Param(spec, "momentum", 0);
  if (lr < 0) return InvalidArgument("sgd: learning_rate must be >= 0, got ", lr);
  if (mom < 0 || mom >= 1) return InvalidArgument("sgd: momentum must be in [0, 1), got ", mom);
  return SgdParams{lr, mom, Param(spec, "wd", 0), Param(spec, "rescale_grad", 1),
                   Param(spec, "clip_gradient", -1)};
}

StatusOr<double> ElasticOf(const OptimizerSpec& spec) {
  LOOM_RETURN_IF_ERROR(CheckParams(spec, {"alpha"}));
  const double alpha = Param(spec, "alpha", 0.5);
  if (alpha <= 0 || alpha > 1)
    return InvalidArgument("elastic: alpha must be in (0, 1], got ", alpha);
  return alpha;
}

Status UnknownOptimizer(const OptimizerSpec& spec) {
  return InvalidArgument("unknown optimizer '", spec.name, "' (a KVStore runs: sgd, elastic)");
}

}  // namespace

StatusOr<std::unique_ptr<Updater>> MakeUpdater(const OptimizerSpec& spec) {
  if (spec.name == "sgd") {
    LOOM_ASSIGN_OR_RETURN(SgdParams p, SgdOf(spec));
    return std::unique_ptr<Updater>(new Sgd(p));
  }
  if (spec.name == "elastic") {
    LOOM_ASSIGN_OR_RETURN(double alpha, ElasticOf(spec));
    return std::unique_ptr<Updater>(new Elastic(alpha));
  }
  return UnknownOptimizer(spec);
}

StatusOr<std::unique_ptr<RowUpdater>> MakeRowUpdater(const OptimizerSpec& spec) {
  if (spec.name == "sgd") {
    LOOM_ASSIGN_OR_RETURN(SgdParams p, SgdOf(spec));
    return std::unique_ptr<RowUpdater>(new RowSgd(p));
  }
  if (spec.name == "elastic") {
    LOOM_ASSIGN_OR_RETURN(double alpha, ElasticOf(spec));
    return std::unique_ptr<RowUpdater>(new RowElastic(alpha));
  }
  return UnknownOptimizer(spec);
}

}  // namespace loom::kvstore
