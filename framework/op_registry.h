// The op registry: one entry per op type, declared once next to its kernels, with its slots,
// attributes (types, defaults, checks, docs), shape inference, grad maker and kernels keyed by
// (place kind, dtype). The verifier, executor, backward, CLI (`loom inspect --ops`) and docs all
// read from here. Registration happens during static initialization; lookups afterwards are
// read-only and thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "framework/attribute.h"
#include "framework/ddim.h"
#include "framework/device_context.h"
#include "framework/place.h"
#include "framework/program_desc.h"
#include "framework/selected_rows.h"
#include "framework/tensor.h"
#include "framework/variable.h"

namespace loom {

class Scope;

struct SlotSpec {
  std::string name;
  std::string doc;
  bool duplicable = false;   // takes a list of variables
  bool dispensable = false;  // may be absent
};

struct AttrSpec {
  std::string name;
  std::string doc;
  proto::AttrType type = proto::INT;
  std::optional<Attribute> default_value;  // absent: the attribute is required
  std::function<Status(const Attribute&)> check;
};

// Shape inference sees an op through this interface, either at compile time (over VarDescs of
// a block; dims may hold -1) or at run time (over tensors in a scope; dims are known).
class InferShapeContext {
 public:
  virtual ~InferShapeContext() = default;
  virtual bool IsRuntime() const = 0;
  virtual const std::string& OpType() const = 0;
  virtual const AttributeMap& Attrs() const = 0;
  virtual int InputSize(const std::string& slot) const = 0;
  virtual int OutputSize(const std::string& slot) const = 0;
  virtual std::string InputVarName(const std::string& slot, int i = 0) const = 0;
  virtual std::string OutputVarName(const std::string& slot, int i = 0) const = 0;
  virtual DDim InputDim(const std::string& slot, int i = 0) const = 0;
  virtual DataType InputDtype(const std::string& slot, int i = 0) const = 0;
  virtual void SetOutputDim(const std::string& slot, const DDim& dims, int i = 0) = 0;
  virtual void SetOutputDtype(const std::string& slot, DataType dtype, int i = 0) = 0;
  // What a slot's variable holds: DENSE_TENSOR or SELECTED_ROWS (at compile time its VarDesc's
  // type, at run time the object the variable holds; DENSE_TENSOR when absent or empty).
  virtual proto::VarType::Type InputVarType(const std::string& slot, int i = 0) const = 0;
  // Declares what an output holds (ops whose output type follows their inputs or attributes:
  // an embedding's sparse gradient, sum). At run time it makes the variable hold that object.
  virtual void SetOutputVarType(const std::string& slot, proto::VarType::Type type, int i = 0) = 0;
  // "op 'mul' (block 0, #3)"
  virtual std::string Where() const = 0;

  bool HasInput(const std::string& slot) const { return InputSize(slot) > 0; }
  bool HasOutput(const std::string& slot) const { return OutputSize(slot) > 0; }
  template <typename T>
  const T& Attr(const std::string& name) const {
    return GetAttr<T>(Attrs(), name);
  }
  // Output slot takes the dims and dtype of an input slot (element-wise ops, grads).
  void ShareDimAndDtype(const std::string& in, const std::string& out, int i = 0) {
    SetOutputDim(out, InputDim(in, i), i);
    SetOutputDtype(out, InputDtype(in, i), i);
  }
  // InvalidArgument prefixed with the op's location.
  template <typename... Args>
  Status Error(Args&&... args) const {
    return InvalidArgument(Where(), ": ", std::forward<Args>(args)...);
  }
  // "input 'X' (var 'x', dims [2, 3])"
  std::string DescribeInput(const std::string& slot, int i = 0) const;
};

using InferShapeFn = Status (*)(InferShapeContext* ctx);
// Sets the variable types of an op's outputs from its inputs' types and attributes
// (SetOutputVarType); runs before shape inference, at compile time and at run time.
using InferVarTypeFn = Status (*)(InferShapeContext* ctx);

// When a call left running by a kernel actually ran (for timelines).
struct AsyncSpan {
  std::chrono::steady_clock::time_point begin{}, end{};
};
// A call still running when its kernel returned (e.g. a collective on the communicator's
// thread). Calling it blocks until the call ended and returns its status; it is called once.
// When span is not null, it receives when the call ran.
using AsyncWait = std::function<Status(AsyncSpan* span)>;
// Whether such a call has ended, without blocking (lets the executor run an op that needed the
// call as soon as it is done, ahead of ops that wait for later calls).
using AsyncDone = std::function<bool()>;

// What a kernel sees: its inputs and outputs as tensors, attributes and the device context.
class KernelContext {
 public:
  virtual ~KernelContext() = default;
  virtual const Tensor* InputOrNull(const std::string& slot, int i = 0) const = 0;
  virtual Tensor* OutputOrNull(const std::string& slot, int i = 0) const = 0;
  virtual int InputSize(const std::string& slot) const = 0;
  virtual int OutputSize(const std::string& slot) const = 0;
  virtual const AttributeMap& Attrs() const = 0;
  virtual const DeviceContext& device() const = 0;
  virtual std::string Where() const = 0;
  // The variable bound to a slot, for slots that hold no tensor (a communicator).
  virtual Variable* InputVariable(const std::string& slot, int i = 0) const = 0;
  virtual Variable* OutputVariable(const std::string& slot, int i = 0) const = 0;
  // Declares that the kernel left work running that reads or writes the op's variables: the
  // executor calls `wait` before any later op touches one of them, and before the run ends.
  // `done`, when given, tells without blocking whether the work has ended.
  virtual void SetAsync(AsyncWait wait, AsyncDone done = nullptr) const = 0;
  // Control-flow ops: the scope the op runs in, and a run of block `block` of the op's program
  // in `scope` (a scope the kernel made below scope()), on the op's place and thread. The block
  // must be a sub-block named by one of the op's attributes; RunBlock creates the block's own
  // variables in `scope` when they are missing there.
  virtual Scope* scope() const = 0;
  virtual Status RunBlock(int block, Scope* scope) const = 0;
  // The name of the variable bound to a slot ("" when absent).
  virtual std::string InputVarName(const std::string& slot, int i = 0) const = 0;
  virtual std::string OutputVarName(const std::string& slot, int i = 0) const = 0;

  const Tensor& Input(const std::string& slot, int i = 0) const;
  Tensor* Output(const std::string& slot, int i = 0) const;
  // The SelectedRows a slot's variable holds; null when it holds something else or is absent.
  const SelectedRows* InputSelectedRows(const std::string& slot, int i = 0) const;
  // Makes the slot's variable hold a SelectedRows (replacing a tensor) and returns it; null
  // when the slot is absent.
  SelectedRows* OutputSelectedRows(const std::string& slot, int i = 0) const;
  const Place& place() const { return device().place(); }
  template <typename T>
  const T& Attr(const std::string& name) const {
    return GetAttr<T>(Attrs(), name);
  }
  template <typename... Args>
  Status Error(Args&&... args) const {
    return InvalidArgument(Where(), ": ", std::forward<Args>(args)...);
  }
};

using KernelFn = Status (*)(const KernelContext& ctx);

// Makes the grad op descs of a forward op. Slot conventions: the grad op sees the forward
// inputs and outputs under their slot names, output grads as "<Slot>@GRAD", and writes input
// grads to "<Slot>@GRAD". Backward drops grads nobody needs and fills missing ones.
using GradMakerFn = std::vector<proto::OpDesc> (*)(const OpDesc& fwd);

// Builds the common grad op: type = fwd type + "_grad"; inputs: all forward inputs, all outputs
// and the outputs' grads; outputs: the grads of every input; attributes copied.
proto::OpDesc MakeDefaultGradOp(const OpDesc& fwd);
GradMakerFn DefaultGradMaker();

struct KernelKey {
  Place::Kind place;
  DataType dtype;
  bool operator<(const KernelKey& o) const {
    return place != o.place ? place < o.place : dtype < o.dtype;
  }
};

struct OpInfo {
  std::string type;
  std::string doc;
  bool has_maker = false;  // false while only kernels were registered
  std::vector<SlotSpec> inputs;
  std::vector<SlotSpec> outputs;
  // The attributes this entry declares itself. A grad op registered with AttrsFrom(fwd) also
  // accepts every attribute of op `attrs_from` (specs, defaults and checks as registered there;
  // its own declarations come first and win); AllAttrs() lists both.
  std::vector<AttrSpec> attrs;
  std::string attrs_from;
  InferShapeFn infer_shape = nullptr;
  InferVarTypeFn infer_var_type = nullptr;
  GradMakerFn grad_maker = nullptr;
  // A control-flow op that runs its sub-block repeatedly (while): backward builds its gradient
  // block for one iteration, with the gradients of the variables it carries from one
  // iteration to the next passed in under seed names (backward.h).
  bool repeats_sub_block = false;
  // INTS attributes that list sub-blocks the op runs (besides its BLOCK attributes), e.g.
  // listen_and_serv's optimize blocks: the executor prepares them like any sub-block.
  std::vector<std::string> sub_block_list_attrs;
  // An op whose effects reach outside the scope (messages to other processes): the executor,
  // which may otherwise run independent ops out of program order while a collective is in
  // flight, keeps the program order of such ops among themselves (a trainer's gradients are
  // sent before its barrier says the step is sent).
  bool ordered = false;
  // The kernel sets the LoD of its outputs itself (sequence ops). Otherwise an output with no
  // LoD after the kernel takes the LoD of the first input tensor that has one, when both have
  // the same number of rows (Fluid's ShareLoD of X to Out: element-wise ops, activations, fc,
  // embedding, and their gradients).
  bool sets_lod = false;
  // The slot whose dtype selects the kernel (default: the first input; none: attr "dtype").
  std::string kernel_dtype_slot;
  std::map<KernelKey, KernelFn> kernels;

  const SlotSpec* FindInput(const std::string& name) const;
  const SlotSpec* FindOutput(const std::string& name) const;
  // Own, inherited (AttrsFrom) or common attribute `name`; null when the op has none.
  const AttrSpec* FindAttr(const std::string& name) const;
  // The op's attributes: its own, then those inherited through AttrsFrom (resolved in the
  // registry at the call, so registration order does not matter); not the common ones.
  std::vector<const AttrSpec*> AllAttrs() const;
  KernelFn FindKernel(Place::Kind place, DataType dtype) const;
  // Attributes of desc with defaults filled in; errors for unknown, mistyped, missing or
  // failing-check attributes.
  StatusOr<AttributeMap> ResolveAttrs(const OpDesc& desc, const std::string& where) const;
};

class OpRegistry {
 public:
  static OpRegistry& Global();
  const OpInfo* Find(const std::string& type) const;
  OpInfo* GetOrCreate(const std::string& type);
  std::vector<std::string> Types() const;  // sorted

 private:
  std::map<std::string, std::unique_ptr<OpInfo>> ops_;
};

// Attributes every op accepts (op_role, op_role_var, ...).
const std::vector<AttrSpec>& CommonAttrs();

// Attributes Paddle's op makers declare that only steer Paddle's own implementation choices
// (use_mkldnn, use_cudnn, op_callstack, ...): every op accepts them, with Paddle's types and
// defaults, and Loom ignores them. An op that declares one itself (is_test on batch_norm and
// dropout) uses its own. data_format is accepted only where it says NCHW.
const std::vector<AttrSpec>& AcceptedAttrs();

// Declares an op; chain the builder calls. Example:
//   LOOM_REGISTER_OP(relu).Doc("...").Input("X", "...").Output("Out", "...")
//       .InferShape(UnaryInferShape).GradMaker(DefaultGradMaker());
class OpRegistrar {
 public:
  explicit OpRegistrar(const char* type);
  OpRegistrar& Doc(const std::string& doc);
  OpRegistrar& Input(const std::string& name, const std::string& doc, bool duplicable = false,
                     bool dispensable = false);
  OpRegistrar& Output(const std::string& name, const std::string& doc, bool duplicable = false,
                      bool dispensable = false);
  template <typename T>
  OpRegistrar& Attr(const std::string& name, T default_value, const std::string& doc,
                    std::function<Status(const T&)> check = nullptr) {
    return AddAttr(name, AttrTypeTrait<T>::value, Attribute(std::move(default_value)), doc,
                   Wrap<T>(name, std::move(check)));
  }
  template <typename T>
  OpRegistrar& RequiredAttr(const std::string& name, const std::string& doc,
                            std::function<Status(const T&)> check = nullptr) {
    return AddAttr(name, AttrTypeTrait<T>::value, std::nullopt, doc,
                   Wrap<T>(name, std::move(check)));
  }
  // The op accepts exactly the attributes of op `forward_type` (a grad op and its forward op:
  // the grad maker copies every forward attribute onto the grad op), besides any it declares
  // itself. Read from the registry at lookup time, so the forward op may be registered in any
  // translation unit.
  OpRegistrar& AttrsFrom(const std::string& forward_type);
  OpRegistrar& InferShape(InferShapeFn fn);
  OpRegistrar& InferVarType(InferVarTypeFn fn);
  OpRegistrar& GradMaker(GradMakerFn fn);
  OpRegistrar& RepeatsSubBlock();
  OpRegistrar& SubBlocksAttr(const std::string& ints_attr);
  OpRegistrar& Ordered();  // see OpInfo::ordered
  OpRegistrar& SetsLoD();  // see OpInfo::sets_lod
  OpRegistrar& KernelDtypeFrom(const std::string& slot);
  OpRegistrar& Kernel(Place::Kind place, DataType dtype, KernelFn fn);

 private:
  template <typename T>
  static std::function<Status(const Attribute&)> Wrap(const std::string& name,
                                                      std::function<Status(const T&)> check) {
    if (!check) return nullptr;
    return [check](const Attribute& a) { return check(std::get<T>(a)); };
  }
  OpRegistrar& AddAttr(const std::string& name, proto::AttrType type,
                       std::optional<Attribute> default_value, const std::string& doc,
                       std::function<Status(const Attribute&)> check);
  OpInfo* info_;
};

// Registers a kernel for an op declared elsewhere (e.g. CUDA kernels in a .cu file).
struct KernelRegistrar {
  KernelRegistrar(const char* type, Place::Kind place, DataType dtype, KernelFn fn);
};

// LOOM_REGISTER_OP(type).Doc(...).Input(...)...; registers at static initialization. The
// registrar is a handle to the registry's entry, copied into a static (nothing is leaked).
#define LOOM_REGISTER_OP(type)                                                               \
  [[maybe_unused]] static ::loom::OpRegistrar LOOM_CONCAT(loom_op_registrar_, __COUNTER__) = \
      ::loom::OpRegistrar(#type)

#define LOOM_REGISTER_KERNEL(type, place, dtype, fn)                               \
  static ::loom::KernelRegistrar LOOM_CONCAT(loom_kernel_registrar_, __COUNTER__)( \
      #type, ::loom::Place::place, ::loom::proto::dtype, fn)

// Common attribute checks.
std::function<Status(const int&)> Positive(const std::string& what);
std::function<Status(const int&)> NonNegative(const std::string& what);

}  // namespace loom
