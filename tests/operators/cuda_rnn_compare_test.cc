// The CUDA kernels of gru and gru_unit (operators/rnn/gru_cuda.cu) against the CPU ones
// (operators/rnn/gru.cc) on random inputs: the forward outputs (Hidden, BatchGate,
// BatchResetHiddenPrev / Gate, ResetHiddenPrev) with their dims and LoD, and the gradients of
// every input (Input, H0 / HiddenPrev, Weight, Bias) with their LoD; fp32 and fp64, forward and
// reverse, both update rules (origin_mode), with and without H0 and Bias, only some gradients
// asked for, every activation, sequences of unequal lengths (one of a single row, one empty),
// and the errors the CPU kernels report (no LoD, H0 / HiddenPrev of the wrong size). Skips (with
// the reason) where no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "framework/device_context.h"
#include "op_test_util.h"
#include "tests/gpu_required.h"

namespace loom::testing {
namespace {

constexpr const char* kNoDevice = "no CUDA device: CUDA kernels compiled, not run";

Tensor Scaled(DataType dt, DDim dims, uint32_t seed, double scale) {
  return Random(dt, dims, seed, -scale, scale);
}

// Sequence lengths -> a LoD input [rows, 3 * d].
Tensor SeqInput(DataType dt, const std::vector<int64_t>& lengths, int64_t d, uint32_t seed) {
  std::vector<int64_t> off = {0};
  for (int64_t n : lengths) off.push_back(off.back() + n);
  Tensor x = Random(dt, DDim{off.back(), 3 * d}, seed);
  x.set_lod({off});
  return x;
}

struct GruCase {
  std::vector<int64_t> lengths;
  int64_t d;
};

std::string Describe(DataType dt, const GruCase& c, bool reverse, bool origin, bool h0, bool bias) {
  std::string s = dt == proto::FP32 ? "fp32" : "fp64";
  s += " d " + std::to_string(c.d) + " lengths";
  for (int64_t n : c.lengths) s += " " + std::to_string(n);
  return s + (reverse ? " reverse" : "") + (origin ? " origin" : "") + (h0 ? " h0" : "") +
         (bias ? " bias" : "");
}

TEST(CudaRnnCompareTest, GruForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  const std::vector<GruCase> cases = {
      {{4, 1, 0, 3, 2}, 5},          // unequal lengths, one of a single row, one empty
      {{7, 1, 12, 3, 1, 9, 2}, 24},  // wider state, more steps
      {{1}, 3},                      // a single one-row sequence
  };
  for (DataType dt : {proto::FP32, proto::FP64})
    for (const GruCase& c : cases)
      for (bool reverse : {false, true})
        for (bool origin : {false, true})
          for (bool with_h0 : {false, true})
            for (bool with_bias : {false, true}) {
              const int64_t seqs = static_cast<int64_t>(c.lengths.size()), d = c.d;
              const double ws = 1.0 / std::sqrt(static_cast<double>(d));
              OpTest t("gru");
              t.Input("Input", SeqInput(dt, c.lengths, d, 11));
              if (with_h0) t.Input("H0", Random(dt, DDim{seqs, d}, 12));
              t.Input("Weight", Scaled(dt, DDim{d, 3 * d}, 13, ws));
              if (with_bias) t.Input("Bias", Random(dt, DDim{1, 3 * d}, 14));
              t.Output("Hidden").Output("BatchGate").Output("BatchResetHiddenPrev");
              t.Attr("is_reverse", reverse).Attr("origin_mode", origin);
              ExpectCudaMatchesCpu(t, {"Hidden", "BatchGate", "BatchResetHiddenPrev"}, "Hidden",
                                   Tol(dt), Describe(dt, c, reverse, origin, with_h0, with_bias),
                                   Match::kWithLoD);
            }
}

// Only some gradients asked for (the others' inputs marked no_grad): the kernel skips the
// work of the missing ones and still gets the asked ones right.
TEST(CudaRnnCompareTest, GruPartialGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  const int64_t d = 4;
  for (DataType dt : {proto::FP32, proto::FP64})
    for (int keep : {0, 1, 2, 3}) {  // 0: Input only, 1: H0 only, 2: Weight only, 3: Bias only
      OpTest t("gru");
      t.Input("Input", SeqInput(dt, {3, 1, 5}, d, 21), keep != 0);
      t.Input("H0", Random(dt, DDim{3, d}, 22), keep != 1);
      t.Input("Weight", Scaled(dt, DDim{d, 3 * d}, 23, 0.5), keep != 2);
      t.Input("Bias", Random(dt, DDim{1, 3 * d}, 24), keep != 3);
      t.Output("Hidden").Output("BatchGate").Output("BatchResetHiddenPrev");
      t.Attr("is_reverse", keep % 2 == 1);
      ExpectCudaMatchesCpu(
          t, {"Hidden"}, "Hidden", Tol(dt),
          std::string(dt == proto::FP32 ? "fp32" : "fp64") + " keep " + std::to_string(keep),
          Match::kWithLoD);
    }
}

TEST(CudaRnnCompareTest, GruActivationsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  const int64_t d = 3;
  const std::vector<std::pair<std::string, std::string>> acts = {
      {"tanh", "sigmoid"}, {"relu", "identity"}, {"identity", "relu"}, {"sigmoid", "linear"}};
  for (DataType dt : {proto::FP32, proto::FP64})
    for (const auto& [gate, node] : acts)
      for (bool origin : {false, true}) {
        OpTest t("gru");
        t.Input("Input", SeqInput(dt, {2, 4, 1}, d, 31));
        t.Input("H0", Random(dt, DDim{3, d}, 32));
        t.Input("Weight", Scaled(dt, DDim{d, 3 * d}, 33, 0.4));
        t.Input("Bias", Random(dt, DDim{1, 3 * d}, 34));
        t.Output("Hidden").Output("BatchGate").Output("BatchResetHiddenPrev");
        t.Attr("gate_activation", gate).Attr("activation", node).Attr("origin_mode", origin);
        ExpectCudaMatchesCpu(
            t, {"Hidden", "BatchGate", "BatchResetHiddenPrev"}, "Hidden", Tol(dt),
            (dt == proto::FP32 ? "fp32 " : "fp64 ") + gate + "/" + node + (origin ? " origin" : ""),
            Match::kWithLoD);
      }
}

TEST(CudaRnnCompareTest, GruUnitForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  for (DataType dt : {proto::FP32, proto::FP64})
    for (int64_t d : {1, 6})
      for (bool origin : {false, true})
        for (int gate : {1, 2})
          for (int node : {2, 3, 0}) {
            OpTest t("gru_unit");
            t.Input("Input", Random(dt, DDim{5, 3 * d}, 41));
            t.Input("HiddenPrev", Random(dt, DDim{5, d}, 42));
            t.Input("Weight", Scaled(dt, DDim{d, 3 * d}, 43, 0.5));
            t.Input("Bias", Random(dt, DDim{1, 3 * d}, 44));
            t.Output("Gate").Output("ResetHiddenPrev").Output("Hidden");
            t.Attr("origin_mode", origin).Attr("gate_activation", gate).Attr("activation", node);
            ExpectCudaMatchesCpu(t, {"Gate", "ResetHiddenPrev", "Hidden"}, "Hidden", Tol(dt),
                                 std::string(dt == proto::FP32 ? "fp32" : "fp64") + " d " +
                                     std::to_string(d) + (origin ? " origin" : "") + " acts " +
                                     std::to_string(gate) + "/" + std::to_string(node),
                                 Match::kWithLoD);
          }
}

TEST(CudaRnnCompareTest, ErrorsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  const int64_t d = 2;
  for (DataType dt : {proto::FP32, proto::FP64}) {
    OpTest no_lod("gru");
    no_lod.Input("Input", Random(dt, DDim{4, 3 * d}, 51));
    no_lod.Input("Weight", Random(dt, DDim{d, 3 * d}, 52));
    no_lod.Output("Hidden").Output("BatchGate").Output("BatchResetHiddenPrev");
    ExpectSameError(no_lod, "Input has no LoD", "no LoD");

    OpTest bad_h0("gru");
    bad_h0.Input("Input", SeqInput(dt, {2, 1, 3}, d, 53));
    bad_h0.Input("H0", Random(dt, DDim{2, d}, 54));  // 3 sequences
    bad_h0.Input("Weight", Random(dt, DDim{d, 3 * d}, 55));
    bad_h0.Output("Hidden").Output("BatchGate").Output("BatchResetHiddenPrev");
    ExpectSameError(bad_h0, "H0 has", "H0 size");

    OpTest bad_prev("gru_unit");
    bad_prev.Input("Input", Random(dt, DDim{3, 3 * d}, 56));
    bad_prev.Input("HiddenPrev", Random(dt, DDim{2, d}, 57));  // 3 rows
    bad_prev.Input("Weight", Random(dt, DDim{d, 3 * d}, 58));
    bad_prev.Output("Gate").Output("ResetHiddenPrev").Output("Hidden");
    ExpectSameError(bad_prev, "HiddenPrev has", "HiddenPrev size");

    OpTest bad_act("gru_unit");
    bad_act.Input("Input", Random(dt, DDim{3, 3 * d}, 56));
    bad_act.Input("HiddenPrev", Random(dt, DDim{3, d}, 57));
    bad_act.Input("Weight", Random(dt, DDim{d, 3 * d}, 58));
    bad_act.Output("Gate").Output("ResetHiddenPrev").Output("Hidden");
    bad_act.Attr("activation", 7);
    ExpectSameError(bad_act, "activations are", "activation code");
  }
}

}  // namespace
}  // namespace loom::testing
