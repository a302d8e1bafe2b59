// Sizes in bytes as people write them: "4096", "64K", "1.5M", "2G" (K, M, G are powers of 1024;
// KB/KiB, MB/MiB, GB/GiB, B and lower-case k, m, g are accepted alike). The one parser of byte
// sizes: flags, simulator specs and model files use it.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace loom {

// InvalidArgument quoting the text for anything else, a negative size, or one beyond 64 TiB.
StatusOr<size_t> ParseByteSize(const std::string& text);

}  // namespace loom
