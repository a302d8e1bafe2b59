// Machines for the simulator: devices joined by links, every link direction, switch port and NIC
// a resource with a bandwidth that the transfers crossing it share. Built from any Topology Loom
// knows (presets, files: NVLink pairs get a dedicated resource per direction; PCIe / through-CPU
// pairs share each device's PCIe port), from an NVSwitch box (every device one port into a
// non-blocking switch), or as a cluster: nodes x a node machine joined by NICs through a switch
// that is full-bisection or oversubscribed by a factor.
//
// Link classes carry the public figures their defaults come from (LinkClasses(); the sources are
// listed in docs/SIMULATOR.md). Immutable after construction; safe to share between threads.
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/emulated_cluster.h"
#include "base/status.h"
#include "collective/topology.h"

namespace loom::sim {

// A kind of link with its public per-direction bandwidth and one-hop latency.
struct LinkClass {
  std::string name;       // "nvlink2", "pcie3", "ib-hdr200", "eth100", ...
  double gbps = 0;        // GB/s per direction (bytes, not bits)
  double latency_us = 0;  // one-way, one message
  std::string source;
  // The share of `gbps` a stream of bulk transfers reaches (protocol, packet and driver
  // overheads); 1 where no published measurement calibrates it (docs/SIMULATOR.md).
  double efficiency = 1;
};
const std::vector<LinkClass>& LinkClasses();
StatusOr<LinkClass> FindLinkClass(const std::string& name);

// One shared capacity: a link direction, a switch port, a NIC direction, a node's uplink.
struct Resource {
  std::string name;
  double gbps = 0;
  double efficiency = 1;  // of its link class
  // Transfers that reduce on arrival run at this rate instead (0: gbps): a host's CPU copies
  // and reduces at different speeds, and one thread does one or the other at a time.
  double reduce_gbps = 0;
  // A host's local copies (a rank's memcpy of its own buffers) run at this rate (0: gbps).
  double local_gbps = 0;
  // The capacity binds only transfers that share it: one transfer alone runs at its other
  // resources' rates. A host's cores and memory together can give concurrent copies less than
  // one rank gets alone (cache lines another core has just written, threads contending for
  // them): what two ranks copying at once get is then no bound on one.
  bool shared_only = false;
};

// What one transfer from a to b crosses.
struct Route {
  std::vector<int> resources;
  double latency_us = 0;
};

// A cluster: `nodes` copies of `node` (a machine preset, topology preset or file), each with
// `nics` NICs of `nic` class (any link class; `nic_gbps` overrides its bandwidth in GB/s),
// devices spread over the NICs in order, through a switch oversubscribed by `oversubscription`
// (1: full bisection; k: a node's traffic to other nodes shares nics * bandwidth / k).
struct ClusterSpec {
  int nodes = 1;
  std::string node;
  int devices_per_node = 0;  // the spec's GPUS, checked against the node machine; 0: any
  int nics = 1;
  LinkClass nic;
  double oversubscription = 1;
  // Parameter-server machines of their own (0: none), each with one NIC of `server_nic`
  // attached to the switch at full bisection: the `ps` and `ps_mpi` algorithms put their
  // servers there instead of beside the workers.
  int servers = 0;
  LinkClass server_nic;
};
// "NODESxGPUS:NODE:NICSxSPEED[:oversub=K][:servers=S[xSPEED]]" e.g. "16x8:dgx1-v100:4x100Gb",
// "4x8:p4d.24xlarge:4x100Gb:oversub=2" or "8x8:dgx-a100:8xib-hdr:servers=4x100Gb". SPEED is a
// link class name or a rate "100Gb" (Gb/s) / "12.5GB" (GB/s); GPUS must equal the node
// machine's device count; the servers' NIC defaults to the nodes' NIC class.
StatusOr<ClusterSpec> ParseClusterSpec(const std::string& text);

// A host's payload rates (GB/s) at one working set.
struct HostRates {
  double working_set = 0;  // bytes (Machine::Host's levels; ignored for a single level)
  double copy = 0;         // one rank copying alone
  double reduce = 0;       // one rank reducing alone (reads two operands, writes one)
  // Every rank at once, all together: what the memory system gives concurrent copies and
  // reductions (0: cores x copy / reduce, one stream per core). It binds only transfers that
  // share it and may be below one rank's rate (cores contending for lines another has just
  // written); one transfer alone runs at copy / reduce.
  double mem_copy = 0;
  double mem_reduce = 0;
  // A rank's copy of its own buffers (memcpy), where it differs from a transfer between ranks
  // (over MPI a transfer crosses the kernel: Open MPI's single-copy CMA); 0: the copy rate. All
  // ranks at once get it scaled as transfers are (mem_copy / copy).
  double local = 0;
};

// How a host's transport moves messages (beyond its rates).
struct HostProtocol {
  // Messages larger than this pay rendezvous_us more than the route's latency (MPI's
  // rendezvous: a handshake before the data); none by default.
  double eager_bytes = std::numeric_limits<double>::infinity();
  double rendezvous_us = 0;
  // A smaller step below the eager size: messages larger than step_bytes pay step_us more
  // (besides a rendezvous beyond the eager size), on a core as a rendezvous. Measured over MPI
  // with 4 processes on 2 cores: a ring step of messages past 256 B costs about a microsecond
  // more than one of smaller messages; none by default.
  double step_bytes = std::numeric_limits<double>::infinity();
  double step_us = 0;
  // What a message of a given size pays beyond its latency, its protocol steps and its bytes at
  // the rates, on a core as a rendezvous: (bytes, microseconds) in increasing bytes, linear
  // between two sizes, below the first size that size's in proportion, none beyond the last.
  // Measured over MPI on a host whose cores keep what they write in caches of their own: a
  // message of a few KiB costs the receiver more per byte than the rates a 64 KiB call gives
  // (Open MPI's eager path copies it in and out of a shared fragment; the receiver reads what
  // the sender's core has just written). Empty: none.
  std::vector<std::pair<double, double>> message_us;
  // What a message of `bytes` pays, from those points (0 where none apply).
  double MessageUs(double bytes) const;
  // What a copy pays for cache lines another core wrote last (in-process, where the ranks are
  // threads on cores of their own and a transfer is one core's memcpy between two ranks'
  // buffers; over MPI a single-copy transfer, the receiver's process_vm_readv): per copy size,
  // the rates (GB/s) one core copies at with both buffers last written by itself, the source by
  // another core, the destination by another core, both, and (`read`, 0: not priced) the
  // destination written by itself and copied from by another core since (`loom bench copies`:
  // rewriting lines another core has taken costs as much as reading another's). The engine
  // keeps which rank wrote each range of every rank's buffers last, and which read it since,
  // and charges a copy the difference per byte (DirtyUs). Empty: not priced.
  struct DirtyRates {
    double bytes = 0, clean = 0, src = 0, dst = 0, both = 0, read = 0;
  };
  std::vector<DirtyRates> dirty;
  // Extra microseconds per byte for a copy of `bytes` whose source, destination or both were
  // written last by another core: each point's 1 / rate - 1 / clean (never negative),
  // interpolated in log(bytes) between two sizes, the nearest size's beyond the ends.
  struct DirtyCost {
    double src = 0, dst = 0, both = 0, read = 0;
    double clean = 0;  // microseconds per byte of the clean copy itself
  };
  DirtyCost DirtyUs(double bytes) const;
  // Messages of at most this many bytes go through buffers of the transport's own (Open MPI's
  // shared-memory BTL sends a message whose payload and headers fit its eager limit, 4 KiB, in
  // a fragment: the sender copies it in, the receiver out): who wrote the sender's or the
  // receiver's buffer last does not change what they cost (the fragment's lines are always
  // the sender's: message_us prices them). Larger ones the receiver copies from the sender's
  // buffer (single-copy CMA, as an in-process transfer copies between the ranks' buffers):
  // those the dirty table prices. 0: every message reads the sender's buffer.
  double fragment_bytes = 0;
  // Transfers are copied by the rank whose post matched the other's (the later poster: Loom's
  // in-process transport) instead of the receiver (MPI)...
  bool matcher_copies = false;
  // ... except those of at least this many bytes whose send made the match: the sender hands
  // them to the receiver (InProcessTransportOptions::handoff_bytes).
  double handoff_bytes = std::numeric_limits<double>::infinity();
  // What the transport's native collectives are, which the simulator replays as "native"
  // (simulate.h): none; one pass over the ranks' shared memory (kPass: Loom's in-process
  // transport, every rank reads and writes every other's buffers); or Open MPI's nonblocking
  // collectives' schedules (kLibnbc: MPI_Iallreduce, Loom's MPI transport).
  enum class Native { kNone, kPass, kLibnbc };
  Native native = Native::kNone;
  // kPass: what the pass's streaming stores (outputs of 16 MiB and more) cost per byte a block
  // reads and writes, against a copy's per byte it moves at the memory's rates; 0: the memory
  // traffic they leave, (reads + writes) / (reads + 2 writes) (no read of the written lines).
  double stream = 0;
  // The latency of a message whose receiving rank also posts a send before it waits (a ring
  // step: every rank sends and receives at once, and a rank busy with its own send finds its
  // message without being woken from a wait); negative: the host's latency, as any message.
  double exchange_us = -1;
  // What the kernel takes to map in one 4 KiB page a rank touches for the first time (fault,
  // zero, and the unmap that returns it), in microseconds of one core: Open MPI's temporary
  // buffers beyond glibc's largest mmap threshold are fresh memory every call (0: not charged).
  double fault_us = 0;
  // The last-level cache the ranks share (bytes; 0: not known). kPass: a streaming pass whose
  // inputs (every rank's together) take at most half of it reads them from there, at their
  // working set's rates; the streamed outputs do not displace them.
  double cache_bytes = 0;
  // kPass: calls whose input is at most this many bytes on every rank run from copies in the
  // meeting (negative: the transport's kInProcessNativeInlineBytes; a record of an earlier
  // transport states its own), and what a pass of blocks adds to the meeting, in microseconds:
  // its second wait, until every rank's blocks are written (0: nothing).
  double inline_bytes = -1;
  double wait_us = 0;
};

// What an emulated cluster's links give (Machine::Emulated), measured on the emulated cluster
// (docs/SIMULATOR.md): TCP's payload over the bytes tbf shapes (1448 of every 1514 with
// timestamps), and what a message pays in the kernels and MPI on top of the link's delay.
inline constexpr double kEmulatedTcpEfficiency = 1448.0 / 1514.0;
inline constexpr double kEmulatedStackUs = 30;

class Machine {
 public:
  // A machine preset (MachinePresetNames) or one of Topology's presets.
  static StatusOr<Machine> Preset(const std::string& name);
  static std::vector<std::string> MachinePresetNames();
  // A topology with nodes (Topology::nodes() > 1) becomes a cluster of its node's machine with
  // its NICs, each at the rate and latency of the topology's links between nodes.
  static StatusOr<Machine> FromTopology(const collective::Topology& topology);
  // `gpus` devices, each one port of `gbps` per direction into one non-blocking switch.
  static Machine NvSwitch(const std::string& name, int gpus, double gbps, double latency_us,
                          double efficiency = 1);
  static StatusOr<Machine> Cluster(const ClusterSpec& spec);
  // The cluster `loom launch --emulate` builds on one host, one process per node: every node's
  // NICs together as one NIC (Open MPI's TCP transport stripes a message over every rail), of
  // the spec's rate at TCP's efficiency over Ethernet (kEmulatedTcpEfficiency), each message
  // waiting the link's delay plus the host's network stack (kEmulatedStackUs). Loss and jitter
  // are not modelled.
  static StatusOr<Machine> Emulated(const EmulatedCluster& cluster);
  // A host whose ranks are threads or processes sharing `cores` CPU cores: every transfer is a
  // copy done by a CPU (the receiver's thread, at copy_gbps) and all of them share the cores
  // (cores x copy_gbps); a receive that reduces runs at reduce_gbps; each message waits
  // latency_us (a thread's or process's wake-up). What loom bench measures on this machine,
  // in-process or over MPI, calibrated by bench/sim/calibrate_host.py.
  static StatusOr<Machine> Host(int ranks, int cores, double copy_gbps, double reduce_gbps,
                                double latency_us);
  // The same with rates that depend on how much memory a call touches: `levels` in increasing
  // working set (every rank's send and receive buffer, 2 x bytes x ranks), each with its own
  // rates; a call between two levels runs at rates interpolated geometrically in its working
  // set (rounded to a power of two), beyond the ends at the nearest level's.
  static StatusOr<Machine> Host(int ranks, int cores, double latency_us,
                                std::vector<HostRates> levels, const HostProtocol& protocol = {});
  // "host:N:cores=C:latency=US:copy=G:reduce=G[:mem=G][:mem_reduce=G]" (keys in any order) or
  // "host:N:cores=C:latency=US:levels=WS/COPY/REDUCE[/MEM/MEM_REDUCE[/LOCAL]],..." (WS in
  // bytes, with an optional K, M or G), either with ":eager=BYTES:rendezvous=US": messages
  // larger than `eager` bytes pay `rendezvous` more (MPI's rendezvous protocol: a handshake
  // before the data), ":step=BYTES/US" (a smaller step below it: HostProtocol::step_bytes),
  // ":msg=BYTES/US,..." (what a message of each size pays beyond that: HostProtocol::message_us),
  // ":dirty=BYTES/CLEAN/SRC/DST/BOTH[/READ],..." (copies of other cores' lines:
  // HostProtocol::dirty),
  // ":fragment=BYTES" (messages that size and smaller not priced by it: fragment_bytes),
  // ":copier=receiver|matcher[:handoff=BYTES]", ":native=pass|libnbc|none"
  // (with pass, ":stream=F", ":cache=BYTES", ":inline=BYTES", ":wait=US" and
  // ":pass=WS/COPY/REDUCE,...": native_pass()),
  // ":fault=US" and ":exchange=US" (HostProtocol).
  static StatusOr<Machine> ParseHost(const std::string& spec);
  // A native=pass host whose spec gives the pass rates of its own (pass=WS/COPY/REDUCE,...: per
  // working set, what all ranks together copy and reduce in the pass): the host the pass runs
  // on where it writes through the caches (no streaming stores); null otherwise. The pass
  // reads inputs that no rank writes during the call and each rank writes its own blocks, where
  // a transfer between ranks reads what another core has just written: the ring's and the
  // tree's rates do not price it.
  const Machine* native_pass() const { return native_pass_.get(); }
  // A host with levels: the machine a call runs on whose ranks' send and receive buffers
  // total `working_set` bytes (itself otherwise; infinity: the largest level).
  const Machine& ForWorkingSet(double working_set) const;
  // A host's one-rank copy rate (GB/s): what a rank's local copy of its own buffers costs.
  double host_copy_gbps() const;
  // A host's copy rate with every rank copying at once, all together (GB/s; 0 elsewhere).
  double host_shared_copy_gbps() const;
  // A preset or topology file name (Preset, else Topology::FromFile), a host spec or a cluster
  // spec.
  static StatusOr<Machine> Load(const std::string& name_or_spec);
  bool host() const { return host_cores_ >= 0; }
  // A host's CPU cores (0 for other machines).
  int host_core_count() const { return host_core_count_; }
  // A host's transport (HostProtocol; the defaults for other machines).
  bool matcher_copies() const { return host_protocol_.matcher_copies; }
  double handoff_bytes() const { return host_protocol_.handoff_bytes; }
  HostProtocol::Native native() const { return host_protocol_.native; }
  double stream() const { return host_protocol_.stream; }
  double fault_us() const { return host_protocol_.fault_us; }
  double exchange_us() const { return host_protocol_.exchange_us; }
  double cache_bytes() const { return host_protocol_.cache_bytes; }
  // kPass: the largest per-rank input run from copies (HostProtocol::inline_bytes, resolved).
  double native_inline_bytes() const;
  double native_wait_us() const { return host_protocol_.wait_us; }
  double eager_bytes() const { return host_protocol_.eager_bytes; }
  double rendezvous_us() const { return host_protocol_.rendezvous_us; }
  double step_bytes() const { return host_protocol_.step_bytes; }
  double step_us() const { return host_protocol_.step_us; }
  double message_us(double bytes) const { return host_protocol_.MessageUs(bytes); }
  bool prices_dirty() const { return !host_protocol_.dirty.empty(); }
  HostProtocol::DirtyCost dirty_us(double bytes) const { return host_protocol_.DirtyUs(bytes); }
  double fragment_bytes() const { return host_protocol_.fragment_bytes; }

  const std::string& name() const { return name_; }
  int size() const { return nodes_ * per_node_; }
  // Parameter-server machines of their own (ClusterSpec::servers): endpoints size() ...
  // size() + servers() - 1 of RouteOf, beside the devices.
  int servers() const { return static_cast<int>(server_out_.size()); }
  int endpoints() const { return size() + servers(); }
  int nodes() const { return nodes_; }
  int devices_per_node() const { return per_node_; }
  int node_of(int device) const { return device / per_node_; }
  // The link matrix of one node (weights 0..3 as the collective library reads them): what the
  // plan's ring and trees are built from.
  const collective::Topology& node_topology() const { return *node_topology_; }
  bool nvswitch() const { return nvswitch_; }
  // NICs per node (0 for one machine) and the NIC a node-local device sends through.
  int nics() const { return nics_; }
  int nic_of(int local_device) const { return nics_ > 0 ? local_device * nics_ / per_node_ : 0; }

  // The machine of this one's first n devices (one node only; n = size() returns a copy).
  StatusOr<Machine> FirstDevices(int n) const;

  const std::vector<Resource>& resources() const { return resources_; }
  // What a transfer from a to b crosses; `reduce`: the receiver reduces it on arrival (hosts
  // route it through the receiver's reduction instead of its copy; other machines ignore it).
  Route RouteOf(int a, int b, bool reduce = false) const;
  std::string Describe() const;

 private:
  Machine() = default;
  int AddResource(std::string name, double gbps, double efficiency = 1);
  Route NodeRoute(int a, int b, bool reduce) const;  // within one node, local device ids
  // `spec.nodes` copies of `node` (a single machine) with their NICs (spec.node is not read).
  static StatusOr<Machine> ClusterOf(Machine node, const ClusterSpec& spec);

  std::string name_;
  int nodes_ = 1, per_node_ = 1;
  std::shared_ptr<const collective::Topology> node_topology_;
  bool nvswitch_ = false;
  int host_cores_ = -1;  // host machines: the shared cores resource
  int host_core_count_ = 0;
  double host_latency_us_ = 0;
  std::vector<HostRates> host_levels_;
  // Hosts with several levels: the machine at working set 2^(host_at_lo_ + i).
  std::vector<std::shared_ptr<const Machine>> host_at_;
  int host_at_lo_ = 0;
  HostProtocol host_protocol_;
  std::shared_ptr<const Machine> native_pass_;  // native_pass()
  std::vector<Resource> resources_;
  // Within a node (resources of node 0; node k's are offset by k * node_resources_).
  int node_resources_ = 0;
  std::vector<int> pair_link_;           // per * per: the pair's dedicated link direction, or -1
  std::vector<double> pair_latency_;     // per * per
  std::vector<int> port_out_, port_in_;  // per device: PCIe (or NVSwitch) port
  // Between nodes.
  int nics_ = 0;
  double nic_latency_us_ = 0;
  std::vector<int> nic_out_, nic_in_;        // nodes * nics
  std::vector<int> uplink_out_, uplink_in_;  // nodes (oversubscribed switch only)
  std::vector<int> server_out_, server_in_;  // dedicated servers: one NIC each
};

}  // namespace loom::sim
