// The output size of the resize ops (bilinear_interp, nearest_interp, trilinear_interp), shared
// by their shape inference, CPU kernels (interp.cc) and CUDA kernels (pad_interp_cuda.cu): out =
// int(in * scale) when scale > 0, else the out_d / out_h / out_w attributes; an OutSize input,
// read when the op runs, overrides both. Host code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/op_registry.h"

namespace loom::ops {

inline bool ChannelsLast(const std::string& layout) {
  return layout == "NHWC" || layout == "NDHWC";
}

// Output spatial extents for input spatial extents `in` (rank 2 or 3; -1 unknown).
inline std::vector<int64_t> InterpOutSize(const std::vector<int64_t>& in, float scale,
                                          const std::vector<int>& want) {
  std::vector<int64_t> out(in.size());
  for (size_t a = 0; a < in.size(); ++a) {
    if (scale > 0)
      out[a] = in[a] < 0 ? -1 : static_cast<int64_t>(static_cast<float>(in[a]) * scale);
    else
      out[a] = want[a];
  }
  return out;
}

template <typename Ctx>
inline std::vector<int> WantedSize(const Ctx& ctx, int rank) {
  std::vector<int> want;
  if (rank == 3) want.push_back(ctx.template Attr<int>("out_d"));
  want.push_back(ctx.template Attr<int>("out_h"));
  want.push_back(ctx.template Attr<int>("out_w"));
  return want;
}

// The dims of Out for input dims x: from OutSize when the op has it (read here), else from the
// attributes.
inline StatusOr<DDim> InterpOutDims(const KernelContext& ctx, const DDim& x) {
  const int rank = x.size() - 2;
  const int first = ChannelsLast(ctx.Attr<std::string>("data_layout")) ? 1 : 2;
  std::vector<int64_t> in;
  for (int a = 0; a < rank; ++a) in.push_back(x[first + a]);
  std::vector<int64_t> out = InterpOutSize(in, ctx.Attr<float>("scale"), WantedSize(ctx, rank));
  if (const Tensor* size = ctx.InputOrNull("OutSize")) {
    if (size->numel() != rank || size->dtype() != proto::INT32)
      return InvalidArgument(ctx.Where(), ": OutSize must hold ", rank, " int32 values, got ",
                             size->dims().ToString(), " ", DataTypeName(size->dtype()));
    std::vector<int32_t> host(rank);
    MemCopy(Place::CPU(), host.data(), size->place(), size->data<int32_t>(),
            rank * sizeof(int32_t));
    for (int a = 0; a < rank; ++a) {
      if (host[a] <= 0)
        return InvalidArgument(ctx.Where(), ": OutSize must be positive, got ", host[a],
                               " for spatial dim ", a);
      out[a] = host[a];
    }
  }
  DDim y = x;
  for (int a = 0; a < rank; ++a) y[first + a] = out[a];
  return y;
}

}  // namespace loom::ops
