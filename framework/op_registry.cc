#include "framework/op_registry.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <utility>

#include "framework/op_registration_errors.h"

namespace loom {

std::string InferShapeContext::DescribeInput(const std::string& slot, int i) const {
  return StrCat("input '", slot, "' (var '", InputVarName(slot, i), "', dims ",
                InputDim(slot, i).ToString(), ")");
}

const Tensor& KernelContext::Input(const std::string& slot, int i) const {
  const Tensor* t = InputOrNull(slot, i);
  if (!t && InputSelectedRows(slot, i))
    throw StatusError(InvalidArgument(
        Where(), ": input '", slot, "' (var '", InputVarName(slot, i),
        "') is a SelectedRows (a sparse gradient) but this op needs a dense tensor; make it "
        "dense with is_sparse=False, or read its rows with get_tensor_from_selected_rows"));
  LOOM_CHECK(t != nullptr, Where(), ": kernel reads absent input ", slot);
  return *t;
}

Tensor* KernelContext::Output(const std::string& slot, int i) const {
  Tensor* t = OutputOrNull(slot, i);
  LOOM_CHECK(t != nullptr, Where(), ": kernel writes absent output ", slot);
  return t;
}

const SelectedRows* KernelContext::InputSelectedRows(const std::string& slot, int i) const {
  Variable* v = InputVariable(slot, i);
  return v && v->IsType<SelectedRows>() ? &v->Get<SelectedRows>() : nullptr;
}

SelectedRows* KernelContext::OutputSelectedRows(const std::string& slot, int i) const {
  Variable* v = OutputVariable(slot, i);
  if (!v) return nullptr;
  if (v->IsInitialized() && !v->IsType<SelectedRows>()) v->Clear();
  return v->GetMutable<SelectedRows>();
}

proto::OpDesc MakeDefaultGradOp(const OpDesc& fwd) {
  proto::OpDesc grad;
  OpDesc g(&grad);
  g.SetType(fwd.Type() + "_grad");
  for (const auto& slot : fwd.InputSlots()) {
    g.SetInput(slot, fwd.Input(slot));
    std::vector<std::string> grads;
    for (const auto& v : fwd.Input(slot)) grads.push_back(GradVarName(v));
    g.SetOutput(GradVarName(slot), grads);
  }
  for (const auto& slot : fwd.OutputSlots()) {
    g.SetInput(slot, fwd.Output(slot));
    std::vector<std::string> grads;
    for (const auto& v : fwd.Output(slot)) grads.push_back(GradVarName(v));
    g.SetInput(GradVarName(slot), grads);
  }
  for (const auto& a : fwd.proto()->attrs()) *grad.add_attrs() = a;
  return grad;
}

namespace {
std::vector<proto::OpDesc> DefaultGradMakerImpl(const OpDesc& fwd) {
  return {MakeDefaultGradOp(fwd)};
}
}  // namespace

GradMakerFn DefaultGradMaker() { return &DefaultGradMakerImpl; }

const SlotSpec* OpInfo::FindInput(const std::string& name) const {
  for (const auto& s : inputs)
    if (s.name == name) return &s;
  return nullptr;
}

const SlotSpec* OpInfo::FindOutput(const std::string& name) const {
  for (const auto& s : outputs)
    if (s.name == name) return &s;
  return nullptr;
}

namespace {
// The op whose attributes `info` inherits (AttrsFrom), or null.
const OpInfo* AttrsSource(const OpInfo& info) {
  if (info.attrs_from.empty()) return nullptr;
  const OpInfo* src = OpRegistry::Global().Find(info.attrs_from);
  LOOM_CHECK(src != nullptr, "op '", info.type, "' takes its attributes from op '", info.attrs_from,
             "', which is not registered");
  return src;
}
}  // namespace

const AttrSpec* OpInfo::FindAttr(const std::string& name) const {
  for (const AttrSpec* a : AllAttrs())
    if (a->name == name) return a;
  for (const auto& a : CommonAttrs())
    if (a.name == name) return &a;
  for (const auto& a : AcceptedAttrs())
    if (a.name == name) return &a;
  return nullptr;
}

std::vector<const AttrSpec*> OpInfo::AllAttrs() const {
  std::vector<const AttrSpec*> out;
  for (const auto& a : attrs) out.push_back(&a);
  if (const OpInfo* src = AttrsSource(*this)) {
    for (const AttrSpec* a : src->AllAttrs()) {
      bool declared = std::any_of(attrs.begin(), attrs.end(),
                                  [a](const AttrSpec& own) { return own.name == a->name; });
      if (!declared) out.push_back(a);
    }
  }
  return out;
}

KernelFn OpInfo::FindKernel(Place::Kind place, DataType dtype) const {
  auto it = kernels.find(KernelKey{place, dtype});
  return it == kernels.end() ? nullptr : it->second;
}

StatusOr<AttributeMap> OpInfo::ResolveAttrs(const OpDesc& desc, const std::string& where) const {
  AttributeMap out;
  for (const auto& a : desc.proto()->attrs()) {
    const AttrSpec* spec = FindAttr(a.name());
    if (!spec)
      return InvalidArgument(where, ": unknown attribute '", a.name(), "' (op '", type,
                             "' has no such attribute)");
    auto value = AttrFromProto(a);
    if (!value.ok()) return value.status().WithContext(where);
    if (AttrTypeOf(value.value()) != spec->type)
      return InvalidArgument(where, ": attribute '", a.name(), "' must be ",
                             AttrTypeName(spec->type), ", got ",
                             AttrTypeName(AttrTypeOf(value.value())));
    if (spec->check) {
      Status st = spec->check(value.value());
      if (!st.ok())
        return InvalidArgument(where, ": attribute '", a.name(),
                               "' = ", AttrToString(value.value()), ": ", st.message());
    }
    out[a.name()] = std::move(value).value();
  }
  auto fill = [&](const AttrSpec& spec) -> Status {
    if (out.count(spec.name)) return Status::OK();
    if (!spec.default_value)
      return InvalidArgument(where, ": required attribute '", spec.name, "' (",
                             AttrTypeName(spec.type), ") is missing");
    out[spec.name] = *spec.default_value;
    return Status::OK();
  };
  for (const AttrSpec* spec : AllAttrs()) LOOM_RETURN_IF_ERROR(fill(*spec));
  for (const auto& spec : CommonAttrs()) LOOM_RETURN_IF_ERROR(fill(spec));
  return out;
}

OpRegistry& OpRegistry::Global() {
  static auto* registry = new OpRegistry();
  return *registry;
}

const OpInfo* OpRegistry::Find(const std::string& type) const {
  auto it = ops_.find(type);
  if (it == ops_.end() || !it->second->has_maker) return nullptr;
  return it->second.get();
}

OpInfo* OpRegistry::GetOrCreate(const std::string& type) {
  auto& slot = ops_[type];
  if (!slot) {
    slot = std::make_unique<OpInfo>();
    slot->type = type;
  }
  return slot.get();
}

std::vector<std::string> OpRegistry::Types() const {
  std::vector<std::string> out;
  for (const auto& kv : ops_)
    if (kv.second->has_maker) out.push_back(kv.first);
  return out;
}

const std::vector<AttrSpec>& CommonAttrs() {
  static const auto* attrs = new std::vector<AttrSpec>{
      {kOpRoleAttr,
       "bitmask: forward 0, backward 1, optimize 2, rpc 4, dist 8, lr_sched 16, "
       "communication 32, loss 256",
       proto::INT, Attribute(0), nullptr},
      {kOpRoleVarAttr, "(param, grad) pairs this backward/optimizer op concerns", proto::STRINGS,
       Attribute(std::vector<std::string>{}), nullptr},
      {"op_namescope", "name scope the op was built in (informational)", proto::STRING,
       Attribute(std::string()), nullptr},
  };
  return *attrs;
}

const std::vector<AttrSpec>& AcceptedAttrs() {
  auto spec = [](const char* name, proto::AttrType type, Attribute def, const char* doc,
                 std::function<Status(const Attribute&)> check = nullptr) {
    return AttrSpec{name, StrCat(doc, " (accepted and ignored)"), type, std::move(def),
                    std::move(check)};
  };
  static const auto* attrs = new std::vector<AttrSpec>{
      spec("use_mkldnn", proto::BOOLEAN, Attribute(false), "Paddle: run the oneDNN kernel"),
      spec("use_cudnn", proto::BOOLEAN, Attribute(false), "Paddle: run the cuDNN kernel"),
      spec("use_quantizer", proto::BOOLEAN, Attribute(false), "Paddle: oneDNN int8"),
      spec("mkldnn_data_type", proto::STRING, Attribute(std::string("float32")),
           "Paddle: oneDNN data type"),
      spec("is_test", proto::BOOLEAN, Attribute(false),
           "Paddle: inference mode (ops whose results depend on it declare it themselves)"),
      spec("op_callstack", proto::STRINGS, Attribute(std::vector<std::string>{}),
           "Paddle: where the op was built"),
      spec("op_device", proto::STRING, Attribute(std::string()), "Paddle: device placement"),
      spec("with_quant_attr", proto::BOOLEAN, Attribute(false), "Paddle: quantization info"),
      spec("workspace_size_MB", proto::INT, Attribute(512), "Paddle: cuDNN workspace"),
      spec("exhaustive_search", proto::BOOLEAN, Attribute(false), "Paddle: cuDNN search"),
      spec("numeric_stable_mode", proto::BOOLEAN, Attribute(true),
           "Paddle: softmax_with_cross_entropy's stable form (Loom's is always stable)"),
      spec("force_cpu", proto::BOOLEAN, Attribute(false), "Paddle: keep the output on the CPU"),
      spec("data_format", proto::STRING, Attribute(std::string("AnyLayout")),
           "Paddle: tensor layout; Loom computes NCHW",
           [](const Attribute& a) {
             const auto& v = std::get<std::string>(a);
             return v == "AnyLayout" || v == "NCHW" || v == "NCDHW"
                        ? Status::OK()
                        : Unimplemented("data_format '", v,
                                        "': Loom computes NCHW (AnyLayout / NCHW) only");
           }),
  };
  return *attrs;
}

namespace {

// Registrations refused (an op type registered twice: a library of custom ops that reuses a
// type), kept until TakeOpRegistrationErrors. A refused registrar fills an entry of its own
// that nothing looks up, so the op registered first stays as it was.
struct RefusedRegistrations {
  std::mutex mu;
  std::vector<std::string> errors;
  std::deque<OpInfo> entries;
};

RefusedRegistrations& Refused() {
  static auto* r = new RefusedRegistrations;  // outlives every static registrar
  return *r;
}

OpInfo* Register(const char* type) {
  OpInfo* info = OpRegistry::Global().GetOrCreate(type);
  if (!info->has_maker) {
    info->has_maker = true;
    return info;
  }
  RefusedRegistrations& r = Refused();
  std::lock_guard<std::mutex> lock(r.mu);
  r.errors.push_back(StrCat("op '", type, "' registered twice (the second registration is "
                            "ignored)"));
  r.entries.emplace_back();
  r.entries.back().type = type;
  return &r.entries.back();
}

}  // namespace

std::vector<std::string> TakeOpRegistrationErrors() {
  RefusedRegistrations& r = Refused();
  std::lock_guard<std::mutex> lock(r.mu);
  return std::exchange(r.errors, {});
}

OpRegistrar::OpRegistrar(const char* type) : info_(Register(type)) {}

OpRegistrar& OpRegistrar::Doc(const std::string& doc) {
  info_->doc = doc;
  return *this;
}

OpRegistrar& OpRegistrar::Input(const std::string& name, const std::string& doc, bool duplicable,
                                bool dispensable) {
  info_->inputs.push_back(SlotSpec{name, doc, duplicable, dispensable});
  return *this;
}

OpRegistrar& OpRegistrar::Output(const std::string& name, const std::string& doc, bool duplicable,
                                 bool dispensable) {
  info_->outputs.push_back(SlotSpec{name, doc, duplicable, dispensable});
  return *this;
}

OpRegistrar& OpRegistrar::AddAttr(const std::string& name, proto::AttrType type,
                                  std::optional<Attribute> default_value, const std::string& doc,
                                  std::function<Status(const Attribute&)> check) {
  info_->attrs.push_back(AttrSpec{name, doc, type, std::move(default_value), std::move(check)});
  return *this;
}

OpRegistrar& OpRegistrar::AttrsFrom(const std::string& forward_type) {
  LOOM_CHECK(forward_type != info_->type, "op '", forward_type, "' takes attributes from itself");
  info_->attrs_from = forward_type;
  return *this;
}

OpRegistrar& OpRegistrar::InferShape(InferShapeFn fn) {
  info_->infer_shape = fn;
  return *this;
}

OpRegistrar& OpRegistrar::InferVarType(InferVarTypeFn fn) {
  info_->infer_var_type = fn;
  return *this;
}

OpRegistrar& OpRegistrar::SubBlocksAttr(const std::string& ints_attr) {
  info_->sub_block_list_attrs.push_back(ints_attr);
  return *this;
}

OpRegistrar& OpRegistrar::SetsLoD() {
  info_->sets_lod = true;
  return *this;
}

OpRegistrar& OpRegistrar::Ordered() {
  info_->ordered = true;
  return *this;
}

OpRegistrar& OpRegistrar::RepeatsSubBlock() {
  info_->repeats_sub_block = true;
  return *this;
}

OpRegistrar& OpRegistrar::GradMaker(GradMakerFn fn) {
  info_->grad_maker = fn;
  return *this;
}

OpRegistrar& OpRegistrar::KernelDtypeFrom(const std::string& slot) {
  info_->kernel_dtype_slot = slot;
  return *this;
}

OpRegistrar& OpRegistrar::Kernel(Place::Kind place, DataType dtype, KernelFn fn) {
  info_->kernels[KernelKey{place, dtype}] = fn;
  return *this;
}

KernelRegistrar::KernelRegistrar(const char* type, Place::Kind place, DataType dtype, KernelFn fn) {
  OpRegistry::Global().GetOrCreate(type)->kernels[KernelKey{place, dtype}] = fn;
}

std::function<Status(const int&)> Positive(const std::string& what) {
  return [what](const int& v) {
    return v > 0 ? Status::OK() : InvalidArgument(what, " must be > 0, got ", v);
  };
}

std::function<Status(const int&)> NonNegative(const std::string& what) {
  return [what](const int& v) {
    return v >= 0 ? Status::OK() : InvalidArgument(what, " must be >= 0, got ", v);
  };
}

}  // namespace loom
