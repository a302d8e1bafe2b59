// Executor dispatch overhead: a chain of N `scale` ops over 1-element tensors, so the time per
// op is almost entirely framework overhead (binding, run-time shape inference, kernel choice,
// call). Reported as ns per op; bench/executor/compare.sh runs PyTorch eager beside it.
#include <benchmark/benchmark.h>

#include "executor/executor.h"

namespace {

loom::ProgramDesc ScaleChain(int n) {
  loom::ProgramDesc p;
  loom::BlockDesc* b = p.GlobalBlock();
  b->Var("v0").SetDims({1});
  for (int i = 1; i <= n; ++i) {
    b->Var("v" + std::to_string(i)).SetDims({1});
    b->AppendOp("scale", {{"X", {"v" + std::to_string(i - 1)}}},
                {{"Out", {"v" + std::to_string(i)}}}, {{"scale", 1.0001f}});
  }
  return p;
}

void BM_ScaleChain(benchmark::State& state) {
  int n = static_cast<int>(state.range(0));
  loom::ProgramDesc p = ScaleChain(n);
  loom::Executor exe(loom::Place::CPU());
  auto prepared = exe.Prepare(p);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.status().ToString().c_str());
    return;
  }
  loom::Scope scope;
  loom::Tensor x(loom::proto::FP32, loom::DDim{1});
  x.mutable_data<float>(loom::Place::CPU())[0] = 1.0f;
  loom::FeedMap feeds = {{"v0", x}};
  for (auto _ : state) {
    loom::Status st = exe.Run(prepared->get(), &scope, feeds);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  // items_per_second = ops per second; compare.sh turns it into ns per op.
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());
}
BENCHMARK(BM_ScaleChain)->Arg(1000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
