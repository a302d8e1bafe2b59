// edit_distance: the Levenshtein distance (insertions, deletions, substitutions, each 1) of
// every hypothesis sequence to its reference, optionally divided by the reference's length.
// Hyps and Refs are int64 LoD tensors [rows, 1] with the same number of sequences, or padded
// [batch, time] tensors with HypsLength / RefsLength giving each row's length. Tokens listed in
// the attribute 'tokens' are dropped from both before comparing. No gradient.
#include <algorithm>
#include <set>

#include "operators/common.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

Status EditDistanceInferShape(InferShapeContext* ctx) {
  for (const char* slot : {"Hyps", "Refs"})
    if (ctx->InputDtype(slot) != proto::INT64)
      return ctx->Error(ctx->DescribeInput(slot), " must be int64");
  if (ctx->HasInput("HypsLength") != ctx->HasInput("RefsLength"))
    return ctx->Error("HypsLength and RefsLength go together (padded Hyps and Refs)");
  DDim h = ctx->InputDim("Hyps");
  ctx->SetOutputDim("Out", DDim({ctx->HasInput("HypsLength") ? h[0] : -1, 1}));
  ctx->SetOutputDtype("Out", proto::FP32);
  ctx->SetOutputDim("SequenceNum", DDim({1}));
  ctx->SetOutputDtype("SequenceNum", proto::INT64);
  return Status::OK();
}

// The token sequences of slot: by its LoD, or by the rows of a padded tensor and their lengths.
StatusOr<std::vector<std::vector<int64_t>>> Sequences(const KernelContext& ctx, const char* slot,
                                                      const char* length_slot,
                                                      const std::set<int64_t>& drop) {
  const Tensor& t = ctx.Input(slot);
  const int64_t* v = t.data<int64_t>();
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) in v
  if (ctx.InputSize(length_slot) > 0) {
    const Tensor& len = ctx.Input(length_slot);
    if (t.dims().size() != 2)
      return ctx.Error(slot, " must be padded [batch, time] with ", length_slot, ", got ",
                       t.dims().ToString());
    const int64_t batch = t.dims()[0], time = t.dims()[1];
    if (len.numel() != batch)
      return ctx.Error(length_slot, " has ", len.numel(), " lengths for ", batch, " rows of ",
                       slot);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n =
          len.dtype() == proto::INT32 ? len.data<int32_t>()[b] : len.data<int64_t>()[b];
      if (n < 0 || n > time)
        return ctx.Error(length_slot, "[", b, "] = ", n, " is outside [0, ", time, "]");
      ranges.emplace_back(b * time, b * time + n);
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, slot));
    if (t.numel() != (t.dims().size() ? t.dims()[0] : 0))
      return ctx.Error(slot, " must be [rows, 1], got ", t.dims().ToString());
    for (size_t s = 0; s + 1 < off.size(); ++s) ranges.emplace_back(off[s], off[s + 1]);
  }
  std::vector<std::vector<int64_t>> seqs;
  for (auto [b, e] : ranges) {
    seqs.emplace_back();
    for (int64_t i = b; i < e; ++i)
      if (!drop.count(v[i])) seqs.back().push_back(v[i]);
  }
  return seqs;
}

int64_t Levenshtein(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Status EditDistanceKernel(const KernelContext& ctx) {
  const std::vector<int64_t>& tokens = ctx.Attr<std::vector<int64_t>>("tokens");
  const std::set<int64_t> drop(tokens.begin(), tokens.end());
  LOOM_ASSIGN_OR_RETURN(auto hyps, Sequences(ctx, "Hyps", "HypsLength", drop));
  LOOM_ASSIGN_OR_RETURN(auto refs, Sequences(ctx, "Refs", "RefsLength", drop));
  if (hyps.size() != refs.size())
    return ctx.Error("Hyps has ", hyps.size(), " sequences but Refs ", refs.size());
  const bool normalized = ctx.Attr<bool>("normalized");
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(hyps.size()), 1}));
  float* o = out->mutable_data<float>(ctx.place());
  for (size_t s = 0; s < hyps.size(); ++s) {
    if (normalized && refs[s].empty())
      return ctx.Error("reference sequence ", s,
                       " is empty: with normalized it has no length "
                       "to divide by");
    const double dist = static_cast<double>(Levenshtein(hyps[s], refs[s]));
    o[s] = static_cast<float>(normalized ? dist / static_cast<double>(refs[s].size()) : dist);
  }
  Tensor* num = ctx.Output("SequenceNum");
  num->Resize(DDim({1}));
  *num->mutable_data<int64_t>(ctx.place()) = static_cast<int64_t>(hyps.size());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(edit_distance)
    .Doc(
        "Out[s] = the Levenshtein distance of hypothesis s to reference s (divided by the "
        "reference's length when normalized); SequenceNum = the number of pairs. Sequences come "
        "from the LoD of Hyps / Refs ([rows, 1]) or from padded [batch, time] tensors and "
        "HypsLength / RefsLength; tokens in 'tokens' are dropped first.")
    .Input("Hyps", "int64 hypotheses: a LoD tensor [rows, 1], or [batch, time]")
    .Input("Refs", "int64 references, as Hyps")
    .Input("HypsLength", "int32 / int64 [batch] lengths of padded Hyps", false, true)
    .Input("RefsLength", "int32 / int64 [batch] lengths of padded Refs", false, true)
    .Output("Out", "float32 [sequences, 1] distances")
    .Output("SequenceNum", "int64 [1] the number of sequences")
    .Attr<bool>("normalized", false, "divide by the reference's length")
    .Attr<std::vector<int64_t>>("tokens", {}, "tokens to ignore in both")
    .KernelDtypeFrom("Hyps")
    .InferShape(EditDistanceInferShape)
    .Kernel(Place::kCPU, proto::INT64, EditDistanceKernel);

}  // namespace loom::ops
