#include "transpiler/pass.h"

#include <algorithm>
#include <cstdio>

#include "framework/file_util.h"
#include "framework/serialization.h"
#include "framework/verifier.h"

namespace loom::transpiler {
namespace {

bool Listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Status Dump(const std::string& dir, size_t index, const std::string& pass,
            const std::vector<NamedProgram>& programs) {
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "%02zu-", index + 1);
  const std::string sub = JoinPath(dir, prefix + pass);
  LOOM_RETURN_IF_ERROR(MakeDirs(sub));
  for (const auto& p : programs) {
    std::string file = p.name;
    std::replace(file.begin(), file.end(), '/', '.');
    LOOM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(sub, file + ".txt"), ProgramToText(*p.program)));
  }
  return Status::OK();
}

}  // namespace

Status CheckPassOptions(const std::vector<PassInfo>& passes, const PassOptions& options) {
  auto find = [&](const std::string& name) -> const PassInfo* {
    for (const auto& p : passes)
      if (name == p.name) return &p;
    return nullptr;
  };
  auto names = [&] {
    std::string list;
    for (const auto& p : passes) list += StrCat(list.empty() ? "" : ", ", p.name);
    return list;
  };
  for (const auto& d : options.disabled) {
    const PassInfo* p = find(d);
    if (!p) return InvalidArgument("no pass named '", d, "' to disable (passes: ", names(), ")");
    if (!p->optional) return InvalidArgument("pass '", d, "' cannot be disabled");
  }
  for (const auto& d : options.dump_after) {
    if (d != "all" && !find(d))
      return InvalidArgument("no pass named '", d, "' to dump after (passes: ", names(),
                             ", or all)");
  }
  if (!options.dump_after.empty() && options.dump_dir.empty())
    return InvalidArgument("dumping programs after passes needs a directory to write them to");
  return Status::OK();
}

std::string DescribePasses(const std::vector<PassInfo>& passes) {
  std::string out;
  for (const auto& p : passes)
    out += StrCat("\n  ", p.name, p.optional ? " (optional)" : "", ": ", p.summary);
  return out;
}

namespace internal {

StatusOr<std::vector<PassRecord>> RunPasses(
    const std::string& pipeline, const std::vector<PassInfo>& passes,
    const std::function<StatusOr<bool>(size_t)>& run,
    const std::function<std::vector<NamedProgram>()>& programs, const PassOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckPassOptions(passes, options));
  std::vector<PassRecord> records;
  for (size_t i = 0; i < passes.size(); ++i) {
    const PassInfo& pass = passes[i];
    if (pass.optional && Listed(options.disabled, pass.name)) continue;
    StatusOr<bool> changed = run(i);
    if (!changed.ok())
      return Status(changed.status().code(), StrCat(pipeline, ": ", changed.status().message()));
    records.push_back(PassRecord{pass.name, changed.value()});
    const std::vector<NamedProgram> now = programs();
    for (const auto& p : now) {
      Status st = VerifyProgram(*p.program);
      if (!st.ok())
        return Status(st.code(), StrCat(pipeline, ": after pass '", pass.name, "', the ", p.name,
                                        " program does not verify: ", st.message()));
    }
    if (Listed(options.dump_after, "all") || Listed(options.dump_after, pass.name))
      LOOM_RETURN_IF_ERROR(Dump(options.dump_dir, i, pass.name, now)
                               .WithContext(StrCat("dumping the programs after ", pass.name)));
  }
  return records;
}

}  // namespace internal
}  // namespace loom::transpiler
