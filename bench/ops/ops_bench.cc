// Operator benchmarks: the forward op, and its grad ops alone, for the rows of docs/PERF.md
// ("Operators vs PyTorch"). Every row runs a prepared one-op (or grad-ops-only) program through
// the Executor on tensors already in the scope, so the time is kernel time plus the executor's
// per-op dispatch (~0.2 µs). bench/ops/torch_ops.py times the same rows in PyTorch and
// bench/ops/compare.sh prints both side by side. Run with OPENBLAS_NUM_THREADS=2 (compare.sh
// does); Loom's own kernels use at most LOOM_NUM_THREADS (default 2) threads.
// --place=cuda:0 runs the same rows on a GPU (inputs copied there once; every timed run ends
// with the place's stream drained, so the time covers the kernels, not only their launch).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "executor/executor.h"
#include "framework/device_context.h"
#include "framework/op_registry.h"

namespace {

loom::Place g_place = loom::Place::CPU();  // --place

using loom::AttributeMap;
using loom::DDim;
using loom::Tensor;

Tensor RandomTensor(DDim dims, uint32_t seed, float lo = -1, float hi = 1) {
  Tensor t(loom::proto::FP32, dims);
  float* p = t.mutable_data<float>(loom::Place::CPU());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

Tensor Labels(int64_t n, int64_t classes, uint32_t seed) {
  Tensor t(loom::proto::INT64, DDim{n, 1});
  int64_t* p = t.mutable_data<int64_t>(loom::Place::CPU());
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(rng() % classes);
  return t;
}

// One op on given inputs. Every variable is persistable, so tensors placed in the scope stay
// there between runs and nothing is fed or fetched inside the timed loop.
struct OpCase {
  std::string type;
  std::vector<std::pair<std::string, Tensor>> inputs;  // slot -> value (var named after slot)
  std::vector<std::string> outputs;                    // slots; var named after the slot
  std::map<std::string, std::string> in_place;         // output slot -> input slot it updates
  std::set<std::string> no_grad;                       // input slots needing no gradient
  AttributeMap attrs;
};

void Declare(loom::BlockDesc* b, const std::string& name) {
  loom::VarDesc v = b->Var(name);
  v.SetPersistable(true);
}

loom::ProgramDesc ForwardProgram(const OpCase& c) {
  loom::ProgramDesc p;
  loom::BlockDesc* b = p.GlobalBlock();
  std::vector<std::pair<std::string, std::vector<std::string>>> ins, outs;
  for (const auto& [slot, t] : c.inputs) {
    loom::VarDesc v = b->Var(slot);
    v.SetPersistable(true);
    v.SetDtype(t.dtype());
    v.SetDims(t.dims());
    ins.push_back({slot, {slot}});
  }
  for (const auto& slot : c.outputs) {
    auto it = c.in_place.find(slot);
    std::string var = it == c.in_place.end() ? slot : it->second;
    Declare(b, var);
    outs.push_back({slot, {var}});
  }
  b->AppendOp(c.type, ins, outs, c.attrs);
  return p;
}

// The grad ops of the forward op alone, with the gradients of no_grad slots dropped.
loom::ProgramDesc BackwardProgram(const OpCase& c, const loom::ProgramDesc& fwd) {
  loom::ProgramDesc p = fwd;
  loom::BlockDesc* b = p.GlobalBlock();
  const loom::OpInfo* info = loom::OpRegistry::Global().Find(c.type);
  std::vector<loom::proto::OpDesc> grads = info->grad_maker(b->Op(0));
  b->RemoveOp(0);
  for (auto& g : grads) {
    loom::OpDesc op = b->AppendOp();
    *op.proto() = g;
    for (const auto& slot : c.no_grad) op.RemoveOutput(slot + loom::kGradSuffix);
    for (const auto& n : op.InputArgumentNames()) Declare(b, n);
    for (const auto& n : op.OutputArgumentNames()) Declare(b, n);
  }
  return p;
}

class OpRunner {
 public:
  // Places the inputs in the scope, runs the forward op once and, for backward, seeds the
  // output gradient of out_slot with ones.
  loom::Status Setup(const OpCase& c, bool backward, const std::string& out_slot) {
    loom::ProgramDesc fwd = ForwardProgram(c);
    for (const auto& [slot, t] : c.inputs)
      loom::TensorCopy(t, g_place, scope_.Var(slot)->GetMutable<Tensor>());
    auto fp = exe_.Prepare(fwd);
    if (!fp.ok()) return fp.status();
    fwd_ = std::move(fp.value());
    if (!backward) return loom::Status::OK();
    LOOM_RETURN_IF_ERROR(exe_.Run(fwd_.get(), &scope_));
    const Tensor& out = scope_.FindVar(out_slot)->Get<Tensor>();
    Tensor seed(out.dtype(), out.dims());
    float* s = seed.mutable_data<float>(loom::Place::CPU());
    for (int64_t i = 0; i < seed.numel(); ++i) s[i] = 1.0f;
    loom::TensorCopy(seed, g_place, scope_.Var(out_slot + loom::kGradSuffix)->GetMutable<Tensor>());
    auto bp = exe_.Prepare(BackwardProgram(c, fwd));
    if (!bp.ok()) return bp.status();
    bwd_ = std::move(bp.value());
    return loom::Status::OK();
  }
  loom::Status Run(bool backward) {
    LOOM_RETURN_IF_ERROR(exe_.Run(backward ? bwd_.get() : fwd_.get(), &scope_));
    dev_->Wait();
    return loom::Status::OK();
  }

 private:
  loom::Executor exe_{g_place};
  const loom::DeviceContext* dev_ = loom::GetDeviceContext(g_place);
  loom::Scope scope_;
  std::unique_ptr<loom::PreparedBlock> fwd_, bwd_;
};

void RunCase(benchmark::State& state, const OpCase& c, bool backward, const std::string& out_slot) {
  OpRunner r;
  loom::Status st = r.Setup(c, backward, out_slot);
  if (!st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    st = r.Run(backward);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
}

OpCase MulCase(int64_t m, int64_t k, int64_t n) {
  return {"mul", {{"X", RandomTensor({m, k}, 1)}, {"Y", RandomTensor({k, n}, 2)}}, {"Out"}};
}
OpCase MatmulCase(int64_t m, int64_t k, int64_t n) {
  return {"matmul", {{"X", RandomTensor({m, k}, 1)}, {"Y", RandomTensor({k, n}, 2)}}, {"Out"}};
}
// batch 64, 5x5 filters, "same" padding (as in the Fashion-MNIST CNN).
OpCase ConvCase(int64_t c_in, int64_t c_out, int64_t hw) {
  OpCase c{"conv2d",
           {{"Input", RandomTensor({64, c_in, hw, hw}, 1)},
            {"Filter", RandomTensor({c_out, c_in, 5, 5}, 2, -0.1f, 0.1f)}},
           {"Output"}};
  c.attrs["paddings"] = std::vector<int>{2, 2};
  if (c_in == 1) c.no_grad.insert("Input");  // the first layer's input is data
  return c;
}
OpCase SwceCase() {
  return {"softmax_with_cross_entropy",
          {{"Logits", RandomTensor({512, 1000}, 1, -3, 3)}, {"Label", Labels(512, 1000, 2)}},
          {"Softmax", "Loss"},
          {},
          {"Label"}};
}
OpCase BatchNormCase() {
  Tensor var = RandomTensor({32}, 5, 0.5f, 1.5f);
  return {"batch_norm",
          {{"X", RandomTensor({64, 32, 28, 28}, 1)},
           {"Scale", RandomTensor({32}, 2, 0.5f, 1.5f)},
           {"Bias", RandomTensor({32}, 3)},
           {"Mean", RandomTensor({32}, 4)},
           {"Variance", var}},
          {"Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"},
          {{"MeanOut", "Mean"}, {"VarianceOut", "Variance"}},
          {"Mean", "Variance"}};
}
OpCase AdamCase() {
  const int64_t n = 1 << 20;
  Tensor lr(loom::proto::FP32, DDim{1}), b1(loom::proto::FP32, DDim{1}),
      b2(loom::proto::FP32, DDim{1});
  lr.mutable_data<float>(loom::Place::CPU())[0] = 1e-6f;
  b1.mutable_data<float>(loom::Place::CPU())[0] = 0.9f;
  b2.mutable_data<float>(loom::Place::CPU())[0] = 0.999f;
  return {"adam",
          {{"Param", RandomTensor({n}, 1)},
           {"Grad", RandomTensor({n}, 2)},
           {"LearningRate", lr},
           {"Moment1", RandomTensor({n}, 3, 0, 0.1f)},
           {"Moment2", RandomTensor({n}, 4, 0, 0.1f)},
           {"Beta1Pow", b1},
           {"Beta2Pow", b2}},
          {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"},
          {{"ParamOut", "Param"},
           {"Moment1Out", "Moment1"},
           {"Moment2Out", "Moment2"},
           {"Beta1PowOut", "Beta1Pow"},
           {"Beta2PowOut", "Beta2Pow"}}};
}

// Row names are shared with torch_ops.py: "<row>/fwd" and "<row>/bwd".
#define LOOM_OP_BENCH(ROW, MAKE, OUT)                                                         \
  void BM_##ROW##_fwd(benchmark::State& s) { RunCase(s, MAKE, false, OUT); }                  \
  void BM_##ROW##_bwd(benchmark::State& s) { RunCase(s, MAKE, true, OUT); }                   \
  BENCHMARK(BM_##ROW##_fwd)->Name(#ROW "/fwd")->Unit(benchmark::kMicrosecond)->UseRealTime(); \
  BENCHMARK(BM_##ROW##_bwd)->Name(#ROW "/bwd")->Unit(benchmark::kMicrosecond)->UseRealTime()

LOOM_OP_BENCH(mul_128x784x256, MulCase(128, 784, 256), "Out");
LOOM_OP_BENCH(mul_512x1024x1024, MulCase(512, 1024, 1024), "Out");
LOOM_OP_BENCH(matmul_128x784x256, MatmulCase(128, 784, 256), "Out");
LOOM_OP_BENCH(matmul_512x1024x1024, MatmulCase(512, 1024, 1024), "Out");
LOOM_OP_BENCH(conv2d_b64_1to32_28x28_k5, ConvCase(1, 32, 28), "Output");
LOOM_OP_BENCH(conv2d_b64_32to64_14x14_k5, ConvCase(32, 64, 14), "Output");
LOOM_OP_BENCH(softmax_with_cross_entropy_512x1000, SwceCase(), "Loss");
LOOM_OP_BENCH(batch_norm_64x32x28x28, BatchNormCase(), "Y");

void BM_adam_1M(benchmark::State& s) { RunCase(s, AdamCase(), false, ""); }
BENCHMARK(BM_adam_1M)->Name("adam_1M/fwd")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // --place=PLACE (cpu:0 by default, or cuda:N) is ours; the rest goes to Google Benchmark.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--place=", 8) == 0) {
      auto place = loom::ParsePlace(argv[i] + 8);
      if (!place.ok()) {
        std::fprintf(stderr, "ops_bench: %s\n", place.status().ToString().c_str());
        return 2;
      }
      if (place->is_cuda() && place->device >= loom::CudaDeviceCount()) {
        std::fprintf(stderr, "ops_bench: %s is not available (%d CUDA devices)\n", argv[i] + 8,
                     loom::CudaDeviceCount());
        return 1;
      }
      g_place = place.value();
      continue;
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
