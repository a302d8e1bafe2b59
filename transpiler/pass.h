// The pass runner of Loom's transpilers. A pass is a named step of a pipeline that rewrites the
// programs of a context (a pipeline's own state: its input programs, what earlier passes decided,
// and the per-rank or per-role programs once they exist) and says whether it changed them.
// After every pass the runner verifies every program of the context (framework/verifier.h) and,
// when asked, writes their text (`--dump-after NAME|all`). Optional passes can be skipped by
// name (`--disable-pass NAME`); a pipeline whose passes depend on one another declares only the
// passes that can be left out as optional.
//
// Each pipeline declares its passes once, in a table of Pass<Ctx> (name, one-line summary,
// optional, function); the CLI's --help, the docs table (checked by a test) and the manifest's
// list of passes run are all read from that table.
//
// Thread safety: a pipeline runs on the calling thread; passes share nothing global.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "framework/program_desc.h"

namespace loom::transpiler {

struct PassInfo {
  const char* name;
  const char* summary;
  bool optional;  // may be skipped with --disable-pass
};

// A program of a context under the name dumps and verifier errors use ("main",
// "rank1/startup").
struct NamedProgram {
  std::string name;
  const ProgramDesc* program;
};

struct PassOptions {
  std::vector<std::string> disabled;    // optional passes to skip
  std::vector<std::string> dump_after;  // pass names, or "all"
  // Dumps go to DIR/NN-PASS/NAME.txt (NN: the pass's position, NAME: the program's name with
  // '/' as '.'); the text is framework/serialization.h's ProgramToText.
  std::string dump_dir;
};

// What a pipeline run did, pass by pass (skipped passes are absent).
struct PassRecord {
  std::string name;
  bool changed = false;
};

// Ctx is a pipeline's state; it lists its current programs with
// `std::vector<NamedProgram> Programs() const`.
template <class Ctx>
struct Pass {
  PassInfo info;
  StatusOr<bool> (*run)(Ctx& ctx);  // "changed?"
};

template <class Ctx>
std::vector<PassInfo> PassInfos(const std::vector<Pass<Ctx>>& passes) {
  std::vector<PassInfo> infos;
  for (const auto& p : passes) infos.push_back(p.info);
  return infos;
}

// Unknown pass names, and required passes asked to be disabled, are errors.
Status CheckPassOptions(const std::vector<PassInfo>& passes, const PassOptions& options);

// "  name (optional): summary" lines, for --help.
std::string DescribePasses(const std::vector<PassInfo>& passes);

namespace internal {
// The untyped core of RunPipeline: run(i) runs pass i, programs() lists the context's programs.
StatusOr<std::vector<PassRecord>> RunPasses(
    const std::string& pipeline, const std::vector<PassInfo>& passes,
    const std::function<StatusOr<bool>(size_t)>& run,
    const std::function<std::vector<NamedProgram>()>& programs, const PassOptions& options);
}  // namespace internal

// Runs the passes in order on ctx, each followed by the verifier (and a dump when asked).
// Errors name the pipeline and the pass.
template <class Ctx>
StatusOr<std::vector<PassRecord>> RunPipeline(const std::string& pipeline,
                                              const std::vector<Pass<Ctx>>& passes, Ctx& ctx,
                                              const PassOptions& options) {
  return internal::RunPasses(
      pipeline, PassInfos(passes), [&](size_t i) { return passes[i].run(ctx); },
      [&] { return ctx.Programs(); }, options);
}

}  // namespace loom::transpiler
