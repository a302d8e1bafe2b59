// filter_by_instag: keeps the instances of Ins that carry one of Filter_tag's tags. An
// instance is a sequence of Ins (is_lod) or one row; its tags are its sequence of Ins_tag (a
// LoD tensor) or its row of Ins_tag. Out holds the kept instances in order (with their LoD when
// is_lod), LossWeight [kept, 1] ones, IndexMap [kept, 3] (out row, Ins row, rows) per kept
// instance. When none is kept, Out is one row of out_val_if_empty and LossWeight [[0]].
#include <algorithm>
#include <set>

#include "operators/common.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

Status FilterByInstagInferShape(InferShapeContext* ctx) {
  const DDim ins = ctx->InputDim("Ins");
  if (ins.size() != 2) return ctx->Error(ctx->DescribeInput("Ins"), " must be [rows, D]");
  for (const char* slot : {"Ins_tag", "Filter_tag"})
    if (ctx->InputDtype(slot) != proto::INT64)
      return ctx->Error(ctx->DescribeInput(slot), " must be int64 tags");
  ctx->SetOutputDim("Out", DDim({-1, ins[1]}));
  ctx->SetOutputDtype("Out", ctx->InputDtype("Ins"));
  ctx->SetOutputDim("LossWeight", DDim({-1, 1}));
  ctx->SetOutputDtype("LossWeight", proto::FP64);
  ctx->SetOutputDim("IndexMap", DDim({-1, 3}));
  ctx->SetOutputDtype("IndexMap", proto::INT64);
  return Status::OK();
}

// Row offsets of the instances of Ins.
StatusOr<std::vector<int64_t>> InstanceOffsets(const KernelContext& ctx) {
  if (ctx.Attr<bool>("is_lod")) return SequenceOffsets(ctx, "Ins");
  std::vector<int64_t> off;
  for (int64_t r = 0; r <= ctx.Input("Ins").dims()[0]; ++r) off.push_back(r);
  return off;
}

template <typename T>
Status FilterByInstagKernel(const KernelContext& ctx) {
  const Tensor& ins = ctx.Input("Ins");
  const Tensor& tags = ctx.Input("Ins_tag");
  const Tensor& filter = ctx.Input("Filter_tag");
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, InstanceOffsets(ctx));
  std::vector<int64_t> tag_off;
  if (tags.has_lod()) {
    LOOM_ASSIGN_OR_RETURN(tag_off, SequenceOffsets(ctx, "Ins_tag"));
  } else {
    const int64_t rows = tags.dims().size() ? tags.dims()[0] : 0;
    const int64_t w = rows ? tags.numel() / rows : 0;
    for (int64_t r = 0; r <= rows; ++r) tag_off.push_back(r * w);
  }
  if (tag_off.size() != off.size())
    return ctx.Error("Ins has ", off.size() - 1, " instances but Ins_tag tags ",
                     tag_off.size() - 1);
  const std::set<int64_t> wanted(filter.data<int64_t>(), filter.data<int64_t>() + filter.numel());
  const int64_t d = ins.dims()[1];
  std::vector<int64_t> out_off{0}, map;
  for (size_t i = 0; i + 1 < off.size(); ++i) {
    const int64_t* t = tags.data<int64_t>();
    if (std::none_of(t + tag_off[i], t + tag_off[i + 1],
                     [&](int64_t v) { return wanted.count(v) > 0; }))
      continue;
    map.insert(map.end(), {out_off.back(), off[i], off[i + 1] - off[i]});
    out_off.push_back(out_off.back() + off[i + 1] - off[i]);
  }
  const int64_t kept = static_cast<int64_t>(map.size() / 3);
  Tensor* out = ctx.Output("Out");
  Tensor* weight = ctx.Output("LossWeight");
  Tensor* index_map = ctx.Output("IndexMap");
  if (kept == 0) {
    out->Resize(DDim({1, d}));
    T* o = out->mutable_data<T>(ctx.place());
    std::fill(o, o + d, static_cast<T>(ctx.Attr<int64_t>("out_val_if_empty")));
    if (ctx.Attr<bool>("is_lod")) out->set_lod({{0, 1}});
    weight->Resize(DDim({1, 1}));
    *weight->mutable_data<double>(ctx.place()) = 0.0;
    index_map->Resize(DDim({1, 3}));
    std::fill_n(index_map->mutable_data<int64_t>(ctx.place()), 3, int64_t{0});
    return Status::OK();
  }
  out->Resize(DDim({out_off.back(), d}));
  T* o = out->mutable_data<T>(ctx.place());
  for (int64_t k = 0; k < kept; ++k)
    std::copy_n(ins.data<T>() + map[3 * k + 1] * d, map[3 * k + 2] * d, o + map[3 * k] * d);
  if (ctx.Attr<bool>("is_lod")) out->set_lod({out_off});
  weight->Resize(DDim({kept, 1}));
  std::fill_n(weight->mutable_data<double>(ctx.place()), kept, 1.0);
  index_map->Resize(DDim({kept, 3}));
  std::copy(map.begin(), map.end(), index_map->mutable_data<int64_t>(ctx.place()));
  return Status::OK();
}

// Ins@GRAD = zeros with Out@GRAD's rows back at the rows they came from.
template <typename T>
Status FilterByInstagGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Ins@GRAD");
  if (!dx) return Status::OK();
  const Tensor& ins = ctx.Input("Ins");
  const Tensor& map = ctx.Input("IndexMap");
  const Tensor& weight = ctx.Input("LossWeight");
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const int64_t d = ins.dims()[1];
  dx->Resize(ins.dims());
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + ins.numel(), T(0));
  const bool empty = weight.numel() == 1 && weight.data<double>()[0] == 0.0;
  if (!empty) {
    const int64_t* m = map.data<int64_t>();
    for (int64_t k = 0; k < map.dims()[0]; ++k)
      std::copy_n(g + m[3 * k] * d, m[3 * k + 2] * d, o + m[3 * k + 1] * d);
  }
  dx->set_lod(ins.lod());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(filter_by_instag)
    .Doc(
        "Out = the instances of Ins (sequences when is_lod, else rows) whose tags in Ins_tag "
        "meet Filter_tag; LossWeight = ones per kept instance; IndexMap = (out row, Ins row, "
        "rows) per kept instance. None kept: Out = one row of out_val_if_empty, LossWeight = "
        "[[0]].")
    .Input("Ins", "[rows, D] instances (a LoD tensor when is_lod)")
    .Input("Ins_tag", "int64 tags per instance: a LoD tensor [tags, 1], or one row each")
    .Input("Filter_tag", "int64 [n] the tags to keep")
    .Output("Out", "the kept instances")
    .Output("LossWeight", "float64 [kept, 1] (as Fluid's)")
    .Output("IndexMap", "int64 [kept, 3]")
    .Attr<bool>("is_lod", true, "instances are Ins's sequences (else its rows)")
    .Attr<int64_t>("out_val_if_empty", 0, "Out's value when nothing is kept")
    .SetsLoD()
    .InferShape(FilterByInstagInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"Ins", "IndexMap", "LossWeight", "Out@GRAD"}, {"Ins"})};
    })
    .KernelDtypeFrom("Ins")
    .Kernel(Place::kCPU, proto::FP32, FilterByInstagKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, FilterByInstagKernel<double>)
    .Kernel(Place::kCPU, proto::INT64, FilterByInstagKernel<int64_t>);

LOOM_REGISTER_OP(filter_by_instag_grad)
    .Doc("Ins@GRAD = zeros with Out@GRAD's rows at the rows of Ins they came from.")
    .Input("Ins", "forward Ins")
    .Input("IndexMap", "forward IndexMap")
    .Input("LossWeight", "forward LossWeight")
    .Input("Out@GRAD", "gradient of Out")
    .Output("Ins@GRAD", "gradient of Ins", false, true)
    .AttrsFrom("filter_by_instag")
    .SetsLoD()
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, FilterByInstagGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, FilterByInstagGradKernel<double>);

}  // namespace loom::ops
