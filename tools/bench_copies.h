// loom bench copies (bench_copies.cc): one core's copy of lines another core wrote last.
#pragma once

namespace loom::cli {

// Whether the bench arguments name the copies benchmark (the first non-flag argument).
bool IsBenchCopies(int argc, char** argv);
int BenchCopiesCommand(int argc, char** argv);

}  // namespace loom::cli
