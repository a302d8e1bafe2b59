#include "collective/transport/nvml_links.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

namespace loom::collective::internal {
namespace {

// The few NVML declarations used here, as nvml.h (NVML API 11+) declares them; the toolkit
// ships no nvml.h, and the library is opened at run time.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};
constexpr unsigned int kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper)
constexpr int kNvmlRemoteSwitch = 2;        // NVML_NVLINK_DEVICE_TYPE_SWITCH

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*handle_by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned int, int*) = nullptr;
  nvmlReturn_t (*remote_pci)(nvmlDevice_t, unsigned int, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*remote_type)(nvmlDevice_t, unsigned int, int*) = nullptr;  // may be missing
  bool ok = false;
};

// Opened once per process and kept (NVML is initialized and shut down around each query).
const Nvml& LoadNvml() {
  static Nvml nvml;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto sym = [lib](const char* name) { return dlsym(lib, name); };
    nvml.init = reinterpret_cast<decltype(nvml.init)>(sym("nvmlInit_v2"));
    nvml.shutdown = reinterpret_cast<decltype(nvml.shutdown)>(sym("nvmlShutdown"));
    nvml.handle_by_bus_id =
        reinterpret_cast<decltype(nvml.handle_by_bus_id)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    nvml.link_state = reinterpret_cast<decltype(nvml.link_state)>(sym("nvmlDeviceGetNvLinkState"));
    nvml.remote_pci =
        reinterpret_cast<decltype(nvml.remote_pci)>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    nvml.remote_type =
        reinterpret_cast<decltype(nvml.remote_type)>(sym("nvmlDeviceGetNvLinkRemoteDeviceType"));
    nvml.ok =
        nvml.init && nvml.shutdown && nvml.handle_by_bus_id && nvml.link_state && nvml.remote_pci;
  });
  return nvml;
}

// "0000:3B:00.0" and "00000000:3b:00.0" name the same device: compare domain, bus and device.
bool SameDevice(const std::string& bus_id, const NvmlPciInfo& pci) {
  unsigned int domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
    return false;
  return domain == pci.domain && bus == pci.bus && device == pci.device;
}

}  // namespace

std::optional<NvLinkCounts> CountNvLinks(const std::vector<std::string>& pci_bus_ids) {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok || nvml.init() != kNvmlSuccess) return std::nullopt;
  const size_t n = pci_bus_ids.size();
  NvLinkCounts counts;
  counts.links.assign(n, std::vector<int>(n, 0));
  counts.switched.assign(n, false);
  bool ok = true;
  for (size_t a = 0; a < n && ok; ++a) {
    nvmlDevice_t handle = nullptr;
    if (nvml.handle_by_bus_id(pci_bus_ids[a].c_str(), &handle) != kNvmlSuccess) {
      ok = false;
      break;
    }
    for (unsigned int link = 0; link < kNvmlMaxLinks; ++link) {
      int active = 0;
      if (nvml.link_state(handle, link, &active) != kNvmlSuccess || !active) continue;
      int type = -1;
      if (nvml.remote_type && nvml.remote_type(handle, link, &type) == kNvmlSuccess &&
          type == kNvmlRemoteSwitch) {
        counts.switched[a] = true;
        continue;
      }
      NvmlPciInfo remote{};
      if (nvml.remote_pci(handle, link, &remote) != kNvmlSuccess) continue;
      for (size_t b = 0; b < n; ++b) {
        if (b != a && SameDevice(pci_bus_ids[b], remote)) ++counts.links[a][b];
      }
    }
  }
  nvml.shutdown();
  if (!ok) return std::nullopt;
  return counts;
}

}  // namespace loom::collective::internal
