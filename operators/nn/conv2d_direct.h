// Direct fp32 convolution kernels for CPUs with AVX2 and FMA (chosen at run time, the build has
// no -march): no im2col buffer and no GEMM call. Each register tile holds 6 output pixels x 16
// output channels (12 accumulators); the filter is repacked once per call so that the 16
// channels of one tap are one contiguous pair of vectors, and each sample's input is copied
// once into a zero-padded plane so the inner loops have no bounds checks. Used by conv2d's
// fp32 kernels (conv2d.cc) where Supported*() says so; everything else takes im2col + GEMM.
//
// LOOM_CONV_ALGO=im2col turns the direct kernels off (for comparisons and tests); unset or
// "auto" uses them where supported.
#pragma once

#include "operators/nn/conv_geom.h"

namespace loom::ops::conv_direct {

// Output = conv(Input, Filter): any stride, padding, dilation and groups.
bool SupportedForward(const ConvGeom& g);
// Input@GRAD: stride 1 and paddings of at most the dilated kernel extent minus one (then it is
// a stride-1 convolution of the padded output gradient with the flipped, transposed filter).
bool SupportedInputGrad(const ConvGeom& g);
// Filter@GRAD: any stride, padding, dilation and groups.
bool SupportedFilterGrad(const ConvGeom& g);

// x [n, c, h, w], w [m, c / groups, kh, kw] -> out [n, m, ho, wo] (every element written).
void Forward(const ConvGeom& g, const float* x, const float* w, float* out);
// dout [n, m, ho, wo], w -> dx [n, c, h, w] (every element written).
void InputGrad(const ConvGeom& g, const float* dout, const float* w, float* dx);
// x, dout -> dw [m, c / groups, kh, kw] (every element written).
void FilterGrad(const ConvGeom& g, const float* x, const float* dout, float* dw);

}  // namespace loom::ops::conv_direct
