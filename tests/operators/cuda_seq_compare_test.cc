// The CUDA kernels of sequence_conv, sequence_expand, sequence_expand_as, sequence_pad and
// sequence_unpad (operators/sequence/sequence_rows_cuda.cu) against the CPU ones
// (operators/sequence/sequence_ops.cc, sequence_lod.cc) on random inputs: the forward
// outputs with their dims and LoD, and the gradients of every float input (with their dims and
// LoD); fp32 and fp64 (and int64 X for the expands' forward), sequences of unequal lengths with
// single-row and empty ones, and every attribute variant: sequence_conv with contextStart
// negative / zero / positive, contextLength 1 and 3+, paddingTrainable (accepted, no effect) and
// only one of its gradients asked for; sequence_expand with X with and without LoD, every
// ref_level of a two-level Y and a multi-dim X; sequence_expand_as; sequence_pad with a scalar
// and a row-wide PadValue, with and without padded_length; sequence_unpad with int64 and int32
// Length. Also: the expands' gradient (a sum over copies) is the same from run to run, and the
// errors the CPU kernels report come back the same from the CUDA ones. Skips (with the reason)
// where no CUDA device is present.
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

const std::vector<DataType> kFloatTypes = {proto::FP32, proto::FP64};

std::string Name(DataType dt) { return dt == proto::FP32 ? "fp32" : "fp64"; }

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t n : v) s += (s.empty() ? "" : ",") + std::to_string(n);
  return "{" + s + "}";
}

Tensor WithLoD(Tensor t, LoD lod) {
  t.set_lod(std::move(lod));
  return t;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> off = {0};
  for (int64_t n : lengths) off.push_back(off.back() + n);
  return off;
}

// Sequences of the given lengths as a LoD tensor [rows, row...].
Tensor SeqInput(DataType dt, const std::vector<int64_t>& lengths, std::vector<int64_t> row,
                uint32_t seed) {
  const std::vector<int64_t> off = Offsets(lengths);
  row.insert(row.begin(), off.back());
  return WithLoD(Random(dt, DDim(row), seed), {off});
}

// An int64 tensor of the given dims holding 0, 1, 2, ... times 3.
Tensor Int64s(DDim dims) {
  std::vector<int64_t> v(static_cast<size_t>(dims.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 3 * static_cast<int64_t>(i) - 7;
  return Ints(dims, v);
}

Tensor Int32s(DDim dims, const std::vector<int32_t>& values) {
  Tensor t(proto::INT32, dims);
  int32_t* p = t.mutable_data<int32_t>(Place::CPU());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = values[i];
  return t;
}

// ---- sequence_conv ----

TEST(CudaSeqCompareTest, SequenceConvForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  struct Window {
    int length, start;
  };
  const std::vector<Window> windows = {
      {1, 0},  {1, -1}, {1, 2},            // one row: itself, the one before, two after
      {3, -1}, {3, 0},  {3, 2}, {3, -3},   // centred, forward, ahead, entirely behind
      {5, -2}, {4, -4}, {6, 1}, {2, -5}};  // wider than some sequences; 2, -5: all zeros for most
  const std::vector<std::vector<int64_t>> seqs = {{4, 1, 0, 3, 2}, {1}, {0, 7, 1, 0}, {2, 9, 5}};
  for (DataType dt : kFloatTypes)
    for (const auto& lengths : seqs)
      for (int64_t d : {1, 3})
        for (const Window& win : windows) {
          const int64_t m = d == 1 ? 2 : 4;
          OpTest t("sequence_conv");
          t.Input("X", SeqInput(dt, lengths, {d}, 1));
          t.Input("Filter", Random(dt, DDim{win.length * d, m}, 2));
          t.Output("Out");
          t.Attr("contextLength", win.length).Attr("contextStart", win.start);
          ExpectCudaMatchesCpu(t, {"Out"}, "Out", Tol(dt),
                               Name(dt) + " lengths " + Join(lengths) + " d " + std::to_string(d) +
                                   " contextLength " + std::to_string(win.length) +
                                   " contextStart " + std::to_string(win.start),
                               Match::kWithLoD);
        }
}

// paddingTrainable is accepted and, as on the CPU, changes nothing (zero padding); only one of
// the gradients asked for; a two-level LoD (the last level gives the sequences).
TEST(CudaSeqCompareTest, SequenceConvVariantsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  for (DataType dt : kFloatTypes) {
    for (bool trainable : {false, true}) {
      OpTest t("sequence_conv");
      t.Input("X", SeqInput(dt, {3, 1, 4}, {2}, 3));
      t.Input("Filter", Random(dt, DDim{6, 3}, 4));
      t.Output("Out");
      t.Attr("contextLength", 3).Attr("contextStart", -1).Attr("paddingTrainable", trainable);
      ExpectCudaMatchesCpu(t, {"Out"}, "Out", Tol(dt),
                           Name(dt) + (trainable ? " paddingTrainable" : " zero padding"),
                           Match::kWithLoD);
    }
    for (bool x_grad : {false, true}) {
      OpTest t("sequence_conv");
      t.Input("X", SeqInput(dt, {2, 0, 5, 1}, {3}, 5), !x_grad);
      t.Input("Filter", Random(dt, DDim{9, 2}, 6), x_grad);
      t.Output("Out");
      t.Attr("contextLength", 3).Attr("contextStart", -2);
      ExpectCudaMatchesCpu(t, {"Out"}, "Out", Tol(dt),
                           Name(dt) + (x_grad ? " X@GRAD only" : " Filter@GRAD only"),
                           Match::kWithLoD);
    }
    OpTest two("sequence_conv");
    two.Input("X", WithLoD(Random(dt, DDim{7, 2}, 7), {{0, 2, 4}, {0, 3, 3, 4, 7}}));
    two.Input("Filter", Random(dt, DDim{4, 3}, 8));
    two.Output("Out");
    two.Attr("contextLength", 2).Attr("contextStart", 0);
    ExpectCudaMatchesCpu(two, {"Out"}, "Out", Tol(dt), Name(dt) + " two LoD levels",
                         Match::kWithLoD);
  }
}

// ---- sequence_expand / sequence_expand_as ----

TEST(CudaSeqCompareTest, SequenceExpandForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  struct Case {
    std::string what;
    DDim x;
    LoD x_lod;  // empty: X without LoD (each row a sequence)
    LoD y_lod;
    int ref_level;
  };
  const std::vector<Case> cases = {
      {"X rows, repeats 2 0 3 1", DDim{4, 3}, {}, {{0, 2, 2, 5, 6}}, -1},
      {"X rows, ref_level 0", DDim{4, 3}, {}, {{0, 2, 2, 5, 6}}, 0},
      {"X rows, many repeats", DDim{3, 5}, {}, {{0, 9, 10, 17}}, -1},
      {"X rows [rows, 2, 2]", DDim{3, 2, 2}, {}, {{0, 1, 4, 6}}, -1},
      {"X sequences 1 2 0 3", DDim{6, 2}, {{0, 1, 3, 3, 6}}, {{0, 2, 2, 5, 6}}, -1},
      {"X sequences, all repeated", DDim{5, 3}, {{0, 4, 5}}, {{0, 3, 7}}, -1},
      // Y with two levels: level 0 has 2 sequences, level 1 (the last) 3.
      {"two-level Y, ref_level 0", DDim{2, 3}, {}, {{0, 2, 3}, {0, 1, 3, 6}}, 0},
      {"two-level Y, ref_level -2", DDim{2, 3}, {}, {{0, 2, 3}, {0, 1, 3, 6}}, -2},
      {"two-level Y, ref_level 1", DDim{3, 3}, {}, {{0, 2, 3}, {0, 1, 3, 6}}, 1},
      {"two-level Y, ref_level -1, X sequences",
       DDim{4, 2},
       {{0, 2, 3, 4}},
       {{0, 2, 3}, {0, 1, 3, 6}},
       -1},
  };
  for (DataType dt : kFloatTypes)
    for (const Case& c : cases) {
      Tensor x = Random(dt, c.x, 11);
      if (!c.x_lod.empty()) x.set_lod(c.x_lod);
      const int64_t y_rows = c.y_lod.back().back();
      OpTest t("sequence_expand");
      t.Input("X", x).Input("Y", WithLoD(Random(dt, DDim{y_rows, 1}, 12), c.y_lod), true);
      t.Output("Out").Attr("ref_level", c.ref_level);
      ExpectCudaMatchesCpu(t, {"Out"}, "Out", Tol(dt), Name(dt) + " " + c.what, Match::kWithLoD);
    }
  // int64 X (forward only, as on the CPU).
  for (bool x_lod : {false, true}) {
    OpTest t("sequence_expand");
    Tensor x = Int64s(DDim{3, 2});
    if (x_lod) x.set_lod({{0, 2, 2, 3}});
    t.Input("X", x).Input("Y", WithLoD(Random(proto::FP32, DDim{4, 1}, 13), {{0, 1, 3, 4}}), true);
    t.Output("Out");
    ExpectCudaMatchesCpu(t, {"Out"}, "", 0, std::string("int64 X") + (x_lod ? " with LoD" : ""),
                         Match::kWithLoD);
  }
}

TEST(CudaSeqCompareTest, SequenceExpandAsForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  struct Case {
    std::string what;
    DDim x;
    LoD x_lod;
    LoD y_lod;
  };
  const std::vector<Case> cases = {
      {"lengths 3 1 0 4", DDim{4, 3}, {}, {{0, 3, 4, 4, 8}}},
      {"one sequence", DDim{1, 2}, {}, {{0, 5}}},
      {"all empty", DDim{2, 3}, {}, {{0, 0, 0}}},
      {"[rows, 2, 3]", DDim{3, 2, 3}, {}, {{0, 2, 2, 7}}},
      {"X with LoD", DDim{3, 2}, {{0, 1, 3}}, {{0, 2, 3, 6}}},
      {"two-level Y", DDim{3, 2}, {}, {{0, 1, 3}, {0, 4, 5, 9}}},
  };
  for (DataType dt : kFloatTypes)
    for (const Case& c : cases) {
      Tensor x = Random(dt, c.x, 21);
      if (!c.x_lod.empty()) x.set_lod(c.x_lod);
      const int64_t y_rows = c.y_lod.back().back();
      OpTest t("sequence_expand_as");
      t.Input("X", x).Input("Y", WithLoD(Random(dt, DDim{y_rows, 1}, 22), c.y_lod), true);
      t.Output("Out");
      ExpectCudaMatchesCpu(t, {"Out"}, "Out", Tol(dt), Name(dt) + " " + c.what, Match::kWithLoD);
    }
  OpTest t("sequence_expand_as");
  t.Input("X", Int64s(DDim{3, 2}))
      .Input("Y", WithLoD(Random(proto::FP32, DDim{5, 1}, 23), {{0, 2, 2, 5}}), true);
  t.Output("Out");
  ExpectCudaMatchesCpu(t, {"Out"}, "", 0, "int64 X", Match::kWithLoD);
}

// The gradient sums every copy of a row: the CUDA kernels give the same bits every run.
TEST(CudaSeqCompareTest, SequenceExpandGradIsDeterministic) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  std::vector<int64_t> y_off = {0};
  for (int i = 0; i < 40; ++i) y_off.push_back(y_off.back() + 1 + (i * 37) % 300);
  for (const char* op : {"sequence_expand", "sequence_expand_as"}) {
    OpTest g(op);
    g.Input("X", Random(proto::FP32, DDim{40, 33}, 31));
    g.Input("Y", WithLoD(Random(proto::FP32, DDim{y_off.back(), 1}, 32), {y_off}), true);
    g.Output("Out");
    g.OnPlace(Place::CUDA(0));
    Tensor w = Random(proto::FP32, DDim{y_off.back(), 33}, 33, -1, 1);
    auto first = g.AnalyticGrads("Out", w);
    ASSERT_TRUE(first.ok()) << op << ": " << first.status().ToString();
    for (int run = 0; run < 3; ++run) {
      auto again = g.AnalyticGrads("Out", w);
      ASSERT_TRUE(again.ok()) << op << ": " << again.status().ToString();
      EXPECT_EQ(Values(again.value()[0]), Values(first.value()[0])) << op << " run " << run;
    }
  }
}

// ---- sequence_pad / sequence_unpad ----

TEST(CudaSeqCompareTest, SequencePadForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  const std::vector<std::vector<int64_t>> seqs = {{3, 0, 1, 3}, {1}, {0, 5, 2, 0}, {6, 6}};
  const std::vector<std::vector<int64_t>> rows = {{2}, {2, 3}, {1}};  // a row's dims
  for (DataType dt : kFloatTypes)
    for (const auto& lengths : seqs)
      for (const std::vector<int64_t>& row : rows)
        for (bool row_pad : {false, true})
          for (int padded_length : {-1, 8}) {
            int64_t w = 1;
            for (int64_t n : row) w *= n;
            OpTest t("sequence_pad");
            t.Input("X", SeqInput(dt, lengths, row, 41));
            t.Input("PadValue", Random(dt, DDim{row_pad ? w : 1}, 42), true);
            t.Output("Out").Output("Length").Attr("padded_length", padded_length);
            ExpectCudaMatchesCpu(t, {"Out", "Length"}, "Out", Tol(dt),
                                 Name(dt) + " lengths " + Join(lengths) + " row " + Join(row) +
                                     (row_pad ? " row-wide PadValue" : " scalar PadValue") +
                                     " padded_length " + std::to_string(padded_length),
                                 Match::kWithLoD);
          }
  // padded_length equal to the longest sequence, and a two-level LoD (the last level pads).
  for (DataType dt : kFloatTypes) {
    OpTest t("sequence_pad");
    t.Input("X", WithLoD(Random(dt, DDim{7, 2}, 43), {{0, 1, 4}, {0, 3, 3, 4, 7}}));
    t.Input("PadValue", Random(dt, DDim{1}, 44), true);
    t.Output("Out").Output("Length").Attr("padded_length", 3);
    ExpectCudaMatchesCpu(t, {"Out", "Length"}, "Out", Tol(dt), Name(dt) + " two LoD levels",
                         Match::kWithLoD);
  }
}

TEST(CudaSeqCompareTest, SequenceUnpadForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  const std::vector<std::vector<int64_t>> lengths = {{3, 0, 1, 5}, {5}, {0, 0}, {5, 5, 2}};
  const std::vector<std::vector<int64_t>> rows = {{}, {3}, {2, 2}};  // X's dims past [seqs, 5]
  for (DataType dt : kFloatTypes)
    for (const auto& ls : lengths)
      for (const std::vector<int64_t>& row : rows)
        for (bool int32 : {false, true}) {
          const int64_t seqs = static_cast<int64_t>(ls.size());
          std::vector<int64_t> dims = {seqs, 5};
          dims.insert(dims.end(), row.begin(), row.end());
          Tensor len = Ints(DDim{seqs}, ls);
          if (int32) len = Int32s(DDim{seqs}, std::vector<int32_t>(ls.begin(), ls.end()));
          OpTest t("sequence_unpad");
          t.Input("X", Random(dt, DDim(dims), 51)).Input("Length", len).Output("Out");
          ExpectCudaMatchesCpu(t, {"Out"}, "Out", Tol(dt),
                               Name(dt) + " lengths " + Join(ls) + " row " + Join(row) +
                                   (int32 ? " int32" : " int64") + " Length",
                               Match::kWithLoD);
        }
}

// ---- errors ----

TEST(CudaSeqCompareTest, ErrorsMatchCpu) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU(kNoDevice);
  for (DataType dt : kFloatTypes) {
    const std::string n = Name(dt) + " ";
    OpTest conv_no_lod("sequence_conv");
    conv_no_lod.Input("X", Random(dt, DDim{4, 2}, 61)).Input("Filter", Random(dt, DDim{6, 2}, 62));
    conv_no_lod.Output("Out").Attr("contextLength", 3);
    ExpectSameError(conv_no_lod, "has no LoD", n + "sequence_conv without LoD");

    OpTest conv_stride("sequence_conv");
    conv_stride.Input("X", SeqInput(dt, {2, 2}, {2}, 63))
        .Input("Filter", Random(dt, DDim{6, 2}, 64));
    conv_stride.Output("Out").Attr("contextLength", 3).Attr("contextStride", 2);
    ExpectSameError(conv_stride, "contextStride must be 1", n + "contextStride 2");

    OpTest conv_filter("sequence_conv");
    conv_filter.Input("X", SeqInput(dt, {2, 2}, {2}, 63))
        .Input("Filter", Random(dt, DDim{5, 2}, 64));
    conv_filter.Output("Out").Attr("contextLength", 3);
    ExpectSameError(conv_filter, "must have contextLength * D", n + "Filter rows");

    OpTest exp_no_lod("sequence_expand");
    exp_no_lod.Input("X", Random(dt, DDim{2, 2}, 65)).Input("Y", Random(dt, DDim{3, 1}, 66), true);
    exp_no_lod.Output("Out");
    ExpectSameError(exp_no_lod, "input Y has no LoD", n + "sequence_expand, Y without LoD");

    OpTest exp_level("sequence_expand");
    exp_level.Input("X", Random(dt, DDim{2, 2}, 65))
        .Input("Y", WithLoD(Random(dt, DDim{3, 1}, 66), {{0, 1, 3}}), true);
    exp_level.Output("Out").Attr("ref_level", 1);
    ExpectSameError(exp_level, "ref_level 1 is not a level", n + "ref_level past Y's levels");

    OpTest exp_count("sequence_expand");
    exp_count.Input("X", Random(dt, DDim{3, 2}, 65))
        .Input("Y", WithLoD(Random(dt, DDim{3, 1}, 66), {{0, 1, 3}}), true);
    exp_count.Output("Out");
    ExpectSameError(exp_count, "X has 3 sequences, Y's level 0 has 2", n + "sequence counts");

    OpTest as_rows("sequence_expand_as");
    as_rows.Input("X", Random(dt, DDim{3, 2}, 67))
        .Input("Y", WithLoD(Random(dt, DDim{3, 1}, 68), {{0, 1, 3}}), true);
    as_rows.Output("Out");
    ExpectSameError(as_rows, "X has 3 rows, Y 2 sequences", n + "sequence_expand_as rows");

    OpTest as_no_lod("sequence_expand_as");
    as_no_lod.Input("X", Random(dt, DDim{3, 2}, 67)).Input("Y", Random(dt, DDim{3, 1}, 68), true);
    as_no_lod.Output("Out");
    ExpectSameError(as_no_lod, "input Y has no LoD", n + "sequence_expand_as, Y without LoD");

    OpTest pad_no_lod("sequence_pad");
    pad_no_lod.Input("X", Random(dt, DDim{3, 2}, 69)).Input("PadValue", Random(dt, DDim{1}, 70));
    pad_no_lod.Output("Out").Output("Length");
    ExpectSameError(pad_no_lod, "has no LoD", n + "sequence_pad without LoD");

    OpTest pad_value("sequence_pad");
    pad_value.Input("X", SeqInput(dt, {1, 2}, {3}, 69)).Input("PadValue", Random(dt, DDim{2}, 70));
    pad_value.Output("Out").Output("Length");
    ExpectSameError(pad_value, "PadValue has 2 elements", n + "PadValue size");

    OpTest pad_short("sequence_pad");
    pad_short.Input("X", SeqInput(dt, {1, 4}, {3}, 69)).Input("PadValue", Random(dt, DDim{1}, 70));
    pad_short.Output("Out").Output("Length").Attr("padded_length", 3);
    ExpectSameError(pad_short, "padded_length 3 is shorter", n + "padded_length too short");

    OpTest unpad_count("sequence_unpad");
    unpad_count.Input("X", Random(dt, DDim{3, 4, 2}, 71)).Input("Length", Ints(DDim{2}, {1, 2}));
    unpad_count.Output("Out");
    ExpectSameError(unpad_count, "Length has 2 entries for 3 sequences", n + "Length size");

    OpTest unpad_dtype("sequence_unpad");
    unpad_dtype.Input("X", Random(dt, DDim{2, 4, 2}, 71))
        .Input("Length", Random(dt, DDim{2}, 72, 0, 3), true);
    unpad_dtype.Output("Out");
    ExpectSameError(unpad_dtype, "Length must be int64 or int32", n + "Length dtype");

    OpTest unpad_range("sequence_unpad");
    unpad_range.Input("X", Random(dt, DDim{2, 4, 2}, 71)).Input("Length", Ints(DDim{2}, {1, 5}));
    unpad_range.Output("Out");
    ExpectSameError(unpad_range, "Length[1] = 5 is not in [0, 4]", n + "Length past X's length");

    OpTest unpad_neg("sequence_unpad");
    unpad_neg.Input("X", Random(dt, DDim{2, 4, 2}, 71)).Input("Length", Int32s(DDim{2}, {-1, 2}));
    unpad_neg.Output("Out");
    ExpectSameError(unpad_neg, "Length[0] = -1 is not in", n + "negative int32 Length");
  }
}

}  // namespace
}  // namespace loom::testing
