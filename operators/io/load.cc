// load: Out = the tensor stored in the file `file_path` (layers.load), read when the op runs.
// The file is a tensor saved by Loom (core.save_tensor, io.save_vars' per-variable files,
// docs/FORMATS.md) or a NumPy .npy file; its dims and dtype become Out's.
#include "framework/serialization.h"
#include "operators/common.h"

namespace loom::ops {
namespace {

Status LoadInferShape(InferShapeContext* ctx) {
  if (ctx->Attr<std::string>("file_path").empty())
    return ctx->Error("attribute file_path is empty");
  return Status::OK();  // Out's dims and dtype are the file's, known when the op runs
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One kernel whatever Out's dtype: the file says it.
Status LoadKernel(const KernelContext& ctx) {
  const std::string& path = ctx.Attr<std::string>("file_path");
  auto loaded = EndsWith(path, ".npy") ? LoadNpy(path) : LoadTensor(path);
  if (!loaded.ok()) return ctx.Error("cannot load '", path, "': ", loaded.status().message());
  TensorCopy(loaded.value(), ctx.place(), ctx.Output("Out"));
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(load)
    .Doc("Out = the tensor in file_path (a Loom tensor file or a .npy), read at run time.")
    .Output("Out", "the loaded tensor")
    .Attr<std::string>("file_path", "", "the file to read")
    .InferShape(LoadInferShape)
    .Kernel(Place::kCPU, proto::FP32, LoadKernel);

}  // namespace loom::ops
