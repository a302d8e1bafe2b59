// Protobuf text-format parsing for the loom tool: errors come back as one Status line with the
// file, line and column instead of being logged by protobuf on stderr.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "base/status.h"

namespace loom::cli {

// Parses text into message; on failure: Corruption("PATH:LINE:COL: what (expected WHAT)").
Status ParseTextProto(const std::string& text, const std::string& path, const std::string& what,
                      google::protobuf::Message* message);

}  // namespace loom::cli
