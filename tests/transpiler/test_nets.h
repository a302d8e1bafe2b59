// The transpiler tests' model: an MLP 6-16-8-3 with softmax cross-entropy and SGD (6
// parameters), built with the C++ program builder.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "examples/program_builder.h"

namespace loom::transpiler {

struct Net {
  ProgramDesc main, startup;
};

inline Net Mlp() {
  Net n;
  examples::ProgramBuilder b(&n.main, &n.startup, 5);
  b.Data("x", {6});
  b.Data("label", {1}, proto::INT64);
  std::string h = b.FC("x", 16, "relu", "fc_0").value();
  h = b.FC(h, 8, "relu", "fc_1").value();
  std::string logits = b.FC(h, 3, "", "fc_2").value();
  std::string loss = b.SoftmaxCrossEntropyLoss(logits, "label").value();
  EXPECT_TRUE(b.MinimizeWithSGD(loss, 0.1f).ok());
  n.main.GlobalBlock()->Var(loss);
  return n;
}

}  // namespace loom::transpiler
