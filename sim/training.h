// Training steps at scale: a model's gradients (sizes in the order backward produces them and
// the compute between them), fused into buckets as Loom's transpiler fuses them, each bucket's
// allreduce simulated on the machine (simulate.h) and overlapped with the rest of backward.
//
//   forward | backward: gradient g is ready when the backward compute up to it is done
//           | buckets: one allreduce per bucket, issued when its last gradient is ready, run
//           |          one after another (the communicator's calls run in issue order)
//   step = forward + max(end of backward, end of the last allreduce)
//
// Compute comes from the model's single-device throughput (samples/s at its batch per device):
// a third of the step forward, two thirds backward, backward spread over the gradients in
// proportion to their layers' FLOPs. A model taken from a Loom timeline (ModelFromTimeline)
// carries measured times instead: forward, backward, each gradient's ready time, and the
// update after backward (the optimizer ops, which need the reduced gradients):
//   step = forward + max(end of backward, end of the last allreduce) + update.
// Communication does not slow compute (no contention for memory or SMs is modelled).
// Efficiency = single-device step / step (weak scaling: the batch per device stays fixed).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/simulate.h"

namespace loom::sim {

struct GradientSpec {
  std::string name;
  uint64_t elements = 0;
  double flops = 0;      // forward FLOPs per sample of the layer it belongs to (for spreading)
  double ready_us = -1;  // measured: backward time until it is ready (ModelFromTimeline)
};

struct ModelSpec {
  std::string name;
  std::string source;  // where the throughput comes from
  int batch_per_device = 1;
  double samples_per_s = 0;  // one device, at batch_per_device
  std::string device;        // the device that throughput was measured on
  collective::DataType dtype = collective::DataType::kFloat32;  // gradients
  std::vector<GradientSpec> gradients;  // in the order backward produces them
  // Measured one-device times (ModelFromTimeline; 0: from samples_per_s and FLOPs).
  double forward_us = 0, backward_us = 0, update_us = 0;
  bool measured() const { return backward_us > 0; }
  uint64_t parameters() const;
  double flops_per_sample() const;  // forward
};

// "resnet50", "vgg16", "inception-v3", "bert-large": gradient lists generated from the
// architectures.
std::vector<std::string> BuiltinModelNames();
StatusOr<ModelSpec> BuiltinModel(const std::string& name);
// JSON: {"name", "source", "batch_per_device", "samples_per_s", "device", "dtype",
// "gradients": [{"name", "elements", "flops"}, ...]} (gradients in backward order; flops
// optional: absent everywhere, backward is spread by elements). Errors name the key and entry.
StatusOr<ModelSpec> ParseModelJson(const std::string& text);
// A built-in name or a JSON file.
StatusOr<ModelSpec> LoadModel(const std::string& name_or_path);

// A model measured by Loom itself: `timeline_json` is a one-device `loom run --timeline` trace
// (chrome://tracing JSON; every compute op with its output vars); `gradients` maps each
// parameter gradient (e.g. "fc_0.w_0@GRAD") to its elements. The trace's steps are found by
// its first op recurring; in each, forward runs until the first op named *_grad, a gradient is
// ready when the last op writing it ends, backward ends with the last gradient or *_grad op,
// and the ops after it are the update. Medians over the recorded steps; gradients in the order
// they become ready. Errors name what is missing (no compute ops of `rank`, no *_grad op, a
// gradient no op writes).
StatusOr<ModelSpec> ModelFromTimeline(const std::string& timeline_json,
                                      const std::map<std::string, uint64_t>& gradients,
                                      collective::DataType dtype, int batch_per_device,
                                      int rank = 0);

// A model from a program and a cost per op type: `program` is the training program's ops in
// order (block 0: forward, *_grad ops, then the update), each with its output vars; `cost_json`
// {"ops": {"mul": 12.5, "mul_grad": 30, ...}, "default_us": 5, "grad_factor": 2, "source":
// "..."} gives each op's microseconds (an op type, else a *_grad op's forward type times
// grad_factor (2), else default_us; an op none of these prices is an error naming it). The ops
// run one after another, and ModelFromTimeline's rules find forward, backward, update and when
// each gradient is ready.
struct ProgramOp {
  std::string type;
  std::vector<std::string> outputs;
};
StatusOr<ModelSpec> ModelFromOpCosts(const std::vector<ProgramOp>& program,
                                     const std::string& cost_json,
                                     const std::map<std::string, uint64_t>& gradients,
                                     collective::DataType dtype, int batch_per_device);

struct StepOptions {
  double fusion_mb = 32;           // the transpiler's fuse_grad_size_mb (0: one call per gradient)
  std::string algorithm = "auto";  // for every bucket ("hierarchical" on one node: auto)
};

struct StepResult {
  int devices = 0, nodes = 0, buckets = 0;
  double compute_us = 0;  // forward + backward, one device
  double comm_us = 0;     // sum of the buckets' allreduce times
  double exposed_us = 0;  // what communication adds to the step
  double step_us = 0;
  double samples_per_s = 0;  // all devices
  double efficiency = 0;     // compute_us / step_us
  std::string algorithms;    // the buckets' algorithms, counted ("auto:ring x4")
};

StatusOr<StepResult> SimulateStep(const Simulator& simulator, const ModelSpec& model,
                                  const StepOptions& options);

// The machine of `devices` devices for a scaling sweep of `base` (a preset, file or cluster
// spec): fewer devices than one node take the node's first ones; more take whole nodes of the
// cluster's kind (devices must then be a multiple of the node's size).
StatusOr<Machine> MachineForScale(const std::string& base, int devices);

}  // namespace loom::sim
