// The attributes of the element-wise unary family (operators/math/unary.cc): leaky_relu's alpha,
// clip's min and max. Read once per call by the CPU kernels and the CUDA kernels
// (unary_cuda.cu); a plain struct, passed by value to device functors. Host code only.
#pragma once

#include "framework/attribute.h"

namespace loom::ops {

struct UnaryAttrs {
  float alpha = 0, min = 0, max = 0;
};

// The attributes an op has; the others stay 0.
inline UnaryAttrs ReadUnaryAttrs(const AttributeMap& attrs) {
  UnaryAttrs a;
  if (auto it = attrs.find("alpha"); it != attrs.end()) a.alpha = std::get<float>(it->second);
  if (auto it = attrs.find("min"); it != attrs.end()) a.min = std::get<float>(it->second);
  if (auto it = attrs.find("max"); it != attrs.end()) a.max = std::get<float>(it->second);
  return a;
}

}  // namespace loom::ops
