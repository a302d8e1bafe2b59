// Internal: NVLink counts between GPUs from NVML, for DetectCudaTopology. NVML is loaded at run
// time (dlopen of the driver's libnvidia-ml.so.1), so Loom builds and runs on machines without
// the driver; there the answer is simply "not available".
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace loom::collective::internal {

struct NvLinkCounts {
  // links[a][b]: active NVLinks from GPU a to GPU b (indices into the bus ids asked for).
  std::vector<std::vector<int>> links;
  // switched[a]: GPU a has active NVLinks into an NVSwitch (so it reaches every other switched
  // GPU at full NVLink bandwidth).
  std::vector<bool> switched;
};

// For GPUs given by PCI bus id ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes it); nullopt
// when NVML or a GPU's NVLink information is not available.
std::optional<NvLinkCounts> CountNvLinks(const std::vector<std::string>& pci_bus_ids);

}  // namespace loom::collective::internal
