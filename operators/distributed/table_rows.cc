#include "operators/distributed/table_rows.h"

#include <cmath>
#include <limits>

namespace loom::ops {
namespace {

// Fluid's sgd row by row: w = w - lr * g in the table's dtype (operators/optimizers/sgd.cc).
class SgdRows final : public kvstore::RowUpdater {
 public:
  explicit SgdRows(double lr) : lr_(lr) {}
  int state_slots() const override { return 0; }
  void Update(const float* g, int, float* w, float*, int64_t n) const override { Run(g, w, n); }
  void Update(const double* g, int, double* w, double*, int64_t n) const override { Run(g, w, n); }

 private:
  template <typename T>
  void Run(const T* g, T* w, int64_t n) const {
    const T lr = static_cast<T>(lr_);
    for (int64_t i = 0; i < n; ++i) w[i] = w[i] - lr * g[i];
  }
  double lr_;
};

// Fluid's adagrad row by row (operators/optimizers/adaptive.cc): m += g^2; w -= lr * g /
// (sqrt(m) + epsilon), in the table's dtype; m is the row's state, 0 for a new row.
class AdagradRows final : public kvstore::RowUpdater {
 public:
  AdagradRows(double lr, float epsilon) : lr_(lr), epsilon_(epsilon) {}
  int state_slots() const override { return 1; }
  void Update(const float* g, int, float* w, float* m, int64_t n) const override {
    Run(g, w, m, n);
  }
  void Update(const double* g, int, double* w, double* m, int64_t n) const override {
    Run(g, w, m, n);
  }

 private:
  template <typename T>
  void Run(const T* g, T* w, T* m, int64_t n) const {
    const T lr = static_cast<T>(lr_), eps = static_cast<T>(epsilon_);
    for (int64_t i = 0; i < n; ++i) {
      m[i] = m[i] + g[i] * g[i];
      w[i] -= lr * g[i] / (std::sqrt(m[i]) + eps);
    }
  }
  double lr_;
  float epsilon_;
};

// Fluid's lazy adam row by row (operators/optimizers/momentum_adam.cc), in the table's dtype:
// m1 = b1 m1 + (1 - b1) g; m2 = b2 m2 + (1 - b2) g^2; w -= lr_t m1 / (sqrt(m2) + eps_t) with
// lr_t = lr sqrt(1 - b2^t) / (1 - b1^t), eps_t = eps sqrt(1 - b2^t). The row's state is m1 then
// m2, 0 for a new row.
class AdamRows final : public kvstore::RowUpdater {
 public:
  AdamRows(double lr, const TableShard& t) : lr_(lr), t_(t) {}
  int state_slots() const override { return 2; }
  void Update(const float* g, int, float* w, float* s, int64_t n) const override {
    Run(g, w, s, n);
  }
  void Update(const double* g, int, double* w, double* s, int64_t n) const override {
    Run(g, w, s, n);
  }

 private:
  template <typename T>
  void Run(const T* g, T* w, T* s, int64_t n) const {
    const T lr = static_cast<T>(lr_), b1 = static_cast<T>(t_.beta1), b2 = static_cast<T>(t_.beta2),
            b1p = static_cast<T>(t_.beta1_pow), b2p = static_cast<T>(t_.beta2_pow),
            eps = static_cast<T>(t_.epsilon);
    const T lr_t = lr * std::sqrt(T(1) - b2p) / (T(1) - b1p);
    const T eps_t = eps * std::sqrt(T(1) - b2p);
    T* m1 = s;
    T* m2 = s + n;
    for (int64_t i = 0; i < n; ++i) {
      T a = b1 * m1[i] + (T(1) - b1) * g[i];
      T b = b2 * m2[i] + (T(1) - b2) * g[i] * g[i];
      m1[i] = a;
      m2[i] = b;
      w[i] = w[i] - lr_t * a / (std::sqrt(b) + eps_t);
    }
  }
  double lr_;
  const TableShard& t_;
};

// beta^t * beta, rounded to the table's dtype as the adam op's Beta1PowOut is.
double NextPow(double pow, float beta, DataType dtype) {
  if (dtype == proto::FP32) return static_cast<float>(pow) * beta;
  return pow * static_cast<double>(beta);
}

// out = rows of every part, weighted: sum over parts of w * rows (ids unique per part); the
// parts are added in order, each id's row starting from w0 * g0 as the dense WeightedSum does.
template <typename T>
SelectedRows WeightedRowsOf(const std::vector<std::pair<double, const SelectedRows*>>& parts,
                            int64_t width, DataType dtype) {
  std::map<int64_t, int64_t> slot;
  for (const auto& [w, s] : parts)
    for (int64_t id : s->rows) slot.emplace(id, 0);
  SelectedRows out;
  out.height = std::numeric_limits<int64_t>::max();
  int64_t n = 0;
  for (auto& kv : slot) {
    kv.second = n++;
    out.rows.push_back(kv.first);
  }
  out.value = Tensor(dtype, DDim({n, width}));
  T* acc = out.value.mutable_data<T>(Place::CPU());
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (const auto& [w, s] : parts) {
    const T wt = static_cast<T>(w);
    const T* g = s->value.template data<T>();
    for (size_t i = 0; i < s->rows.size(); ++i) {
      const int64_t k = slot[s->rows[i]];
      T* dst = acc + k * width;
      const T* src = g + static_cast<int64_t>(i) * width;
      if (!seen[static_cast<size_t>(k)]) {
        for (int64_t j = 0; j < width; ++j) dst[j] = wt * src[j];
        seen[static_cast<size_t>(k)] = true;
      } else {
        for (int64_t j = 0; j < width; ++j) dst[j] += wt * src[j];
      }
    }
  }
  return out;
}

}  // namespace

StatusOr<SelectedRows> WeightedRows(
    const std::vector<std::pair<double, const SelectedRows*>>& parts, int64_t width,
    DataType dtype) {
  if (dtype == proto::FP64) return WeightedRowsOf<double>(parts, width, dtype);
  if (dtype == proto::FP32) return WeightedRowsOf<float>(parts, width, dtype);
  return InvalidArgument("rows of ", DataTypeName(dtype), ": servers update fp32 and fp64");
}

Status ApplyTableRows(TableShard& t, double lr, const SelectedRows& grad) {
  const int64_t n = static_cast<int64_t>(grad.rows.size());
  const std::string what = StrCat("table '", t.name, "'");
  if (t.optimizer == "adagrad")
    return t.rows->Apply(AdagradRows(lr, t.epsilon), grad.rows.data(), n, grad.value.raw_data(), 1,
                         what);
  if (t.optimizer == "adam") {  // the beta powers advance with every update, as the op's do
    if (n > 0)
      LOOM_RETURN_IF_ERROR(
          t.rows->Apply(AdamRows(lr, t), grad.rows.data(), n, grad.value.raw_data(), 1, what));
    t.beta1_pow = NextPow(t.beta1_pow, t.beta1, t.rows->dtype());
    t.beta2_pow = NextPow(t.beta2_pow, t.beta2, t.rows->dtype());
    return Status::OK();
  }
  if (t.optimizer != "sgd")
    return InvalidArgument(what, " is updated by '", t.optimizer, "' (sgd, adagrad or adam)");
  return t.rows->Apply(SgdRows(lr), grad.rows.data(), n, grad.value.raw_data(), 1, what);
}

}  // namespace loom::ops
