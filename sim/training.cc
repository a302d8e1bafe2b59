#include "sim/training.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace loom::sim {

uint64_t ModelSpec::parameters() const {
  uint64_t n = 0;
  for (const GradientSpec& g : gradients) n += g.elements;
  return n;
}

double ModelSpec::flops_per_sample() const {
  double f = 0;
  for (const GradientSpec& g : gradients) f += g.flops;
  return f;
}

namespace {

// Layers are listed in forward order while building; the model keeps backward order.
class Builder {
 public:
  // A weight of `elements` whose layer costs `flops` forward FLOPs per sample.
  void Add(const std::string& name, uint64_t elements, double flops = 0) {
    forward_.push_back(GradientSpec{name, elements, flops});
  }
  // conv k x k, cin -> cout, output h x w; optional bias.
  void Conv(const std::string& name, int k, int cin, int cout, int h, int w, bool bias) {
    const uint64_t weights = uint64_t(k) * k * cin * cout;
    Add(name + ".weight", weights, 2.0 * weights * h * w);
    if (bias) Add(name + ".bias", cout);
  }
  // conv kh x kw without bias followed by batch norm (torchvision's BasicConv2d).
  void ConvBn(const std::string& name, int kh, int kw, int cin, int cout, int h, int w) {
    const uint64_t weights = uint64_t(kh) * kw * cin * cout;
    Add(name + ".conv.weight", weights, 2.0 * weights * h * w);
    Norm(name + ".bn", cout);
  }
  void Norm(const std::string& name, int c) {
    Add(name + ".weight", c);
    Add(name + ".bias", c);
  }
  void Linear(const std::string& name, int in, int out, double tokens = 1, bool bias = true) {
    const uint64_t weights = uint64_t(in) * out;
    Add(name + ".weight", weights, 2.0 * weights * tokens);
    if (bias) Add(name + ".bias", out);
  }
  std::vector<GradientSpec> Backward() const {
    return std::vector<GradientSpec>(forward_.rbegin(), forward_.rend());
  }

 private:
  std::vector<GradientSpec> forward_;
};

// ResNet-50 v1.5 (torchvision's layout: the stride in each stage's first 3x3 convolution).
std::vector<GradientSpec> ResNet50() {
  Builder b;
  b.Conv("conv1", 7, 3, 64, 112, 112, false);
  b.Norm("bn1", 64);
  int in = 64, size = 56;
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    for (int i = 0; i < blocks[stage]; ++i) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      const int in_size = size;
      const int out_size = (i == 0 && stage > 0) ? size / 2 : size;
      b.Conv(p + ".conv1", 1, in, planes, in_size, in_size, false);
      b.Norm(p + ".bn1", planes);
      b.Conv(p + ".conv2", 3, planes, planes, out_size, out_size, false);
      b.Norm(p + ".bn2", planes);
      b.Conv(p + ".conv3", 1, planes, planes * 4, out_size, out_size, false);
      b.Norm(p + ".bn3", planes * 4);
      if (i == 0) {
        b.Conv(p + ".downsample.0", 1, in, planes * 4, out_size, out_size, false);
        b.Norm(p + ".downsample.1", planes * 4);
      }
      in = planes * 4;
      size = out_size;
    }
  }
  b.Linear("fc", 2048, 1000);
  return b.Backward();
}

// VGG-16 (configuration D) with biases, 224 x 224 input.
std::vector<GradientSpec> Vgg16() {
  Builder b;
  const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
  int in = 3, size = 224, index = 0;
  for (int c : cfg) {
    if (c == 0) {
      size /= 2;
      ++index;
      continue;
    }
    b.Conv("features." + std::to_string(index++), 3, in, c, size, size, true);
    in = c;
  }
  b.Linear("classifier.0", 512 * 7 * 7, 4096);
  b.Linear("classifier.3", 4096, 4096);
  b.Linear("classifier.6", 4096, 1000);
  return b.Backward();
}

// Inception-v3 (torchvision's layout, 299 x 299 input, with the auxiliary classifier).
std::vector<GradientSpec> InceptionV3() {
  Builder b;
  b.ConvBn("Conv2d_1a_3x3", 3, 3, 3, 32, 149, 149);
  b.ConvBn("Conv2d_2a_3x3", 3, 3, 32, 32, 147, 147);
  b.ConvBn("Conv2d_2b_3x3", 3, 3, 32, 64, 147, 147);
  b.ConvBn("Conv2d_3b_1x1", 1, 1, 64, 80, 73, 73);
  b.ConvBn("Conv2d_4a_3x3", 3, 3, 80, 192, 71, 71);
  auto a = [&](const std::string& p, int in, int pool) {  // 35 x 35
    b.ConvBn(p + ".branch1x1", 1, 1, in, 64, 35, 35);
    b.ConvBn(p + ".branch5x5_1", 1, 1, in, 48, 35, 35);
    b.ConvBn(p + ".branch5x5_2", 5, 5, 48, 64, 35, 35);
    b.ConvBn(p + ".branch3x3dbl_1", 1, 1, in, 64, 35, 35);
    b.ConvBn(p + ".branch3x3dbl_2", 3, 3, 64, 96, 35, 35);
    b.ConvBn(p + ".branch3x3dbl_3", 3, 3, 96, 96, 35, 35);
    b.ConvBn(p + ".branch_pool", 1, 1, in, pool, 35, 35);
  };
  a("Mixed_5b", 192, 32);
  a("Mixed_5c", 256, 64);
  a("Mixed_5d", 288, 64);
  b.ConvBn("Mixed_6a.branch3x3", 3, 3, 288, 384, 17, 17);
  b.ConvBn("Mixed_6a.branch3x3dbl_1", 1, 1, 288, 64, 35, 35);
  b.ConvBn("Mixed_6a.branch3x3dbl_2", 3, 3, 64, 96, 35, 35);
  b.ConvBn("Mixed_6a.branch3x3dbl_3", 3, 3, 96, 96, 17, 17);
  auto c = [&](const std::string& p, int c7) {  // 17 x 17, 768 channels in
    b.ConvBn(p + ".branch1x1", 1, 1, 768, 192, 17, 17);
    b.ConvBn(p + ".branch7x7_1", 1, 1, 768, c7, 17, 17);
    b.ConvBn(p + ".branch7x7_2", 1, 7, c7, c7, 17, 17);
    b.ConvBn(p + ".branch7x7_3", 7, 1, c7, 192, 17, 17);
    b.ConvBn(p + ".branch7x7dbl_1", 1, 1, 768, c7, 17, 17);
    b.ConvBn(p + ".branch7x7dbl_2", 7, 1, c7, c7, 17, 17);
    b.ConvBn(p + ".branch7x7dbl_3", 1, 7, c7, c7, 17, 17);
    b.ConvBn(p + ".branch7x7dbl_4", 7, 1, c7, c7, 17, 17);
    b.ConvBn(p + ".branch7x7dbl_5", 1, 7, c7, 192, 17, 17);
    b.ConvBn(p + ".branch_pool", 1, 1, 768, 192, 17, 17);
  };
  c("Mixed_6b", 128);
  c("Mixed_6c", 160);
  c("Mixed_6d", 160);
  c("Mixed_6e", 192);
  b.ConvBn("AuxLogits.conv0", 1, 1, 768, 128, 5, 5);
  b.ConvBn("AuxLogits.conv1", 5, 5, 128, 768, 1, 1);
  b.Linear("AuxLogits.fc", 768, 1000);
  b.ConvBn("Mixed_7a.branch3x3_1", 1, 1, 768, 192, 17, 17);
  b.ConvBn("Mixed_7a.branch3x3_2", 3, 3, 192, 320, 8, 8);
  b.ConvBn("Mixed_7a.branch7x7x3_1", 1, 1, 768, 192, 17, 17);
  b.ConvBn("Mixed_7a.branch7x7x3_2", 1, 7, 192, 192, 17, 17);
  b.ConvBn("Mixed_7a.branch7x7x3_3", 7, 1, 192, 192, 17, 17);
  b.ConvBn("Mixed_7a.branch7x7x3_4", 3, 3, 192, 192, 8, 8);
  auto e = [&](const std::string& p, int in) {  // 8 x 8
    b.ConvBn(p + ".branch1x1", 1, 1, in, 320, 8, 8);
    b.ConvBn(p + ".branch3x3_1", 1, 1, in, 384, 8, 8);
    b.ConvBn(p + ".branch3x3_2a", 1, 3, 384, 384, 8, 8);
    b.ConvBn(p + ".branch3x3_2b", 3, 1, 384, 384, 8, 8);
    b.ConvBn(p + ".branch3x3dbl_1", 1, 1, in, 448, 8, 8);
    b.ConvBn(p + ".branch3x3dbl_2", 3, 3, 448, 384, 8, 8);
    b.ConvBn(p + ".branch3x3dbl_3a", 1, 3, 384, 384, 8, 8);
    b.ConvBn(p + ".branch3x3dbl_3b", 3, 1, 384, 384, 8, 8);
    b.ConvBn(p + ".branch_pool", 1, 1, in, 192, 8, 8);
  };
  e("Mixed_7b", 1280);
  e("Mixed_7c", 2048);
  b.Linear("fc", 2048, 1000);
  return b.Backward();
}

// BERT-large (24 layers, hidden 1024, 16 heads, FFN 4096, vocabulary 30522) with the pooler, at
// sequence length 128 (pre-training phase 1): FLOPs count the matrix products per sequence.
std::vector<GradientSpec> BertLarge() {
  constexpr int kHidden = 1024, kFfn = 4096, kLayers = 24, kSeq = 128;
  Builder b;
  b.Add("embeddings.word", uint64_t{30522} * kHidden);
  b.Add("embeddings.position", uint64_t{512} * kHidden);
  b.Add("embeddings.token_type", uint64_t{2} * kHidden);
  b.Norm("embeddings.norm", kHidden);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "layer" + std::to_string(l);
    for (const char* m : {".query", ".key", ".value", ".attention_output"})
      b.Linear(p + m, kHidden, kHidden, kSeq);
    b.Norm(p + ".attention_norm", kHidden);
    b.Linear(p + ".intermediate", kHidden, kFfn, kSeq);
    b.Linear(p + ".output", kFfn, kHidden, kSeq);
    b.Norm(p + ".output_norm", kHidden);
  }
  b.Linear("pooler", kHidden, kHidden, 1);
  return b.Backward();
}

}  // namespace

std::vector<std::string> BuiltinModelNames() {
  return {"resnet50", "vgg16", "inception-v3", "bert-large"};
}

StatusOr<ModelSpec> BuiltinModel(const std::string& name) {
  ModelSpec m;
  m.name = name;
  // Published: NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX-1 (V100 16 GB), one
  // GPU, mixed precision, batch 256: 1200 img/s (8 GPUs: 8322 img/s, 6.93x).
  constexpr double kResNetSamples = 1200;
  if (name == "resnet50") {
    m.gradients = ResNet50();
    m.batch_per_device = 256;
    m.samples_per_s = kResNetSamples;
    m.device = "V100 16GB, mixed precision";
    m.source =
        "NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX-1 16GB: 1 GPU 1200 img/s, "
        "8 GPUs 8322 img/s (mixed precision)";
  } else if (name == "vgg16" || name == "inception-v3" || name == "bert-large") {
    m.gradients = name == "vgg16" ? Vgg16() : name == "inception-v3" ? InceptionV3() : BertLarge();
    m.batch_per_device = name == "bert-large" ? 32 : name == "vgg16" ? 64 : 128;
    // Derived, not published: the FLOP rate ResNet-50's published throughput implies, applied to
    // this model's FLOPs.
    const double resnet_rate = kResNetSamples * [] {
      ModelSpec r;
      r.gradients = ResNet50();
      return r.flops_per_sample();
    }();
    m.samples_per_s = resnet_rate / m.flops_per_sample();
    m.device = "V100 16GB, mixed precision (derived)";
    m.source =
        "derived: the FLOP rate of ResNet-50's published V100 throughput (DeepLearningExamples) "
        "applied to this model's forward FLOPs";
  } else {
    std::string known;
    for (const std::string& n : BuiltinModelNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown model '", name, "' (built in: ", known,
                           "; or a JSON file, docs/SIMULATOR.md)");
  }
  return m;
}

StatusOr<ModelSpec> ParseModelJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("model: not a JSON object");
  ModelSpec m;
  auto string_field = [&](const char* key, std::string* out) -> Status {
    if (!j.contains(key)) return Status::OK();
    if (!j[key].is_string()) return InvalidArgument("model: \"", key, "\" must be a string");
    *out = j[key].get<std::string>();
    return Status::OK();
  };
  LOOM_RETURN_IF_ERROR(string_field("name", &m.name));
  LOOM_RETURN_IF_ERROR(string_field("source", &m.source));
  LOOM_RETURN_IF_ERROR(string_field("device", &m.device));
  if (!j.contains("batch_per_device") || !j["batch_per_device"].is_number_integer() ||
      j["batch_per_device"].get<int64_t>() < 1 || j["batch_per_device"].get<int64_t>() > 1 << 24)
    return InvalidArgument("model: \"batch_per_device\" must be an integer in 1..16777216");
  m.batch_per_device = static_cast<int>(j["batch_per_device"].get<int64_t>());
  if (!j.contains("samples_per_s") || !j["samples_per_s"].is_number() ||
      !(j["samples_per_s"].get<double>() > 0) || !std::isfinite(j["samples_per_s"].get<double>()))
    return InvalidArgument("model: \"samples_per_s\" must be a positive number");
  m.samples_per_s = j["samples_per_s"].get<double>();
  if (j.contains("dtype")) {
    const std::string t = j["dtype"].is_string() ? j["dtype"].get<std::string>() : "";
    if (t == "float32" || t == "fp32")
      m.dtype = collective::DataType::kFloat32;
    else if (t == "float16" || t == "fp16")
      m.dtype = collective::DataType::kFloat16;
    else if (t == "float64" || t == "fp64")
      m.dtype = collective::DataType::kFloat64;
    else
      return InvalidArgument("model: \"dtype\" must be float32, float16 or float64");
  }
  if (!j.contains("gradients") || !j["gradients"].is_array() || j["gradients"].empty())
    return InvalidArgument("model: \"gradients\" must be a non-empty array");
  size_t i = 0;
  for (const auto& g : j["gradients"]) {
    GradientSpec spec;
    if (!g.is_object() || !g.contains("elements") || !g["elements"].is_number_integer() ||
        g["elements"].get<int64_t>() < 1)
      return InvalidArgument("model: gradients[", i, "] needs \"elements\", a positive integer");
    spec.elements = static_cast<uint64_t>(g["elements"].get<int64_t>());
    spec.name = g.contains("name") && g["name"].is_string() ? g["name"].get<std::string>()
                                                            : "g" + std::to_string(i);
    if (g.contains("flops")) {
      if (!g["flops"].is_number() || !(g["flops"].get<double>() >= 0))
        return InvalidArgument("model: gradients[", i, "].flops must be a number >= 0");
      spec.flops = g["flops"].get<double>();
    }
    m.gradients.push_back(spec);
    ++i;
  }
  return m;
}

StatusOr<ModelSpec> LoadModel(const std::string& name_or_path) {
  StatusOr<ModelSpec> builtin = BuiltinModel(name_or_path);
  if (builtin.ok()) return builtin;
  std::ifstream in(name_or_path);
  if (!in) {
    return InvalidArgument(builtin.status().message(), "; no file '", name_or_path, "' either");
  }
  std::stringstream text;
  text << in.rdbuf();
  StatusOr<ModelSpec> m = ParseModelJson(text.str());
  if (!m.ok()) return m.status().WithContext(name_or_path);
  if (m->name.empty()) m->name = name_or_path;
  return m;
}

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An op as a step ran it: its name (type), outputs, and when it began and ended (µs).
struct TimedOp {
  std::string name;
  std::vector<std::string> outputs;
  std::string vars;
  double begin = 0, end = 0;
};

// The model the ops of one or more recorded steps describe (ModelFromTimeline's rules); `who`
// names the recording in messages ("rank 0"), `what` the source ("timeline").
StatusOr<ModelSpec> ModelFromOps(std::vector<TimedOp> ops,
                                 const std::map<std::string, uint64_t>& gradients,
                                 collective::DataType dtype, int batch_per_device,
                                 const std::string& who, const std::string& what) {
  std::stable_sort(ops.begin(), ops.end(),
                   [](const TimedOp& a, const TimedOp& b) { return a.begin < b.begin; });
  // Steps start where the first op recurs.
  std::vector<size_t> starts;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].name == ops[0].name && ops[i].vars == ops[0].vars) starts.push_back(i);
  }
  starts.push_back(ops.size());
  std::vector<double> forward, backward, update;
  std::map<std::string, std::vector<double>> ready;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    const size_t first = starts[s], last = starts[s + 1];
    size_t backward_first = last;
    for (size_t i = first; i < last && backward_first == last; ++i)
      if (EndsWith(ops[i].name, "_grad")) backward_first = i;
    if (backward_first == last)
      return InvalidArgument(what, ": step ", s + 1, " of ", who,
                             " has no backward op (none named *_grad): record a training "
                             "program's run");
    const double t0 = ops[first].begin, b0 = ops[backward_first].begin;
    double backward_end = b0;
    std::map<std::string, double> written;
    for (size_t i = backward_first; i < last; ++i) {
      if (EndsWith(ops[i].name, "_grad")) backward_end = std::max(backward_end, ops[i].end);
      for (const std::string& out : ops[i].outputs)
        if (gradients.count(out)) written[out] = ops[i].end;
    }
    for (const auto& [name, elements] : gradients) {
      auto it = written.find(name);
      if (it == written.end())
        return InvalidArgument(what, ": no op of step ", s + 1, " of ", who,
                               " writes the gradient '", name, "'");
      backward_end = std::max(backward_end, it->second);
      ready[name].push_back(it->second - b0);
    }
    double step_end = backward_end;
    for (size_t i = backward_first; i < last; ++i) step_end = std::max(step_end, ops[i].end);
    forward.push_back(b0 - t0);
    backward.push_back(backward_end - b0);
    update.push_back(step_end - backward_end);
  }
  ModelSpec m;
  m.name = what;
  m.source = StrCat("measured: median of ", forward.size(), " recorded step",
                    forward.size() == 1 ? "" : "s", " of ", who);
  m.device = "the traced run's device";
  m.batch_per_device = batch_per_device;
  m.dtype = dtype;
  m.forward_us = Median(forward);
  m.backward_us = std::max(Median(backward), 1e-3);
  m.update_us = Median(update);
  for (const auto& [name, elements] : gradients) {
    GradientSpec g;
    g.name = name;
    g.elements = elements;
    g.ready_us = std::min(Median(ready[name]), m.backward_us);
    m.gradients.push_back(g);
  }
  std::stable_sort(
      m.gradients.begin(), m.gradients.end(),
      [](const GradientSpec& a, const GradientSpec& b) { return a.ready_us < b.ready_us; });
  m.samples_per_s = batch_per_device / ((m.forward_us + m.backward_us + m.update_us) * 1e-6);
  return m;
}

}  // namespace

StatusOr<ModelSpec> ModelFromTimeline(const std::string& timeline_json,
                                      const std::map<std::string, uint64_t>& gradients,
                                      collective::DataType dtype, int batch_per_device, int rank) {
  LOOM_ENFORCE(batch_per_device >= 1, "a batch of ", batch_per_device, " samples per device");
  if (gradients.empty()) return InvalidArgument("timeline: the program has no parameter gradients");
  nlohmann::json j = nlohmann::json::parse(timeline_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("traceEvents") ||
      !j["traceEvents"].is_array())
    return InvalidArgument("timeline: not a trace (a JSON object with \"traceEvents\")");
  std::vector<TimedOp> ops;
  size_t index = 0;
  for (const auto& e : j["traceEvents"]) {
    ++index;
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X") continue;
    if (!e.contains("cat") || e["cat"] != "compute") continue;
    if (!e.contains("pid") || !e["pid"].is_number_integer() || e["pid"].get<int64_t>() != rank)
      continue;
    if (!e.contains("name") || !e["name"].is_string() || !e.contains("ts") ||
        !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
      return InvalidArgument("timeline: traceEvents[", index - 1,
                             "] needs \"name\", \"ts\" and \"dur\"");
    TimedOp op;
    op.name = e["name"].get<std::string>();
    op.begin = e["ts"].get<double>();
    op.end = op.begin + e["dur"].get<double>();
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("vars") &&
        e["args"]["vars"].is_string()) {
      op.vars = e["args"]["vars"].get<std::string>();
      std::stringstream list(op.vars);
      for (std::string v; std::getline(list, v, ',');) {
        const size_t b = v.find_first_not_of(' ');
        if (b != std::string::npos) op.outputs.push_back(v.substr(b));
      }
    }
    ops.push_back(std::move(op));
  }
  if (ops.empty()) return InvalidArgument("timeline: no compute ops of rank ", rank);
  return ModelFromOps(std::move(ops), gradients, dtype, batch_per_device, StrCat("rank ", rank),
                      "timeline");
}

StatusOr<ModelSpec> ModelFromOpCosts(const std::vector<ProgramOp>& program,
                                     const std::string& cost_json,
                                     const std::map<std::string, uint64_t>& gradients,
                                     collective::DataType dtype, int batch_per_device) {
  LOOM_ENFORCE(batch_per_device >= 1, "a batch of ", batch_per_device, " samples per device");
  if (gradients.empty()) return InvalidArgument("op costs: the program has no parameter gradients");
  nlohmann::json j = nlohmann::json::parse(cost_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("op costs: not a JSON object ({\"ops\": {\"mul\": 12.5, ...}})");
  auto number = [&](const nlohmann::json& v, const std::string& where) -> StatusOr<double> {
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
      return InvalidArgument("op costs: ", where, " must be a number of microseconds >= 0");
    return v.get<double>();
  };
  double fallback = -1, grad_factor = 2;
  if (j.contains("default_us")) {
    LOOM_ASSIGN_OR_RETURN(fallback, number(j["default_us"], "\"default_us\""));
  }
  if (j.contains("grad_factor")) {
    LOOM_ASSIGN_OR_RETURN(grad_factor, number(j["grad_factor"], "\"grad_factor\""));
  }
  std::map<std::string, double> table;
  if (j.contains("ops")) {
    if (!j["ops"].is_object())
      return InvalidArgument("op costs: \"ops\" must map op types to microseconds");
    for (const auto& [type, v] : j["ops"].items()) {
      LOOM_ASSIGN_OR_RETURN(table[type], number(v, StrCat("\"ops\".\"", type, "\"")));
    }
  }
  for (const auto& [key, v] : j.items()) {
    if (key != "ops" && key != "default_us" && key != "grad_factor" && key != "source")
      return InvalidArgument("op costs: unknown key \"", key,
                             "\" (ops, default_us, grad_factor, source)");
  }
  // Ops run one after another, as one device runs a program, for their table cost each.
  std::vector<TimedOp> ops;
  double t = 0;
  for (size_t i = 0; i < program.size(); ++i) {
    const ProgramOp& p = program[i];
    double cost = -1;
    if (auto it = table.find(p.type); it != table.end()) {
      cost = it->second;
    } else if (EndsWith(p.type, "_grad")) {
      auto base = table.find(p.type.substr(0, p.type.size() - 5));
      if (base != table.end()) cost = grad_factor * base->second;
    }
    if (cost < 0) cost = fallback;
    if (cost < 0)
      return InvalidArgument("op costs: no cost for op ", i, " (", p.type,
                             ") and no \"default_us\"");
    TimedOp op;
    op.name = p.type;
    op.outputs = p.outputs;
    for (const std::string& o : p.outputs) op.vars += (op.vars.empty() ? "" : ", ") + o;
    op.vars += StrCat("#", i);  // one step: no op is taken for the next step's first
    op.begin = t;
    op.end = t += cost;
    ops.push_back(std::move(op));
  }
  if (ops.empty()) return InvalidArgument("op costs: the program has no ops");
  StatusOr<ModelSpec> m =
      ModelFromOps(std::move(ops), gradients, dtype, batch_per_device, "the program", "op costs");
  if (m.ok()) {
    m->source = j.contains("source") && j["source"].is_string()
                    ? StrCat("op cost table: ", j["source"].get<std::string>())
                    : "op cost table";
  }
  return m;
}

StatusOr<StepResult> SimulateStep(const Simulator& simulator, const ModelSpec& model,
                                  const StepOptions& options) {
  LOOM_ENFORCE(!model.gradients.empty() && model.samples_per_s > 0 && model.batch_per_device >= 1,
               "model '", model.name, "' has no gradients or no throughput");
  LOOM_ENFORCE(options.fusion_mb >= 0 && std::isfinite(options.fusion_mb), "fusion of ",
               options.fusion_mb, " MB");
  const int n = simulator.machine().size();
  const size_t elem = collective::DataTypeSize(model.dtype);
  StepResult out;
  out.devices = n;
  out.nodes = simulator.machine().nodes();
  out.compute_us = model.batch_per_device / model.samples_per_s * 1e6;
  double forward_us = out.compute_us / 3, backward_us = out.compute_us - forward_us;
  double update_us = 0;
  if (model.measured()) {
    forward_us = model.forward_us;
    backward_us = model.backward_us;
    update_us = model.update_us;
    out.compute_us = forward_us + backward_us + update_us;
  }
  // When each gradient is ready: backward spread by FLOPs (by elements when none are given).
  const double total_flops = model.flops_per_sample();
  double total_weight = 0;
  for (const GradientSpec& g : model.gradients)
    total_weight += total_flops > 0 ? g.flops : double(g.elements);
  // Buckets: consecutive gradients up to the limit together, one of the limit or more alone
  // (transpiler/buckets.h).
  const double limit = options.fusion_mb * 1e6;
  struct Bucket {
    uint64_t bytes = 0;
    double ready_us = 0;
  };
  std::vector<Bucket> buckets;
  double done = 0;
  for (const GradientSpec& g : model.gradients) {
    done += total_flops > 0 ? g.flops : double(g.elements);
    const double ready =
        model.measured() ? forward_us + g.ready_us : forward_us + backward_us * done / total_weight;
    const uint64_t bytes = g.elements * elem;
    if (buckets.empty() || limit <= 0 || buckets.back().bytes + bytes > limit || bytes >= limit) {
      buckets.push_back(Bucket{});
    }
    buckets.back().bytes += bytes;
    buckets.back().ready_us = ready;
  }
  out.buckets = static_cast<int>(buckets.size());
  double comm_end = 0;
  // A sweep from one device to many nodes keeps one algorithm name; within one node there is
  // nothing to be hierarchical about.
  const std::string algorithm =
      options.algorithm == "hierarchical" && simulator.machine().nodes() == 1 ? "auto"
                                                                              : options.algorithm;
  std::map<uint64_t, CollectiveResult> cache;
  std::map<std::string, int> used;
  for (const Bucket& b : buckets) {
    if (n == 1) break;
    auto it = cache.find(b.bytes);
    if (it == cache.end()) {
      LOOM_ASSIGN_OR_RETURN(
          CollectiveResult r,
          simulator.Simulate(collective::Collective::kAllReduce, algorithm, b.bytes));
      it = cache.emplace(b.bytes, std::move(r)).first;
    }
    ++used[it->second.algorithm];
    out.comm_us += it->second.time_us;
    comm_end = std::max(comm_end, b.ready_us) + it->second.time_us;
  }
  out.step_us = std::max(forward_us + backward_us, comm_end) + update_us;
  out.exposed_us = out.step_us - out.compute_us;
  out.samples_per_s = n * model.batch_per_device / (out.step_us * 1e-6);
  out.efficiency = out.compute_us / out.step_us;
  for (const auto& [name, count] : used) {
    out.algorithms += (out.algorithms.empty() ? "" : " ") + name + "x" + std::to_string(count);
  }
  if (out.algorithms.empty()) out.algorithms = "-";
  return out;
}

StatusOr<Machine> MachineForScale(const std::string& base, int devices) {
  LOOM_ENFORCE(devices >= 1, "a scale of ", devices, " devices");
  if (base.find(':') == std::string::npos) {
    LOOM_ASSIGN_OR_RETURN(Machine m, Machine::Load(base));
    return m.FirstDevices(devices);
  }
  LOOM_ASSIGN_OR_RETURN(ClusterSpec spec, ParseClusterSpec(base));
  const std::string& node = spec.node;
  LOOM_ASSIGN_OR_RETURN(Machine one, Machine::Load(node));
  const int per = one.size();
  if (devices <= per) return one.FirstDevices(devices);
  if (devices % per != 0) {
    return InvalidArgument(devices, " devices are not whole nodes of ", per, " (", node, ")");
  }
  spec.nodes = devices / per;
  return Machine::Cluster(spec);
}

}  // namespace loom::sim
