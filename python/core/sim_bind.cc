// loom.core's simulator entry points (python/loom/sim.py wraps them): collectives on a machine
// and training steps at scale, as loom simulate prints them, returned as lists of dicts.
#include <pybind11/stl.h>

#include "collective/selector.h"
#include "python/core/common.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"
#include "sim/training.h"

namespace loom::python {

namespace {

sim::SimOptions Options(size_t chunk_bytes, double post_us, double reduce_gbps, double efficiency,
                        double call_us, bool mpi_exchange, bool root_copy_first = false,
                        bool in_place = false) {
  sim::SimOptions o;
  o.mpi_exchange = mpi_exchange;
  o.root_copy_first = root_copy_first;
  o.in_place = in_place;
  o.engine.call_us = call_us;
  o.chunk_bytes = chunk_bytes;
  o.engine.post_us = post_us;
  o.engine.reduce_gbps = reduce_gbps;
  o.engine.efficiency = efficiency;
  return o;
}

py::list Collectives(const std::string& machine, const std::string& op,
                     const std::string& algorithm, const std::vector<size_t>& sizes, int root,
                     size_t chunk_bytes, double post_us, double reduce_gbps, double efficiency,
                     double call_us, bool mpi_exchange, bool root_copy_first, bool in_place) {
  const collective::Collective kind = ValueOrThrow(collective::ParseCollective(op));
  if (!(efficiency > 0 && efficiency <= 1)) {
    Throw(InvalidArgument("efficiency ", efficiency, " is outside (0, 1]"));
  }
  if (!(post_us >= 0) || !(reduce_gbps >= 0) || !(call_us >= 0) || chunk_bytes < 1) {
    Throw(InvalidArgument("post_us, call_us and reduce_gbps must be >= 0 and chunk_bytes >= 1"));
  }
  sim::Simulator s = ValueOrThrow(
      sim::Simulator::Create(ValueOrThrow(sim::Machine::Load(machine)),
                             Options(chunk_bytes, post_us, reduce_gbps, efficiency, call_us,
                                     mpi_exchange, root_copy_first, in_place)));
  if (root < 0 || root >= s.machine().size()) {
    Throw(InvalidArgument("root ", root, " is outside 0..", s.machine().size() - 1));
  }
  py::list rows;
  for (size_t bytes : sizes) {
    sim::CollectiveResult r;
    {
      py::gil_scoped_release release;
      r = ValueOrThrow(s.Simulate(kind, algorithm, bytes, root));
    }
    py::dict row;
    row["bytes"] = r.bytes;
    row["algorithm"] = r.algorithm;
    row["time_us"] = r.time_us;
    row["algbw_gbps"] = r.algbw_gbps;
    row["busbw_gbps"] = r.busbw_gbps;
    row["bottleneck"] = r.bottleneck;
    row["bottleneck_utilization"] = r.bottleneck_utilization;
    row["transfers"] = r.transfers;
    rows.append(row);
  }
  return rows;
}

py::list Scaling(const std::string& machine, const std::string& model,
                 const std::vector<int>& scale, const std::string& algorithm, double fusion_mb,
                 size_t chunk_bytes, double post_us, double reduce_gbps, double efficiency,
                 double call_us, bool mpi_exchange) {
  const sim::ModelSpec spec = ValueOrThrow(sim::LoadModel(model));
  sim::StepOptions step;
  step.algorithm = algorithm;
  step.fusion_mb = fusion_mb;
  py::list rows;
  for (int devices : scale) {
    sim::StepResult r;
    {
      py::gil_scoped_release release;
      sim::Simulator s = ValueOrThrow(sim::Simulator::Create(
          ValueOrThrow(sim::MachineForScale(machine, devices)),
          Options(chunk_bytes, post_us, reduce_gbps, efficiency, call_us, mpi_exchange)));
      r = ValueOrThrow(sim::SimulateStep(s, spec, step));
    }
    py::dict row;
    row["devices"] = r.devices;
    row["nodes"] = r.nodes;
    row["buckets"] = r.buckets;
    row["compute_us"] = r.compute_us;
    row["comm_us"] = r.comm_us;
    row["exposed_us"] = r.exposed_us;
    row["step_us"] = r.step_us;
    row["samples_per_s"] = r.samples_per_s;
    row["efficiency"] = r.efficiency;
    row["algorithms"] = r.algorithms;
    rows.append(row);
  }
  return rows;
}

}  // namespace

void RegisterSim(py::module_& m) {
  // auto asks the simulator in this process too (LOOM_AUTO_COST_MODEL=formulas: the formulas);
  // a bad value fails the import, naming the variable.
  ValueOrThrow(sim::InstallDefaultCostModel());
  m.def("auto_cost_model", [] {
    collective::CommPlan plan;
    plan.topology = collective::Topology::Uniform(2, 1);
    return std::string(collective::DefaultCostModel(plan, {}) ? "sim" : "formulas");
  });
  m.def("sim_collectives", &Collectives, py::arg("machine"), py::arg("op"), py::arg("algorithm"),
        py::arg("sizes"), py::arg("root") = 0, py::arg("chunk_bytes") = size_t{1} << 20,
        py::arg("post_us") = 1.0, py::arg("reduce_gbps") = 0.0, py::arg("efficiency") = 1.0,
        py::arg("call_us") = 0.0, py::arg("mpi_exchange") = false,
        py::arg("root_copy_first") = false, py::arg("in_place") = false);
  m.def("sim_scaling", &Scaling, py::arg("machine"), py::arg("model"), py::arg("scale"),
        py::arg("algorithm") = "auto", py::arg("fusion_mb") = 32.0,
        py::arg("chunk_bytes") = size_t{1} << 20, py::arg("post_us") = 1.0,
        py::arg("reduce_gbps") = 0.0, py::arg("efficiency") = 1.0, py::arg("call_us") = 0.0,
        py::arg("mpi_exchange") = false);
  m.def("sim_machines", [] { return sim::Machine::MachinePresetNames(); });
  m.def("sim_models", [] { return sim::BuiltinModelNames(); });
  m.def("sim_algorithms", [] { return sim::SimAlgorithmNames(); });
}

}  // namespace loom::python
