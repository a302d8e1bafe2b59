// Ctrl-C while Loom waits. A host that handles SIGINT itself (Python turns it into
// KeyboardInterrupt at its next bytecode, which never comes while a C++ call waits) registers a
// check; Loom's long waits ask it every 100 ms or so and end with Interrupted(). The waits that
// ask: a trainer connecting to its parameter servers and waiting for their answers, a server
// serving its job, a KVStore's servers. Without a check (the CLI) SIGINT keeps its default
// action and ends the process.
//
// Thread safety: SetInterruptCheck once, before any wait; InterruptRequested from any thread
// (the check decides which threads can be interrupted: Python's main thread only).
#pragma once

#include <string>

#include "base/status.h"

namespace loom {

using InterruptCheck = bool (*)();

void SetInterruptCheck(InterruptCheck check);

// Whether the host says the user interrupted; asks the check at most every 50 ms per thread.
bool InterruptRequested();

// The error an interrupted wait ends with (kAborted): "interrupted (SIGINT) while <what>".
Status Interrupted(const std::string& what);
bool IsInterrupted(const Status& st);

}  // namespace loom
