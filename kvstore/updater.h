// Optimizers a KVStore applies to its stored values: typed descriptions (a name and numeric
// hyper-parameters) checked against a registry here, never code — a store, or a server holding
// one, runs only what this file implements.
//
//   sgd      weight -= learning_rate * (rescale_grad * clip(grad) + wd * weight), with momentum:
//            mom = momentum * mom - learning_rate * (...), weight += mom (MXNet's SGD)
//   elastic  elastic averaging SGD's centre (EASGD's Elastic1): the pushed values are workers'
//            weights; centre += alpha * sum over the k pushes merged (w_i - centre)
#pragma once

#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "framework/tensor.h"

namespace loom::kvstore {

struct OptimizerSpec {
  std::string name;
  std::map<std::string, double> params;
};

class Updater {
 public:
  virtual ~Updater() = default;
  // weight = update(weight, grad), grad being the sum of `parts` pushes; state is kept per key.
  virtual Status Update(const std::string& key, const Tensor& grad, int parts, Tensor* weight) = 0;
};

// Unknown names, unknown or out-of-range hyper-parameters are errors naming them.
StatusOr<std::unique_ptr<Updater>> MakeUpdater(const OptimizerSpec& spec);

// The same optimizers applied row by row, for row-sparse keys (MXNet's lazy update): only the
// rows a push touched change, and only their state. The arithmetic is the dense Updater's, so a
// row updated here equals the same row updated densely. Rows are contiguous runs of `n`
// elements; `state` holds state_slots() elements per weight element (sgd with momentum: its
// velocity), zero for a row never updated before. Stateless and const: callable from any thread.
class RowUpdater {
 public:
  virtual ~RowUpdater() = default;
  virtual int state_slots() const = 0;
  virtual void Update(const float* grad, int parts, float* weight, float* state,
                      int64_t n) const = 0;
  virtual void Update(const double* grad, int parts, double* weight, double* state,
                      int64_t n) const = 0;
};

StatusOr<std::unique_ptr<RowUpdater>> MakeRowUpdater(const OptimizerSpec& spec);

}  // namespace loom::kvstore
