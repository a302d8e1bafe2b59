// loom run DIR: trains a saved program bundle.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "executor/executor.h"
#include "framework/file_util.h"
#include "framework/serialization.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/proto_text.h"

namespace loom::cli {

namespace {

Flags RunFlags() {
  return Flags(
      "run", "loom run DIR [flags]",
      "Runs DIR/startup.pb once (initializing parameters), then DIR/main.pb for --iters steps,\n"
      "feeding minibatches sliced along dim 0 from .npy files (wrapping around), and prints the\n"
      "fetched variables. Defaults for feeds, fetches and batch size come from DIR/bundle.pbtxt.",
      {
          {"iters", "N", "number of training steps", "100"},
          {"batch-size", "B", "rows per minibatch (default: bundle.pbtxt, else all rows)", ""},
          {"feed", "NAME=FILE.npy", "feed variable NAME from a .npy file", "", true},
          {"fetch", "NAME", "variable to fetch and print each step", "", true},
          {"print-every", "K", "print a progress line every K steps", "10"},
          {"place", "PLACE", "where to run: cpu:i or cuda:i", "cpu:0"},
          {"load-params", "DIR", "load parameters from DIR instead of running startup.pb", ""},
          {"save-params", "DIR", "save the persistable variables to DIR at the end", ""},
      },
      1, 1);
}

struct Feed {
  std::string name;
  std::string path;
  Tensor data;
};

Status LoadManifest(const std::string& dir, proto::BundleManifest* manifest) {
  std::string path = JoinPath(dir, "bundle.pbtxt");
  if (!FileExists(path)) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseTextProto(text, path, "a bundle manifest", manifest);
}

// Vars main reads before any op writes them, that are neither persistable nor fed.
Status CheckAllInputsProvided(const ProgramDesc& main, const std::vector<Feed>& feeds) {
  std::set<std::string> ready;
  for (const auto& f : feeds) ready.insert(f.name);
  const BlockDesc& b = *main.GlobalBlock();
  for (int i = 0; i < b.OpSize(); ++i) {
    OpDesc op = b.Op(i);
    for (const auto& slot : op.InputSlots()) {
      for (const auto& v : op.Input(slot)) {
        VarDesc vd = b.FindVar(v);
        if (ready.count(v) || (vd && vd.Persistable())) continue;
        return InvalidArgument("missing feed: var '", v, "' (input '", slot, "' of ",
                               OpLocation(op.Type(), 0, i),
                               ") is not fed and no earlier op writes it; pass --feed ", v,
                               "=FILE.npy or list it in bundle.pbtxt");
      }
    }
    for (const auto& v : op.OutputArgumentNames()) ready.insert(v);
  }
  return Status::OK();
}

Status PrepareFeeds(const std::string& dir, const Flags& flags,
                    const proto::BundleManifest& manifest, const ProgramDesc& main,
                    std::vector<Feed>* feeds) {
  std::map<std::string, std::string> paths;
  for (const auto& f : manifest.feeds())
    if (f.has_file()) paths[f.name()] = JoinPath(dir, f.file());
  for (const auto& spec : flags.GetAll("feed")) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return InvalidArgument("--feed expects NAME=FILE.npy, got '", spec, "'");
    paths[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  const BlockDesc& b = *main.GlobalBlock();
  for (const auto& [name, path] : paths) {
    VarDesc v = b.FindVar(name);
    if (!v) return NotFound("feed '", name, "' is not a variable of main.pb");
    auto t = LoadNpy(path);
    if (!t.ok()) return t.status().WithContext(StrCat("feed '", name, "'"));
    Tensor data = std::move(t).value();
    if (data.dtype() != v.Dtype())
      return InvalidArgument("feed '", name, "' from ", path, " has dtype ",
                             DataTypeName(data.dtype()), ", main.pb declares ",
                             DataTypeName(v.Dtype()));
    DDim want = v.Dims();
    bool shape_ok = data.dims().size() == want.size() && data.dims().size() > 0;
    for (int i = 1; shape_ok && i < want.size(); ++i)
      shape_ok = want[i] < 0 || want[i] == data.dims()[i];
    if (!shape_ok)
      return InvalidArgument("feed '", name, "' from ", path, " has dims ",
                             data.dims().ToString(), ", main.pb declares ", want.ToString(),
                             " (dim 0 is the batch)");
    feeds->push_back(Feed{name, path, std::move(data)});
  }
  for (size_t i = 1; i < feeds->size(); ++i)
    if ((*feeds)[i].data.dims()[0] != (*feeds)[0].data.dims()[0])
      return InvalidArgument("feeds have different numbers of rows: '", (*feeds)[0].name, "' has ",
                             (*feeds)[0].data.dims()[0], ", '", (*feeds)[i].name, "' has ",
                             (*feeds)[i].data.dims()[0]);
  return CheckAllInputsProvided(main, *feeds);
}

std::string Summarize(const Tensor& t) {
  if (t.numel() == 1) {
    double v = t.dtype() == proto::FP64   ? t.data<double>()[0]
               : t.dtype() == proto::FP32 ? t.data<float>()[0]
               : t.dtype() == proto::INT64 ? static_cast<double>(t.data<int64_t>()[0])
               : t.dtype() == proto::INT32 ? static_cast<double>(t.data<int32_t>()[0])
                                          : NAN;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return buf;
  }
  return TensorSummary(t, 4);
}

// Rows [offset, offset + batch) of data, wrapping around to row 0 past the end (a copy then;
// a view otherwise). Requires 0 <= offset < rows and 1 <= batch <= rows.
Tensor Minibatch(const Tensor& data, int64_t offset, int64_t batch) {
  const int64_t rows = data.dims()[0];
  if (offset + batch <= rows) return data.Slice(offset, offset + batch);
  DDim dims = data.dims();
  dims[0] = batch;
  Tensor out(data.dtype(), dims);
  char* dst = static_cast<char*>(out.mutable_data(Place::CPU(), data.dtype()));
  const char* src = static_cast<const char*>(data.raw_data());
  const size_t row_bytes = data.nbytes() / static_cast<size_t>(rows);
  const size_t tail = static_cast<size_t>(rows - offset) * row_bytes;
  std::memcpy(dst, src + static_cast<size_t>(offset) * row_bytes, tail);
  std::memcpy(dst + tail, src, static_cast<size_t>(batch) * row_bytes - tail);
  return out;
}

double FirstValue(const Tensor& t) {
  if (t.numel() < 1) return NAN;
  if (t.dtype() == proto::FP32) return t.data<float>()[0];
  if (t.dtype() == proto::FP64) return t.data<double>()[0];
  return NAN;
}

Status Run(const Flags& flags) {
  const std::string dir = flags.positional()[0];
  if (!IsDirectory(dir)) return NotFound("bundle directory '", dir, "' does not exist");
  LOOM_ASSIGN_OR_RETURN(int64_t iters, flags.GetInt("iters"));
  LOOM_ASSIGN_OR_RETURN(int64_t every, flags.GetInt("print-every"));
  if (iters < 0) return InvalidArgument("--iters must be >= 0, got ", iters);
  if (every <= 0) return InvalidArgument("--print-every must be > 0, got ", every);
  LOOM_ASSIGN_OR_RETURN(Place place, ParsePlace(flags.Get("place")));

  proto::BundleManifest manifest;
  LOOM_RETURN_IF_ERROR(LoadManifest(dir, &manifest));
  LOOM_ASSIGN_OR_RETURN(ProgramDesc main, LoadProgram(JoinPath(dir, "main.pb")));
  bool load = flags.Has("load-params");
  ProgramDesc startup;
  if (!load) {
    LOOM_ASSIGN_OR_RETURN(startup, LoadProgram(JoinPath(dir, "startup.pb")));
  }
  std::vector<Feed> feeds;
  LOOM_RETURN_IF_ERROR(PrepareFeeds(dir, flags, manifest, main, &feeds));
  std::vector<std::string> fetches = flags.GetAll("fetch");
  if (fetches.empty()) fetches.assign(manifest.fetches().begin(), manifest.fetches().end());
  for (const auto& f : fetches)
    if (!main.GlobalBlock()->FindVar(f)) return NotFound("fetch '", f, "' is not a variable of main.pb");

  int64_t rows = feeds.empty() ? 0 : feeds[0].data.dims()[0];
  int64_t batch = rows;
  if (flags.Has("batch-size")) {
    LOOM_ASSIGN_OR_RETURN(batch, flags.GetInt("batch-size"));
  } else if (manifest.has_batch_size()) {
    batch = manifest.batch_size();
  }
  if (!feeds.empty() && (batch <= 0 || batch > rows))
    return InvalidArgument("batch size ", batch, " must be between 1 and the ", rows,
                           " rows of the feeds");
  for (const auto& f : feeds) {
    DDim want = main.GlobalBlock()->FindVar(f.name).Dims();
    if (want[0] >= 0 && want[0] != batch)
      return InvalidArgument("batch size ", batch, " does not fit feed '", f.name,
                             "': main.pb declares dims ", want.ToString(),
                             " (pass --batch-size ", want[0], ")");
  }

  Executor exe(place);
  Scope scope;
  if (load) {
    LOOM_RETURN_IF_ERROR(LoadParams(main, &scope, flags.Get("load-params"), place));
  } else {
    LOOM_RETURN_IF_ERROR(exe.Run(startup, &scope).WithContext("startup.pb"));
  }
  LOOM_ASSIGN_OR_RETURN(auto prepared, exe.Prepare(main));

  std::printf("loom run %s: %lld iterations, batch %lld of %lld rows, %s\n", dir.c_str(),
              static_cast<long long>(iters), static_cast<long long>(batch),
              static_cast<long long>(rows), place.ToString().c_str());
  std::vector<Tensor> out;
  double first = NAN, last = NAN;
  auto t0 = std::chrono::steady_clock::now();
  auto window = t0;
  int64_t offset = 0;
  for (int64_t it = 1; it <= iters; ++it) {
    FeedMap feed;
    for (const auto& f : feeds) feed[f.name] = Minibatch(f.data, offset, batch);
    if (rows > 0) offset = (offset + batch) % rows;
    Status st = exe.Run(prepared.get(), &scope, feed, fetches, &out);
    if (!st.ok()) return st.WithContext(StrCat("iteration ", it));
    if (!out.empty()) {
      last = FirstValue(out[0]);
      if (it == 1) first = last;
    }
    if (it % every == 0 || it == iters || it == 1) {
      auto now = std::chrono::steady_clock::now();
      double secs = std::chrono::duration<double>(now - window).count();
      int64_t span = it == 1 ? 1 : (it % every == 0 ? every : it % every);
      std::string line = StrCat("iter ", it, "/", iters);
      for (size_t k = 0; k < out.size(); ++k) line += StrCat("  ", fetches[k], " ", Summarize(out[k]));
      char rate[32];
      std::snprintf(rate, sizeof(rate), "  %.1f it/s", secs > 0 ? span / secs : 0.0);
      std::printf("%s%s\n", line.c_str(), rate);
      std::fflush(stdout);
      window = now;
    }
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("done: %lld iterations in %.3f s", static_cast<long long>(iters), total);
  if (!fetches.empty() && std::isfinite(first) && std::isfinite(last)) {
    std::printf("; %s %.6g -> %.6g", fetches[0].c_str(), first, last);
    if (last > 0) std::printf(" (%.1fx lower)", first / last);
  }
  std::printf("\n");
  if (flags.Has("save-params")) {
    LOOM_RETURN_IF_ERROR(SaveParams(main, scope, flags.Get("save-params")));
    std::printf("saved parameters to %s\n", flags.Get("save-params").c_str());
  }
  return Status::OK();
}

}  // namespace

int RunCommand(int argc, char** argv) {
  Flags flags = RunFlags();
  Status parsed = flags.Parse(argc, argv);
  if (flags.help()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "loom run: %s\n", parsed.message().c_str());
    return kExitUsage;
  }
  Status st = Run(flags);
  if (!st.ok()) {
    std::fprintf(stderr, "loom run: error: %s\n", st.message().c_str());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace loom::cli
