// The communicator variable of a transpiled program. The data-parallel transpiler declares one
// variable of type COMMUNICATOR named kCommVar in every rank's programs; `comm_init` (in the
// startup program) stores the rank's communicator in it, and the collective ops take it as their
// "Comm" input. The runner reads it back to close the group after a run.
// The framework only holds the communicator (collective/groups.h makes it) and names the
// collectives' element types (collective/types.h): it runs no collective.
#pragma once

#include <memory>
#include <string>

#include "collective/types.h"
#include "framework/data_type.h"
#include "framework/variable.h"

namespace loom {
namespace collective {
class Communicator;
}

// The name of the communicator variable in transpiled programs.
inline constexpr const char* kCommVar = "@LOOM_COMM@";

// What a COMMUNICATOR variable holds: the rank's communicator, sharing ownership of its group.
struct CommHandle {
  std::shared_ptr<collective::Communicator> comm;
};

// The communicator a variable holds (comm_init's output); null when it holds none.
inline collective::Communicator* CommunicatorIn(const Variable* v) {
  return v && v->IsType<CommHandle>() ? v->Get<CommHandle>().comm.get() : nullptr;
}

// The collectives' element type for a tensor dtype; Unimplemented (naming `where`) for dtypes
// the collectives do not move.
StatusOr<collective::DataType> CollectiveDtype(DataType dtype, const std::string& where);

}  // namespace loom
