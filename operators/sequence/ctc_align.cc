// ctc_align: CTC's collapse of per-step labels into a transcript: within each sequence, runs of
// one label merge into one (merge_repeated) and the blank label is dropped. Input is a LoD
// tensor [rows, 1] (Output: the transcripts as a LoD tensor [rows', 1]; when every transcript
// is empty, Output is [[-1]], as in Fluid) or a padded [batch, time] tensor with InputLength
// (Output: [batch, time] padded with padding_value, and OutputLength). No gradient.
#include <algorithm>

#include "operators/common.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

Status CtcAlignInferShape(InferShapeContext* ctx) {
  const DataType dt = ctx->InputDtype("Input");
  if (dt != proto::INT32 && dt != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Input"), " must hold int32 / int64 labels");
  DDim in = ctx->InputDim("Input");
  if (ctx->HasInput("InputLength")) {
    if (in.size() != 2)
      return ctx->Error(ctx->DescribeInput("Input"), " must be padded [batch, time]");
    ctx->SetOutputDim("Output", in);
    if (ctx->HasOutput("OutputLength")) {
      ctx->SetOutputDim("OutputLength", DDim({in[0], 1}));
      ctx->SetOutputDtype("OutputLength", proto::INT64);
    }
  } else {
    if (in.size() != 2 || (in[1] >= 0 && in[1] != 1))
      return ctx->Error(ctx->DescribeInput("Input"), " must be a LoD tensor [rows, 1]");
    ctx->SetOutputDim("Output", DDim({-1, 1}));
  }
  ctx->SetOutputDtype("Output", dt);
  return Status::OK();
}

// The transcript of labels v[b, e).
template <typename T>
std::vector<T> Collapse(const T* v, int64_t b, int64_t e, T blank, bool merge) {
  std::vector<T> out;
  for (int64_t i = b; i < e; ++i) {
    if (v[i] == blank) continue;
    if (merge && i > b && v[i] == v[i - 1]) continue;
    out.push_back(v[i]);
  }
  return out;
}

template <typename T>
Status CtcAlignKernel(const KernelContext& ctx) {
  const Tensor& in = ctx.Input("Input");
  const T* v = in.data<T>();
  const T blank = static_cast<T>(ctx.Attr<int>("blank"));
  const bool merge = ctx.Attr<bool>("merge_repeated");
  Tensor* out = ctx.Output("Output");
  if (ctx.InputSize("InputLength") > 0) {
    const Tensor& len = ctx.Input("InputLength");
    const int64_t batch = in.dims()[0], time = in.dims()[1];
    if (len.numel() != batch)
      return ctx.Error("InputLength has ", len.numel(), " lengths for ", batch, " rows");
    out->Resize(in.dims());
    T* o = out->mutable_data<T>(ctx.place());
    std::fill(o, o + in.numel(), static_cast<T>(ctx.Attr<int>("padding_value")));
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n =
          len.dtype() == proto::INT32 ? len.data<int32_t>()[b] : len.data<int64_t>()[b];
      if (n < 0 || n > time)
        return ctx.Error("InputLength[", b, "] = ", n, " is outside [0, ", time, "]");
      std::vector<T> seq = Collapse(v, b * time, b * time + n, blank, merge);
      std::copy(seq.begin(), seq.end(), o + b * time);
      lengths.push_back(static_cast<int64_t>(seq.size()));
    }
    if (Tensor* ol = ctx.OutputOrNull("OutputLength")) {
      ol->Resize(DDim({batch, 1}));
      std::copy(lengths.begin(), lengths.end(), ol->mutable_data<int64_t>(ctx.place()));
    }
    return Status::OK();
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "Input"));
  if (in.dims().size() != 2 || in.dims()[1] != 1)
    return ctx.Error("Input must be a LoD tensor [rows, 1], got ", in.dims().ToString());
  std::vector<T> all;
  std::vector<int64_t> out_off{0};
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    std::vector<T> seq = Collapse(v, off[s], off[s + 1], blank, merge);
    all.insert(all.end(), seq.begin(), seq.end());
    out_off.push_back(static_cast<int64_t>(all.size()));
  }
  LoD lod = UpperLevels(in.lod());
  lod.push_back(out_off);
  if (all.empty()) all.push_back(T(-1));  // Fluid's marker for "every transcript is empty"
  out->Resize(DDim({static_cast<int64_t>(all.size()), 1}));
  std::copy(all.begin(), all.end(), out->mutable_data<T>(ctx.place()));
  out->set_lod(lod);
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(ctc_align)
    .Doc(
        "Collapses per-step labels into CTC transcripts: repeats merge (merge_repeated), blanks "
        "drop. LoD Input [rows, 1] gives a LoD Output ([[-1]] when all are empty); padded "
        "Input [batch, time] with InputLength gives Output padded with padding_value and "
        "OutputLength.")
    .Input("Input", "int32 / int64 labels: a LoD tensor [rows, 1] or padded [batch, time]")
    .Input("InputLength", "int32 / int64 [batch] lengths of a padded Input", false, true)
    .Output("Output", "the transcripts")
    .Output("OutputLength", "int64 [batch, 1] transcript lengths (padded Input)", false, true)
    .Attr<int>("blank", 0, "the blank label")
    .Attr<bool>("merge_repeated", true, "merge runs of one label")
    .Attr<int>("padding_value", 0, "fills a padded Output past each transcript")
    .SetsLoD()
    .InferShape(CtcAlignInferShape)
    .Kernel(Place::kCPU, proto::INT32, CtcAlignKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, CtcAlignKernel<int64_t>);

}  // namespace loom::ops
