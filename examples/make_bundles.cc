// loom_make_examples OUT_DIR [--seed N]: writes two training bundles that `loom run` can train:
//   OUT_DIR/linear_regression   y = x·w + b + noise, x [1024, 13]; fc(13 -> 1), mean absolute error
//   OUT_DIR/softmax_classifier  4 Gaussian blobs in 20-D, 2048 samples; MLP 20-64-4 with relu
// Each holds startup.pb, main.pb, bundle.pbtxt and data/*.npy (see docs/FORMATS.md).
#include <google/protobuf/text_format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "examples/program_builder.h"
#include "framework/file_util.h"
#include "framework/serialization.h"

namespace loom::examples {
namespace {

Tensor Floats(DDim dims) {
  Tensor t(proto::FP32, dims);
  t.mutable_data<float>(Place::CPU());
  return t;
}

Status WriteBundle(const std::string& dir, const ProgramDesc& main, const ProgramDesc& startup,
                   const std::vector<std::pair<std::string, Tensor>>& data,
                   const std::string& fetch, int64_t batch, const std::string& description) {
  LOOM_RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "data")));
  LOOM_RETURN_IF_ERROR(SaveProgram(main, JoinPath(dir, "main.pb")));
  LOOM_RETURN_IF_ERROR(SaveProgram(startup, JoinPath(dir, "startup.pb")));
  proto::BundleManifest manifest;
  for (const auto& [name, tensor] : data) {
    std::string rel = "data/" + name + ".npy";
    LOOM_RETURN_IF_ERROR(SaveNpy(tensor, JoinPath(dir, rel)));
    auto* f = manifest.add_feeds();
    f->set_name(name);
    f->set_file(rel);
  }
  manifest.add_fetches(fetch);
  manifest.set_batch_size(batch);
  manifest.set_description(description);
  std::string text;
  google::protobuf::TextFormat::PrintToString(manifest, &text);
  return WriteFileAtomic(JoinPath(dir, "bundle.pbtxt"), text);
}

Status LinearRegression(const std::string& dir, int seed) {
  const int64_t n = 1024, d = 13;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> w(d);
  for (auto& v : w) v = uni(rng);
  Tensor x = Floats(DDim{n, d}), y = Floats(DDim{n, 1});
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0.5f;
    for (int64_t j = 0; j < d; ++j) {
      float v = normal(rng);
      x.data<float>()[i * d + j] = v;
      acc += v * w[j];
    }
    y.data<float>()[i] = acc + 0.01f * normal(rng);
  }
  ProgramDesc main, startup;
  ProgramBuilder b(&main, &startup, seed);
  b.Data("x", {d});
  b.Data("y", {1});
  LOOM_ASSIGN_OR_RETURN(std::string pred, b.FC("x", 1, "", "fc_0"));
  LOOM_ASSIGN_OR_RETURN(std::string loss, b.MeanAbsoluteError(pred, "y"));
  LOOM_RETURN_IF_ERROR(b.MinimizeWithSGD(loss, 0.05f).status());
  return WriteBundle(dir, main, startup, {{"x", x}, {"y", y}}, loss, 64,
                     "linear regression, 13 features, mean absolute error, SGD lr 0.05");
}

Status SoftmaxClassifier(const std::string& dir, int seed) {
  const int64_t n = 2048, d = 20, classes = 4;
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centers(classes * d);
  for (auto& c : centers) c = 1.5f * normal(rng);
  Tensor x = Floats(DDim{n, d});
  Tensor label(proto::INT64, DDim{n, 1});
  int64_t* l = label.mutable_data<int64_t>(Place::CPU());
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = static_cast<int64_t>(rng() % classes);
    l[i] = c;
    for (int64_t j = 0; j < d; ++j) x.data<float>()[i * d + j] = centers[c * d + j] + normal(rng);
  }
  ProgramDesc main, startup;
  ProgramBuilder b(&main, &startup, seed);
  b.Data("x", {d});
  b.Data("label", {1}, proto::INT64);
  LOOM_ASSIGN_OR_RETURN(std::string h, b.FC("x", 64, "relu", "fc_0"));
  LOOM_ASSIGN_OR_RETURN(std::string logits, b.FC(h, classes, "", "fc_1"));
  LOOM_ASSIGN_OR_RETURN(std::string loss, b.SoftmaxCrossEntropyLoss(logits, "label"));
  LOOM_RETURN_IF_ERROR(b.MinimizeWithSGD(loss, 0.1f).status());
  return WriteBundle(dir, main, startup, {{"x", x}, {"label", label}}, loss, 64,
                     "softmax classifier: 4 Gaussian blobs in 20-D, MLP 20-64-4, SGD lr 0.1");
}

}  // namespace
}  // namespace loom::examples

int main(int argc, char** argv) {
  std::string out;
  int seed = 7;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: loom_make_examples OUT_DIR [--seed N]\n"
          "writes OUT_DIR/linear_regression and OUT_DIR/softmax_classifier bundles\n");
      return 0;
    } else if (a == "--seed") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "loom_make_examples: --seed needs a value (N)\n");
        return 2;
      }
      std::string v = argv[++i];
      char* end = nullptr;
      errno = 0;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno == ERANGE || n < 0 || n > 1000000000L) {
        std::fprintf(stderr,
                     "loom_make_examples: --seed expects an integer in [0, 1e9], got '%s'\n",
                     v.c_str());
        return 2;
      }
      seed = static_cast<int>(n);
    } else if (!a.empty() && a[0] != '-' && out.empty()) {
      out = a;
    } else {
      std::fprintf(stderr, "loom_make_examples: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "usage: loom_make_examples OUT_DIR [--seed N]\n");
    return 2;
  }
  for (auto [name, fn] :
       {std::make_pair("linear_regression", &loom::examples::LinearRegression),
        std::make_pair("softmax_classifier", &loom::examples::SoftmaxClassifier)}) {
    std::string dir = loom::JoinPath(out, name);
    loom::Status st = fn(dir, seed);
    if (!st.ok()) {
      std::fprintf(stderr, "loom_make_examples: error: %s: %s\n", name, st.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", dir.c_str());
  }
  return 0;
}
