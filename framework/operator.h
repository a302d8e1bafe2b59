// Operator: a prepared op ready to run. Built once from an OpDesc (attributes resolved against
// the registry, defaults filled), then run many times: it binds its variables in a scope (cached
// while the scope stays the same), infers output shapes at run time and calls the kernel chosen
// by (place kind, dtype). It is its own run-time InferShapeContext and KernelContext, so a run
// allocates nothing. Not thread-safe: one Operator runs on one worker at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/program_desc.h"
#include "framework/scope.h"

namespace loom {

// Runs the sub-blocks of control-flow ops (the executor implements it).
class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  virtual Status RunBlock(int block, Scope* scope, const DeviceContext& dev) = 0;
};

class Operator final : public InferShapeContext, public KernelContext {
 public:
  // block and index only name the op in errors.
  static StatusOr<std::unique_ptr<Operator>> Create(const OpDesc& desc, int block, int index);

  // runner runs the sub-blocks of a control-flow op (nullptr: the op may not run any).
  Status Run(Scope* scope, const DeviceContext& dev, BlockRunner* runner = nullptr);
  // The blocks named by the op's block attributes (sub_block of conditional_block, ...).
  const std::vector<int>& SubBlocks() const { return sub_blocks_; }

  const std::string& Type() const { return info_->type; }
  const OpInfo& info() const { return *info_; }
  const std::vector<std::string>& InputVars() const { return all_inputs_; }
  const std::vector<std::string>& OutputVars() const { return all_outputs_; }

  // InferShapeContext and KernelContext
  bool IsRuntime() const override { return true; }
  const std::string& OpType() const override { return info_->type; }
  const AttributeMap& Attrs() const override { return attrs_; }
  int InputSize(const std::string& slot) const override;
  int OutputSize(const std::string& slot) const override;
  std::string InputVarName(const std::string& slot, int i) const override;
  std::string OutputVarName(const std::string& slot, int i) const override;
  DDim InputDim(const std::string& slot, int i) const override;
  DataType InputDtype(const std::string& slot, int i) const override;
  void SetOutputDim(const std::string& slot, const DDim& dims, int i) override;
  void SetOutputDtype(const std::string& slot, DataType dtype, int i) override;
  proto::VarType::Type InputVarType(const std::string& slot, int i) const override;
  void SetOutputVarType(const std::string& slot, proto::VarType::Type type, int i) override;
  std::string Where() const override { return where_; }
  const Tensor* InputOrNull(const std::string& slot, int i) const override;
  Tensor* OutputOrNull(const std::string& slot, int i) const override;
  const DeviceContext& device() const override { return *dev_; }
  Variable* InputVariable(const std::string& slot, int i) const override;
  Variable* OutputVariable(const std::string& slot, int i) const override;
  void SetAsync(AsyncWait wait, AsyncDone done = nullptr) const override {
    async_wait_ = std::move(wait);
    async_done_ = std::move(done);
  }
  // The work a kernel left with SetAsync during the last Run (wait is empty when it finished in
  // place; done may be empty when the kernel cannot tell without blocking).
  Scope* scope() const override { return scope_; }
  Status RunBlock(int block, Scope* scope) const override;
  struct AsyncCall {
    AsyncWait wait;
    AsyncDone done;
  };
  AsyncCall TakeAsync() { return {std::move(async_wait_), std::move(async_done_)}; }

 private:
  struct Slot {
    std::string name;
    std::vector<std::string> vars;
    std::vector<Variable*> bound;
  };
  Operator() = default;
  Status Bind(const Scope& scope);
  Status SelectKernel(Place::Kind place, KernelFn* fn);
  // " (outputs: 'Out' var 'x' dims [..], ...)": what an op that ran out of memory was making.
  std::string DescribeOutputs() const;
  // LoD around a kernel (OpInfo::sets_lod): see operator.cc.
  const Tensor* ClearOutputLoD();
  void ShareLoD(const Tensor& source);
  const Slot* FindSlot(const std::vector<Slot>& slots, const std::string& name) const;

  const OpInfo* info_ = nullptr;
  std::string where_;
  AttributeMap attrs_;
  std::vector<Slot> inputs_;
  std::vector<Slot> outputs_;
  std::vector<std::string> all_inputs_;
  std::vector<std::string> all_outputs_;
  uint64_t bound_scope_ = 0;  // serial of the scope the slots are bound in
  const DeviceContext* dev_ = nullptr;
  Scope* scope_ = nullptr;         // during Run
  BlockRunner* runner_ = nullptr;  // during Run
  std::vector<int> sub_blocks_;
  KernelKey cached_key_{Place::kCPU, proto::FP32};
  KernelFn cached_kernel_ = nullptr;
  mutable AsyncWait async_wait_;
  mutable AsyncDone async_done_;
};

}  // namespace loom
