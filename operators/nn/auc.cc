// auc: Fluid's streaming ROC AUC. Each prediction p (the last column of Predict, in [0, 1])
// falls in bucket floor(p * num_thresholds) of StatPos (label != 0) or StatNeg; the AUC is
// the trapezoid area under the ROC curve those bucket counts trace, from the highest bucket
// down, over (positives * negatives); 0 while either count is 0.
// slide_steps = 0: StatPos / StatNeg are [num_thresholds + 1] counts over every batch seen.
// slide_steps = s > 0: they hold s windows of counts, one per recent batch, then their sum,
// then (StatPos only) the number of batches seen: [(s + 1) * (num_thresholds + 1) + 1]; each
// batch replaces the oldest window, and the AUC is that of the sum (the last s batches).
// The stat outputs are the stat inputs' variables (persistable, updated in place).
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

int64_t StatSize(int64_t thresholds, int64_t slide_steps) {
  return slide_steps == 0 ? thresholds + 1 : (slide_steps + 1) * (thresholds + 1) + 1;
}

Status AucInferShape(InferShapeContext* ctx) {
  DDim predict = ctx->InputDim("Predict"), label = ctx->InputDim("Label");
  if (predict.size() != 2)
    return ctx->Error(ctx->DescribeInput("Predict"), " must be 2-D [N, C] (class probabilities)");
  if (predict[0] >= 0 && label.numel() >= 0 && label.numel() != predict[0])
    return ctx->Error(ctx->DescribeInput("Label"), " must hold one label per row of ",
                      ctx->DescribeInput("Predict"));
  DataType ldt = ctx->InputDtype("Label");
  if (ldt != proto::INT64 && ldt != proto::INT32)
    return ctx->Error(ctx->DescribeInput("Label"), " must be int64 or int32");
  const int64_t size = StatSize(ctx->Attr<int>("num_thresholds"), ctx->Attr<int>("slide_steps"));
  for (const char* slot : {"StatPos", "StatNeg"}) {
    if (ctx->InputDtype(slot) != proto::INT64)
      return ctx->Error(ctx->DescribeInput(slot), " must be int64");
    int64_t numel = ctx->InputDim(slot).numel();
    if (numel >= 0 && numel != size)
      return ctx->Error(ctx->DescribeInput(slot), " must hold ", size,
                        " counts for num_thresholds ", ctx->Attr<int>("num_thresholds"),
                        " and slide_steps ", ctx->Attr<int>("slide_steps"));
  }
  ctx->SetOutputDim("AUC", DDim{1});
  ctx->SetOutputDtype("AUC", proto::FP64);
  ctx->ShareDimAndDtype("StatPos", "StatPosOut");
  ctx->ShareDimAndDtype("StatNeg", "StatNegOut");
  return Status::OK();
}

template <typename T>
Status CountBatch(const KernelContext& ctx, int64_t thresholds, int64_t* pos, int64_t* neg) {
  const Tensor& predict = ctx.Input("Predict");
  const Tensor& label = ctx.Input("Label");
  const int64_t n = predict.dims()[0], width = predict.dims()[1];
  for (int64_t i = 0; i < n; ++i) {
    const double p = predict.data<T>()[i * width + width - 1];
    if (!(p >= 0 && p <= 1))
      return ctx.Error("prediction ", p, " of row ", i, " is not a probability in [0, 1]");
    const int64_t bucket = static_cast<int64_t>(p * thresholds);
    const int64_t l =
        label.dtype() == proto::INT64 ? label.data<int64_t>()[i] : label.data<int32_t>()[i];
    ++(l != 0 ? pos : neg)[bucket];
  }
  return Status::OK();
}

double RocAuc(const int64_t* pos, const int64_t* neg, int64_t thresholds) {
  double area = 0, tot_pos = 0, tot_neg = 0;
  for (int64_t b = thresholds; b >= 0; --b) {
    const double prev_pos = tot_pos, prev_neg = tot_neg;
    tot_pos += pos[b];
    tot_neg += neg[b];
    area += (tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0;
  }
  return tot_pos > 0 && tot_neg > 0 ? area / tot_pos / tot_neg : 0.0;
}

// The stat output holding the stat input's counts (a copy unless they are one variable).
int64_t* StatOut(const KernelContext& ctx, const char* in, const char* out) {
  const Tensor& src = ctx.Input(in);
  Tensor* dst = ctx.Output(out);
  if (dst == &src) return dst->mutable_data<int64_t>(ctx.place());
  std::vector<int64_t> counts(src.data<int64_t>(), src.data<int64_t>() + src.numel());
  dst->Resize(src.dims());
  int64_t* d = dst->mutable_data<int64_t>(ctx.place());
  std::copy(counts.begin(), counts.end(), d);
  return d;
}

template <typename T>
Status AucKernel(const KernelContext& ctx) {
  const int64_t thresholds = ctx.Attr<int>("num_thresholds");
  const int64_t steps = ctx.Attr<int>("slide_steps");
  const int64_t bucket = thresholds + 1;
  int64_t* pos = StatOut(ctx, "StatPos", "StatPosOut");
  int64_t* neg = StatOut(ctx, "StatNeg", "StatNegOut");
  int64_t offset = 0;
  if (steps == 0) {
    LOOM_RETURN_IF_ERROR(CountBatch<T>(ctx, thresholds, pos, neg));
  } else {
    // The window this batch replaces: batch count mod slide_steps.
    const int64_t cur = (pos[(steps + 1) * bucket] % steps) * bucket;
    offset = steps * bucket;
    std::vector<int64_t> bpos(bucket, 0), bneg(bucket, 0);
    LOOM_RETURN_IF_ERROR(CountBatch<T>(ctx, thresholds, bpos.data(), bneg.data()));
    for (int64_t b = 0; b < bucket; ++b) {
      pos[offset + b] += bpos[b] - pos[cur + b];
      neg[offset + b] += bneg[b] - neg[cur + b];
      pos[cur + b] = bpos[b];
      neg[cur + b] = bneg[b];
    }
    ++pos[(steps + 1) * bucket];  // as in Fluid, StatPos alone counts the batches
  }
  Tensor* auc = ctx.Output("AUC");
  auc->Resize({1});
  *auc->mutable_data<double>(ctx.place()) = RocAuc(pos + offset, neg + offset, thresholds);
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(auc)
    .Doc(
        "Streaming ROC AUC from bucketed counts of positive and negative predictions, over "
        "every batch (slide_steps = 0) or the last slide_steps batches.")
    .Input("Predict", "class probabilities [N, C]; the last column is the positive class'")
    .Input("Label", "labels [N, 1] (non-zero: positive)")
    .Input("StatPos", "int64 bucket counts of positives (persistable)")
    .Input("StatNeg", "int64 bucket counts of negatives (persistable)")
    .Output("AUC", "float64 [1]")
    .Output("StatPosOut", "StatPos updated (the same variable)")
    .Output("StatNegOut", "StatNeg updated (the same variable)")
    .Attr<std::string>("curve", "ROC", "'ROC' (Fluid's kernel computes the ROC AUC)",
                       nn::OneOf({"ROC"}))
    .Attr<int>("num_thresholds", 4095, "buckets less one", Positive("num_thresholds"))
    .Attr<int>("slide_steps", 1, "batches in the sliding window; 0: every batch",
               NonNegative("slide_steps"))
    .KernelDtypeFrom("Predict")
    .InferShape(AucInferShape)
    .Kernel(Place::kCPU, proto::FP32, AucKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AucKernel<double>);

}  // namespace loom::ops
