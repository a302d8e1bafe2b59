// Op registrations refused at load time: an op type registered twice (a library of custom ops,
// fluid.load_op_library, that reuses a type). The second registration is ignored rather than
// ending the process from a static initializer; whoever loads code that registers ops takes
// the errors afterwards and reports them (Python's import of loom.core and load_op_library).
#pragma once

#include <string>
#include <vector>

namespace loom {

// The errors since the last call, cleared.
std::vector<std::string> TakeOpRegistrationErrors();

}  // namespace loom
