// In-process transport: N ranks in one process (one thread each, separate buffers), the CPU analog
// of one multi-GPU machine. A message moves with one direct copy from the sender's buffer into the
// receiver's; RecvReduce reduces straight out of the sender's buffer, with no staging copy. The
// copy is done by whichever side arrives second (the other side only waits).
//
// Threading: each endpoint belongs to one rank's thread; endpoints of different ranks may be used
// concurrently. The endpoints share a hub that must outlive no endpoint (they hold it).
#pragma once

#include <memory>
#include <vector>

#include "collective/transport.h"

namespace loom::collective {

struct InProcessTransportOptions {
  // When false, RecvReduce falls back to Transport's staging path (used to test that path).
  bool direct_reduce = true;
};

// Creates the n connected endpoints; element r is rank r.
std::vector<std::unique_ptr<Transport>> CreateInProcessTransports(
    int nranks, const InProcessTransportOptions& options = {});

}  // namespace loom::collective
