#include "op_test_util.h"

#include <cmath>
#include <random>

#include "framework/backward.h"
#include "framework/verifier.h"

namespace loom::testing {

Tensor Random(DataType dt, DDim dims, uint32_t seed, double lo, double hi) {
  Tensor t(dt, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  if (dt == proto::FP64) {
    double* p = t.mutable_data<double>(Place::CPU());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  } else {
    float* p = t.mutable_data<float>(Place::CPU());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(u(rng));
  }
  return t;
}

Tensor Ints(DDim dims, std::vector<int64_t> values) {
  Tensor t(proto::INT64, dims);
  int64_t* p = t.mutable_data<int64_t>(Place::CPU());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = values[i];
  return t;
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case proto::FP32: out[i] = t.data<float>()[i]; break;
      case proto::FP64: out[i] = t.data<double>()[i]; break;
      case proto::INT32: out[i] = t.data<int32_t>()[i]; break;
      case proto::INT64: out[i] = static_cast<double>(t.data<int64_t>()[i]); break;
      case proto::BOOL: out[i] = t.data<bool>()[i]; break;
      default: out[i] = NAN;
    }
  }
  return out;
}

OpTest& OpTest::Input(const std::string& slot, Tensor t, bool no_grad) {
  inputs_.push_back(In{slot, {slot + "_in"}, {std::move(t)}, no_grad});
  return *this;
}

OpTest& OpTest::Inputs(const std::string& slot, std::vector<Tensor> ts) {
  In in{slot, {}, std::move(ts), false};
  for (size_t i = 0; i < in.values.size(); ++i) in.vars.push_back(StrCat(slot, "_in", i));
  inputs_.push_back(std::move(in));
  return *this;
}

OpTest& OpTest::Output(const std::string& slot) {
  outputs_.push_back(slot);
  return *this;
}

OpTest& OpTest::Attr(const std::string& name, Attribute value) {
  attrs_[name] = std::move(value);
  return *this;
}

OpTest& OpTest::OnPlace(const Place& place) {
  place_ = place;
  return *this;
}

ProgramDesc OpTest::BuildProgram() {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  std::vector<std::pair<std::string, std::vector<std::string>>> ins, outs;
  for (const auto& in : inputs_) {
    for (size_t i = 0; i < in.vars.size(); ++i) {
      VarDesc v = b->Var(in.vars[i]);
      v.SetDtype(in.values[i].dtype());
      v.SetDims(in.values[i].dims());
      v.SetStopGradient(in.no_grad || !IsFloatingPoint(in.values[i].dtype()));
    }
    ins.emplace_back(in.slot, in.vars);
  }
  for (const auto& o : outputs_) {
    b->Var(o + "_out");
    outs.push_back({o, {o + "_out"}});
  }
  b->AppendOp(type_, ins, outs, attrs_);
  return p;
}

FeedMap OpTest::Feeds() const {
  FeedMap feeds;
  for (const auto& in : inputs_)
    for (size_t i = 0; i < in.vars.size(); ++i) feeds[in.vars[i]] = in.values[i];
  return feeds;
}

StatusOr<std::map<std::string, Tensor>> OpTest::Forward() {
  ProgramDesc p = BuildProgram();
  LOOM_RETURN_IF_ERROR(VerifyProgram(p));
  std::vector<std::string> fetch;
  for (const auto& o : outputs_) fetch.push_back(o + "_out");
  Executor exe(place_);
  Scope scope;
  std::vector<Tensor> out;
  LOOM_RETURN_IF_ERROR(exe.Run(p, &scope, Feeds(), fetch, &out));
  std::map<std::string, Tensor> result;
  for (size_t i = 0; i < outputs_.size(); ++i) result[outputs_[i]] = out[i];
  return result;
}

StatusOr<std::vector<Tensor>> OpTest::AnalyticGrads(const std::string& out_slot, const Tensor& w) {
  const std::string out = out_slot + "_out";
  ProgramDesc train = BuildProgram();
  BlockDesc* b = train.GlobalBlock();
  b->Var("loss_mean");
  b->AppendOp("mean", {{"X", {out}}}, {{"Out", {"loss_mean"}}});
  LOOM_RETURN_IF_ERROR(InferShapes(b));
  int forward_ops = b->OpSize();
  auto pairs = AppendBackward(&train, "loss_mean");
  if (!pairs.ok()) return pairs.status();
  // Drop the seed fill_constant and mean_grad: out@GRAD comes from the feed.
  b->RemoveOp(forward_ops);
  b->RemoveOp(forward_ops);
  b->RemoveOp(forward_ops - 1);
  LOOM_RETURN_IF_ERROR(VerifyProgram(train));
  std::vector<std::string> grads;
  for (const auto& in : inputs_) {
    if (in.no_grad || !IsFloatingPoint(in.values[0].dtype())) continue;
    for (const auto& v : in.vars) grads.push_back(GradVarName(v));
  }
  Executor exe(place_);
  Scope scope;
  FeedMap feeds = Feeds();
  feeds[GradVarName(out)] = w;
  std::vector<Tensor> analytic;
  LOOM_RETURN_IF_ERROR(exe.Run(train, &scope, feeds, grads, &analytic));
  return analytic;
}

std::string OpTest::CheckGrad(const std::string& out_slot, double eps, double rtol, double atol) {
  auto fwd = Forward();
  if (!fwd.ok()) return "forward failed: " + fwd.status().ToString();
  const Tensor& y = fwd.value()[out_slot];
  // Upstream gradient W: fed directly as out@GRAD after removing the mean-loss seed ops.
  Tensor w = Random(y.dtype(), y.dims(), 4242, 0.5, 1.5);
  auto analytic_or = AnalyticGrads(out_slot, w);
  if (!analytic_or.ok()) return "backward failed: " + analytic_or.status().ToString();
  const std::vector<Tensor>& analytic = analytic_or.value();
  std::vector<std::string> grads;
  std::vector<const In*> checked;
  for (const auto& in : inputs_) {
    if (in.no_grad || !IsFloatingPoint(in.values[0].dtype())) continue;
    for (const auto& v : in.vars) grads.push_back(GradVarName(v));
    checked.push_back(&in);
  }

  std::vector<double> wv = Values(w);
  size_t k = 0;
  for (auto* in : checked) {
    for (size_t vi = 0; vi < in->vars.size(); ++vi, ++k) {
      Tensor x;
      TensorCopy(in->values[vi], Place::CPU(), &x);
      std::vector<double> got = Values(analytic[k]);
      if (static_cast<int64_t>(got.size()) != x.numel())
        return StrCat(grads[k], " has ", got.size(), " elements, input has ", x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        auto loss_at = [&](double delta) {
          Tensor xp;
          TensorCopy(x, Place::CPU(), &xp);
          if (xp.dtype() == proto::FP64)
            xp.data<double>()[i] += delta;
          else
            xp.data<float>()[i] += static_cast<float>(delta);
          OpTest probe = *this;
          for (auto& pin : probe.inputs_)
            if (pin.slot == in->slot) pin.values[vi] = xp;
          auto r = probe.Forward();
          std::vector<double> yv = Values(r.value()[out_slot]);
          double s = 0;
          for (size_t j = 0; j < yv.size(); ++j) s += yv[j] * wv[j];
          return s;
        };
        double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
        if (std::abs(got[i] - numeric) > atol + rtol * std::abs(numeric))
          return StrCat(grads[k], "[", i, "]: analytic ", got[i], " vs numeric ", numeric);
      }
    }
  }
  return "";
}

}  // namespace loom::testing
