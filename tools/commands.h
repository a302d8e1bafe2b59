// The loom subcommands. Each returns a process exit code (see flags.h) and prints its own
// errors as one line "loom CMD: error: ..." on stderr.
#pragma once

namespace loom::cli {

int RunCommand(int argc, char** argv);
int InspectCommand(int argc, char** argv);
int TranspileCommand(int argc, char** argv);
int TopoCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);
int DevicesCommand(int argc, char** argv);
int LaunchCommand(int argc, char** argv);
int SimulateCommand(int argc, char** argv);

}  // namespace loom::cli
