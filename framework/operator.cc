#include "framework/operator.h"

#include <algorithm>
#include <variant>

namespace loom {

StatusOr<std::unique_ptr<Operator>> Operator::Create(const OpDesc& desc, int block, int index) {
  std::string where = OpLocation(desc.Type(), block, index);
  const OpInfo* info = OpRegistry::Global().Find(desc.Type());
  if (!info) return NotFound(where, ": unknown op type '", desc.Type(), "'");
  std::unique_ptr<Operator> op(new Operator());
  op->info_ = info;
  op->where_ = where;
  LOOM_ASSIGN_OR_RETURN(op->attrs_, info->ResolveAttrs(desc, where));
  for (const auto& [name, value] : op->attrs_)
    if (const auto* b = std::get_if<BlockIndex>(&value)) op->sub_blocks_.push_back(b->idx);
  for (const auto& name : info->sub_block_list_attrs)
    if (auto it = op->attrs_.find(name); it != op->attrs_.end())
      for (int b : std::get<std::vector<int>>(it->second)) op->sub_blocks_.push_back(b);
  for (const auto& s : desc.proto()->inputs()) {
    op->inputs_.push_back(Slot{s.parameter(), {s.arguments().begin(), s.arguments().end()}, {}});
    for (const auto& a : s.arguments()) op->all_inputs_.push_back(a);
  }
  for (const auto& s : desc.proto()->outputs()) {
    op->outputs_.push_back(Slot{s.parameter(), {s.arguments().begin(), s.arguments().end()}, {}});
    for (const auto& a : s.arguments()) op->all_outputs_.push_back(a);
  }
  return op;
}

const Operator::Slot* Operator::FindSlot(const std::vector<Slot>& slots,
                                         const std::string& name) const {
  for (const auto& s : slots)
    if (s.name == name) return &s;
  return nullptr;
}

int Operator::InputSize(const std::string& slot) const {
  const Slot* s = FindSlot(inputs_, slot);
  return s ? static_cast<int>(s->vars.size()) : 0;
}

int Operator::OutputSize(const std::string& slot) const {
  const Slot* s = FindSlot(outputs_, slot);
  return s ? static_cast<int>(s->vars.size()) : 0;
}

std::string Operator::InputVarName(const std::string& slot, int i) const {
  const Slot* s = FindSlot(inputs_, slot);
  return s && i < static_cast<int>(s->vars.size()) ? s->vars[i] : std::string();
}

std::string Operator::OutputVarName(const std::string& slot, int i) const {
  const Slot* s = FindSlot(outputs_, slot);
  return s && i < static_cast<int>(s->vars.size()) ? s->vars[i] : std::string();
}

const Tensor* Operator::InputOrNull(const std::string& slot, int i) const {
  const Slot* s = FindSlot(inputs_, slot);
  if (!s || i >= static_cast<int>(s->bound.size())) return nullptr;
  Variable* v = s->bound[i];
  return v && v->IsType<Tensor>() ? &v->Get<Tensor>() : nullptr;
}

Variable* Operator::InputVariable(const std::string& slot, int i) const {
  const Slot* s = FindSlot(inputs_, slot);
  if (!s || i >= static_cast<int>(s->bound.size())) return nullptr;
  return s->bound[i];
}

Variable* Operator::OutputVariable(const std::string& slot, int i) const {
  const Slot* s = FindSlot(outputs_, slot);
  if (!s || i >= static_cast<int>(s->bound.size())) return nullptr;
  return s->bound[i];
}

Tensor* Operator::OutputOrNull(const std::string& slot, int i) const {
  const Slot* s = FindSlot(outputs_, slot);
  if (!s || i >= static_cast<int>(s->bound.size()) || !s->bound[i]) return nullptr;
  Variable* v = s->bound[i];
  if (v->IsInitialized() && !v->IsType<Tensor>()) return nullptr;  // a SelectedRows, ...
  return v->GetMutable<Tensor>();
}

proto::VarType::Type Operator::InputVarType(const std::string& slot, int i) const {
  Variable* v = InputVariable(slot, i);
  return v && v->IsType<SelectedRows>() ? proto::VarType::SELECTED_ROWS
                                        : proto::VarType::DENSE_TENSOR;
}

void Operator::SetOutputVarType(const std::string& slot, proto::VarType::Type type, int i) {
  Variable* v = OutputVariable(slot, i);
  if (!v) return;
  if (type == proto::VarType::SELECTED_ROWS) {
    OutputSelectedRows(slot, i);
  } else if (type == proto::VarType::DENSE_TENSOR && v->IsType<SelectedRows>()) {
    v->Clear();
  }
}

DDim Operator::InputDim(const std::string& slot, int i) const {
  const Tensor* t = InputOrNull(slot, i);
  return t ? t->dims() : DDim();
}

DataType Operator::InputDtype(const std::string& slot, int i) const {
  const Tensor* t = InputOrNull(slot, i);
  return t ? t->dtype() : proto::FP32;
}

void Operator::SetOutputDim(const std::string& slot, const DDim& dims, int i) {
  if (Tensor* t = OutputOrNull(slot, i)) t->Resize(dims);
}

void Operator::SetOutputDtype(const std::string& slot, DataType dtype, int i) {
  if (Tensor* t = OutputOrNull(slot, i)) t->set_dtype(dtype);
}

Status Operator::Bind(const Scope& scope) {
  for (auto* slots : {&inputs_, &outputs_}) {
    for (auto& s : *slots) {
      s.bound.resize(s.vars.size());
      for (size_t i = 0; i < s.vars.size(); ++i) {
        if (s.vars[i] == kEmptyVarName) {
          s.bound[i] = nullptr;
          continue;
        }
        s.bound[i] = scope.FindVar(s.vars[i]);
        if (!s.bound[i])
          return NotFound(where_, ": ", slots == &inputs_ ? "input" : "output", " '", s.name,
                          "' var '", s.vars[i], "' does not exist in the scope");
      }
    }
  }
  bound_scope_ = scope.serial();
  return Status::OK();
}

Status Operator::SelectKernel(Place::Kind place, KernelFn* fn) {
  DataType dtype = proto::FP32;
  const Slot* slot = nullptr;
  if (!info_->kernel_dtype_slot.empty()) {
    slot = FindSlot(inputs_, info_->kernel_dtype_slot);
  } else {
    for (const auto& spec : info_->inputs) {
      slot = FindSlot(inputs_, spec.name);
      if (slot && !slot->vars.empty()) break;
      slot = nullptr;
    }
  }
  if (slot && !slot->bound.empty() && slot->bound[0] && slot->bound[0]->IsType<Tensor>()) {
    dtype = slot->bound[0]->Get<Tensor>().dtype();
  } else if (slot && !slot->bound.empty() && slot->bound[0] &&
             slot->bound[0]->IsType<SelectedRows>()) {
    dtype = slot->bound[0]->Get<SelectedRows>().value.dtype();
  } else if (auto it = attrs_.find("dtype"); it != attrs_.end()) {
    dtype = static_cast<DataType>(std::get<int>(it->second));
  }
  if (cached_kernel_ && cached_key_.place == place && cached_key_.dtype == dtype) {
    *fn = cached_kernel_;
    return Status::OK();
  }
  KernelFn k = info_->FindKernel(place, dtype);
  if (!k) {
    std::string have;
    for (const auto& kv : info_->kernels)
      have += StrCat(have.empty() ? "" : ", ", PlaceKindName(kv.first.place), "/",
                     DataTypeName(kv.first.dtype));
    return Unimplemented(where_, ": no ", PlaceKindName(place), " kernel for dtype ",
                         DataTypeName(dtype), " (registered: ", have.empty() ? "none" : have, ")");
  }
  cached_key_ = KernelKey{place, dtype};
  cached_kernel_ = k;
  *fn = k;
  return Status::OK();
}

Status Operator::RunBlock(int block, Scope* scope) const {
  if (std::find(sub_blocks_.begin(), sub_blocks_.end(), block) == sub_blocks_.end())
    return Internal(where_, ": block ", block, " is not a sub-block of this op");
  if (!runner_)
    return FailedPrecondition(where_, ": runs sub-block ", block,
                              ", but it was run outside an executor");
  return runner_->RunBlock(block, scope, *dev_);
}

Status Operator::Run(Scope* scope_ptr, const DeviceContext& dev, BlockRunner* runner) {
  const Scope& scope = *scope_ptr;
  if (scope.serial() != bound_scope_) LOOM_RETURN_IF_ERROR(Bind(scope));
  dev_ = &dev;
  scope_ = scope_ptr;
  runner_ = runner;
  async_wait_ = nullptr;
  async_done_ = nullptr;
  for (const auto& s : inputs_) {
    for (size_t i = 0; i < s.bound.size(); ++i) {
      const Variable* v = s.bound[i];
      if (!v) continue;
      bool other_object = v->IsInitialized() && !v->IsType<Tensor>();  // e.g. a communicator
      if (v->IsType<SelectedRows>()) other_object = v->Get<SelectedRows>().value.initialized();
      if (!other_object && (!v->IsType<Tensor>() || !v->Get<Tensor>().initialized()))
        return FailedPrecondition(where_, ": input '", s.name, "' var '", s.vars[i],
                                  "' has no value (not fed, not loaded, and no earlier op "
                                  "writes it)");
    }
  }
  // A kernel that cannot allocate, or a failed internal check, throws StatusError: reported
  // here as this op's error.
  try {
    if (info_->infer_var_type) LOOM_RETURN_IF_ERROR(info_->infer_var_type(this));
    if (info_->infer_shape) LOOM_RETURN_IF_ERROR(info_->infer_shape(this));
    KernelFn kernel = nullptr;
    LOOM_RETURN_IF_ERROR(SelectKernel(dev.place().kind, &kernel));
    const Tensor* lod_source = ClearOutputLoD();
    LOOM_RETURN_IF_ERROR(kernel(*this));
    if (lod_source && !info_->sets_lod) ShareLoD(*lod_source);
    return Status::OK();
  } catch (...) {
    Status st = StatusOfException(std::current_exception());
    if (st.code() != StatusCode::kResourceExhausted) return st.WithContext(where_);
    return Status(st.code(), StrCat(where_, ": ", st.message(), DescribeOutputs()));
  }
}

// Outputs that are not also inputs lose the LoD of an earlier run (the kernel, or ShareLoD,
// gives them this run's). Returns the first input tensor with a LoD, if any.
const Tensor* Operator::ClearOutputLoD() {
  const Tensor* source = nullptr;
  for (const auto& s : inputs_) {
    for (const Variable* v : s.bound)
      if (v && v->IsType<Tensor>() && v->Get<Tensor>().has_lod()) {
        source = &v->Get<Tensor>();
        break;
      }
    if (source) break;
  }
  for (auto& s : outputs_)
    for (Variable* v : s.bound) {
      if (!v || !v->IsType<Tensor>() || !v->Get<Tensor>().has_lod()) continue;
      bool is_input = false;
      for (const auto& in : inputs_)
        for (const Variable* u : in.bound) is_input |= u == v;
      if (!is_input) v->GetMutable<Tensor>()->set_lod({});
    }
  return source;
}

void Operator::ShareLoD(const Tensor& source) {
  const int64_t rows = source.dims().size() > 0 ? source.dims()[0] : -1;
  for (auto& s : outputs_)
    for (Variable* v : s.bound) {
      if (!v || !v->IsType<Tensor>()) continue;
      Tensor* t = v->GetMutable<Tensor>();
      if (!t->has_lod() && t->dims().size() > 0 && t->dims()[0] == rows) t->set_lod(source.lod());
    }
}

std::string Operator::DescribeOutputs() const {
  std::string out;
  for (const auto& s : outputs_) {
    for (size_t i = 0; i < s.bound.size(); ++i) {
      const Variable* v = s.bound[i];
      if (!v || !v->IsType<Tensor>()) continue;
      const Tensor& t = v->Get<Tensor>();
      out += StrCat(out.empty() ? " (outputs: " : ", ", "'", s.name, "' var '", s.vars[i],
                    "' dims ", t.dims().ToString());
    }
  }
  return out.empty() ? out : out + ")";
}

}  // namespace loom
