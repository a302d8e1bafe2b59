// loom.core: the C++ framework seen from Python. Descs are edited in place through views that
// keep their ProgramDesc alive; Status errors become Python exceptions in one place.
#include <pybind11/stl.h>

#include "base/interrupt.h"
#include "executor/executor.h"
#include "framework/backward.h"
#include "framework/file_util.h"
#include "framework/op_registration_errors.h"
#include "framework/op_registry.h"
#include "framework/serialization.h"
#include "framework/verifier.h"
#include "loom/config.h"
#include "python/core/common.h"

namespace loom::python {

namespace {

PyObject* g_errors[16] = {};

PyObject* MakeError(py::module_& m, const char* name, PyObject* builtin, PyObject* base) {
  std::string full = std::string("loom.core.") + name;
  PyObject* bases = builtin ? PyTuple_Pack(2, base, builtin) : PyTuple_Pack(1, base);
  PyObject* cls = PyErr_NewException(full.c_str(), bases, nullptr);
  Py_DECREF(bases);
  m.add_object(name, py::handle(cls));
  return cls;
}

}  // namespace

namespace {

unsigned long g_main_thread = 0;

bool PythonInterrupted() {
  if (PyThread_get_thread_ident() != g_main_thread || !Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return false;
#else
  if (_Py_IsFinalizing()) return false;
#endif
  py::gil_scoped_acquire gil;
  return PyOS_InterruptOccurred() != 0;  // takes the SIGINT (KeyboardInterrupt is raised for it)
}

}  // namespace

void RegisterErrors(py::module_& m) {
  PyObject* base = PyErr_NewException("loom.core.LoomError", PyExc_RuntimeError, nullptr);
  m.add_object("LoomError", py::handle(base));
  auto set = [&](StatusCode c, const char* name, PyObject* builtin) {
    g_errors[static_cast<int>(c)] = MakeError(m, name, builtin, base);
  };
  set(StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError);
  set(StatusCode::kNotFound, "NotFoundError", PyExc_LookupError);
  set(StatusCode::kAlreadyExists, "AlreadyExistsError", PyExc_ValueError);
  set(StatusCode::kCorruption, "CorruptionError", PyExc_ValueError);
  set(StatusCode::kIOError, "IOError", PyExc_OSError);
  set(StatusCode::kUnimplemented, "UnimplementedError", PyExc_NotImplementedError);
  set(StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr);
  set(StatusCode::kInternal, "InternalError", nullptr);
  set(StatusCode::kTimeout, "TimeoutError", PyExc_TimeoutError);
  set(StatusCode::kResourceExhausted, "ResourceExhaustedError", PyExc_MemoryError);
  set(StatusCode::kAborted, "AbortedError", nullptr);
  g_errors[0] = base;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      if (IsInterrupted(e.status())) {  // Ctrl-C during a wait: what Python raises for it
        PyErr_SetString(PyExc_KeyboardInterrupt, e.status().message().c_str());
        return;
      }
      PyObject* cls = g_errors[static_cast<int>(e.status().code())];
      PyErr_SetString(cls ? cls : g_errors[0], e.status().message().c_str());
    }
  });
  // Ctrl-C in Python's main thread while Loom waits there (base/interrupt.h): SIGINT only sets
  // a flag that Python reads between bytecodes, so the waits ask for it.
  g_main_thread =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  SetInterruptCheck(&PythonInterrupted);
}

namespace {

// ------------------------------------------------------------------ attributes

template <typename T>
std::vector<T> ListOf(py::handle v) {
  std::vector<T> out;
  for (py::handle x : v) out.push_back(x.cast<T>());
  return out;
}

Attribute AttrFromPy(const std::string& name, py::handle v, std::optional<proto::AttrType> want) {
  try {
    if (want) {
      switch (*want) {
        case proto::INT: return v.cast<int>();
        case proto::FLOAT: return v.cast<float>();
        case proto::STRING: return v.cast<std::string>();
        case proto::INTS: return ListOf<int>(v);
        case proto::FLOATS: return ListOf<float>(v);
        case proto::STRINGS: return ListOf<std::string>(v);
        case proto::BOOLEAN: return v.cast<bool>();
        case proto::BOOLEANS: return ListOf<bool>(v);
        case proto::BLOCK: return BlockIndex{v.cast<int>()};
        case proto::LONG: return v.cast<int64_t>();
        case proto::LONGS: return ListOf<int64_t>(v);
      }
    }
    if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
    if (py::isinstance<py::int_>(v)) {
      int64_t x = v.cast<int64_t>();
      if (x >= INT32_MIN && x <= INT32_MAX) return static_cast<int>(x);
      return x;
    }
    if (py::isinstance<py::float_>(v)) return v.cast<float>();
    if (py::isinstance<py::str>(v)) return v.cast<std::string>();
    if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      py::sequence seq = v.cast<py::sequence>();
      if (seq.size() == 0) return std::vector<int>{};
      py::handle first = seq[0];
      if (py::isinstance<py::bool_>(first)) return ListOf<bool>(v);
      if (py::isinstance<py::int_>(first)) return ListOf<int>(v);
      if (py::isinstance<py::float_>(first)) return ListOf<float>(v);
      if (py::isinstance<py::str>(first)) return ListOf<std::string>(v);
    }
  } catch (const py::cast_error&) {
    Throw(InvalidArgument("attribute '", name, "': cannot convert ",
                          std::string(py::str(py::type::of(v))), " to ",
                          want ? AttrTypeName(*want) : "an attribute"));
  }
  Throw(InvalidArgument("attribute '", name, "': unsupported Python type ",
                        std::string(py::str(py::type::of(v)))));
}

py::object AttrToPy(const Attribute& a) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, BlockIndex>)
          return py::int_(v.idx);
        else
          return py::cast(v);
      },
      a);
}

// ------------------------------------------------------------------ desc views
// Views hold a shared_ptr to their program so Python references never dangle.

using ProgramPtr = std::shared_ptr<ProgramDesc>;

struct PyVar {
  ProgramPtr program;
  VarDesc desc;
};
struct PyOp {
  ProgramPtr program;
  OpDesc desc;
};
struct PyBlock {
  ProgramPtr program;
  int idx;
  BlockDesc* get() const { return program->Block(idx); }
};

PyVar CheckedVar(const PyBlock& b, const std::string& name, bool recursive) {
  VarDesc v = recursive ? b.get()->FindVarRecursive(name) : b.get()->FindVar(name);
  if (!v) Throw(NotFound("var '", name, "' is not in block ", b.idx));
  return PyVar{b.program, v};
}

void SetOpAttr(PyOp& op, const std::string& name, py::handle value) {
  std::optional<proto::AttrType> want;
  if (const OpInfo* info = OpRegistry::Global().Find(op.desc.Type()))
    if (const AttrSpec* spec = info->FindAttr(name)) want = spec->type;
  op.desc.SetAttr(name, AttrFromPy(name, value, want));
}

using SlotMap = std::map<std::string, std::vector<std::string>>;

py::dict OpInfoToDict(const OpInfo& info) {
  py::dict d;
  d["type"] = info.type;
  d["doc"] = info.doc;
  auto slots = [](const std::vector<SlotSpec>& specs) {
    py::list l;
    for (const auto& s : specs) {
      py::dict e;
      e["name"] = s.name;
      e["doc"] = s.doc;
      e["duplicable"] = s.duplicable;
      e["dispensable"] = s.dispensable;
      l.append(e);
    }
    return l;
  };
  d["inputs"] = slots(info.inputs);
  d["outputs"] = slots(info.outputs);
  py::list attrs;
  const std::vector<const AttrSpec*> all = info.AllAttrs();
  for (size_t i = 0; i < all.size(); ++i) {
    const AttrSpec& a = *all[i];
    py::dict e;
    e["name"] = a.name;
    e["type"] = std::string(AttrTypeName(a.type));
    e["doc"] = a.doc;
    e["default"] = a.default_value ? AttrToPy(*a.default_value) : py::none();
    e["required"] = !a.default_value.has_value();
    e["from"] = i < info.attrs.size() ? py::object(py::none()) : py::str(info.attrs_from);
    attrs.append(e);
  }
  d["attrs"] = attrs;
  py::list kernels;
  for (const auto& kv : info.kernels)
    kernels.append(py::make_tuple(PlaceKindName(kv.first.place), DataTypeName(kv.first.dtype)));
  d["kernels"] = kernels;
  d["has_grad"] = info.grad_maker != nullptr;
  return d;
}

}  // namespace

FeedMap FeedsFromPy(const py::dict& feed, const Place& place) {
  FeedMap feeds;
  for (auto item : feed) {
    std::string name = item.first.cast<std::string>();
    if (py::isinstance<Tensor>(item.second)) {
      feeds[name] = item.second.cast<Tensor>();
    } else {
      py::array a = py::array::ensure(item.second);
      if (!a) Throw(InvalidArgument("feed '", name, "' is not convertible to a numpy array"));
      // CPU feeds share the array's memory (no copy); device feeds are copied over.
      feeds[name] = place.is_cpu() ? TensorViewOfArray(a, "feed '" + name + "'")
                                   : TensorFromArray(a, place, "feed '" + name + "'");
    }
  }
  return feeds;
}

namespace {

// The element types, variable types and op roles, and the build's facts.
void RegisterTypes(py::module_& m) {
  py::enum_<proto::DataType>(m, "DataType")
      .value("BOOL", proto::BOOL)
      .value("INT32", proto::INT32)
      .value("INT64", proto::INT64)
      .value("FP16", proto::FP16)
      .value("FP32", proto::FP32)
      .value("FP64", proto::FP64);
  m.def("parse_dtype", [](const std::string& s) { return ValueOrThrow(ParseDataType(s)); });
  m.def("dtype_name", [](proto::DataType d) { return std::string(DataTypeName(d)); });
  m.def("is_compiled_with_cuda", [] { return static_cast<bool>(LOOM_CUDA_ENABLED); });
  m.attr("__version__") = LOOM_VERSION;
  m.attr("kOpRoleForward") = static_cast<int>(kOpRoleForward);
  m.attr("kOpRoleBackward") = static_cast<int>(kOpRoleBackward);
  m.attr("kOpRoleOptimize") = static_cast<int>(kOpRoleOptimize);
  m.attr("kOpRoleLoss") = static_cast<int>(kOpRoleLoss);
  m.attr("kOpRoleLRSched") = static_cast<int>(kOpRoleLRSched);
  m.attr("kOpRoleRPC") = static_cast<int>(kOpRoleRPC);

  py::enum_<proto::VarType::Type>(m, "VarType")
      .value("DENSE_TENSOR", proto::VarType::DENSE_TENSOR)
      .value("SELECTED_ROWS", proto::VarType::SELECTED_ROWS)
      .value("FEED_MINIBATCH", proto::VarType::FEED_MINIBATCH)
      .value("FETCH_LIST", proto::VarType::FETCH_LIST)
      .value("STEP_SCOPES", proto::VarType::STEP_SCOPES)
      .value("LOD_TENSOR_ARRAY", proto::VarType::LOD_TENSOR_ARRAY)
      .value("RAW", proto::VarType::RAW)
      .value("COMMUNICATOR", proto::VarType::COMMUNICATOR);
}

// VarDesc and OpDesc: views into a program that keep it alive.
void RegisterVarAndOpDescs(py::module_& m) {
  py::class_<PyVar>(m, "VarDesc")
      .def("name", [](const PyVar& v) { return v.desc.Name(); })
      .def("type", [](const PyVar& v) { return v.desc.Type(); })
      .def("set_type", [](PyVar& v, proto::VarType::Type t) { v.desc.SetType(t); })
      .def("dtype", [](const PyVar& v) { return v.desc.Dtype(); })
      .def("set_dtype", [](PyVar& v, proto::DataType d) { v.desc.SetDtype(d); })
      .def("shape", [](const PyVar& v) { return v.desc.Dims().vec(); })
      .def("set_shape",
           [](PyVar& v, const std::vector<int64_t>& s) {
             if (s.size() > static_cast<size_t>(DDim::kMaxRank))
               Throw(InvalidArgument("var '", v.desc.Name(), "': rank ", s.size(), " too large"));
             v.desc.SetDims(DDim(s));
           })
      .def("lod_level", [](const PyVar& v) { return v.desc.LoDLevel(); })
      .def("set_lod_level",
           [](PyVar& v, int level) {
             if (level < 0 || level > 8)
               Throw(InvalidArgument("var '", v.desc.Name(), "': lod_level ", level,
                                     " is not in 0..8"));
             v.desc.SetLoDLevel(level);
           })
      .def("persistable", [](const PyVar& v) { return v.desc.Persistable(); })
      .def("set_persistable", [](PyVar& v, bool b) { v.desc.SetPersistable(b); })
      .def("stop_gradient", [](const PyVar& v) { return v.desc.StopGradient(); })
      .def("set_stop_gradient", [](PyVar& v, bool b) { v.desc.SetStopGradient(b); })
      .def("is_parameter", [](const PyVar& v) { return v.desc.IsParameter(); })
      .def("set_is_parameter", [](PyVar& v, bool b) { v.desc.SetIsParameter(b); });

  py::class_<PyOp>(m, "OpDesc")
      .def("type", [](const PyOp& o) { return o.desc.Type(); })
      .def("set_type", [](PyOp& o, const std::string& t) { o.desc.SetType(t); })
      .def("input", [](const PyOp& o, const std::string& s) { return o.desc.Input(s); })
      .def("output", [](const PyOp& o, const std::string& s) { return o.desc.Output(s); })
      .def("set_input", [](PyOp& o, const std::string& s,
                           const std::vector<std::string>& v) { o.desc.SetInput(s, v); })
      .def("set_output", [](PyOp& o, const std::string& s,
                            const std::vector<std::string>& v) { o.desc.SetOutput(s, v); })
      .def("input_names", [](const PyOp& o) { return o.desc.InputSlots(); })
      .def("output_names", [](const PyOp& o) { return o.desc.OutputSlots(); })
      .def("input_arg_names", [](const PyOp& o) { return o.desc.InputArgumentNames(); })
      .def("output_arg_names", [](const PyOp& o) { return o.desc.OutputArgumentNames(); })
      .def("rename_input",
           [](PyOp& o, const std::string& a, const std::string& b) { o.desc.RenameInput(a, b); })
      .def("rename_output",
           [](PyOp& o, const std::string& a, const std::string& b) { o.desc.RenameOutput(a, b); })
      .def("has_attr", [](const PyOp& o, const std::string& n) { return o.desc.HasAttr(n); })
      .def("attr", [](const PyOp& o,
                      const std::string& n) { return AttrToPy(ValueOrThrow(o.desc.GetAttr(n))); })
      .def(
          "attr_type",
          [](const PyOp& o, const std::string& n) {
            return std::string(AttrTypeName(AttrTypeOf(ValueOrThrow(o.desc.GetAttr(n)))));
          },
          "The type the attribute is stored with, spelled as op_info() spells types.")
      .def("set_attr", &SetOpAttr,
           "Sets an attribute; for registered ops the value is converted to the declared type.")
      .def("remove_attr", [](PyOp& o, const std::string& n) { o.desc.RemoveAttr(n); })
      .def("attr_names", [](const PyOp& o) { return o.desc.AttrNames(); });
}

// BlockDesc: a view into a program that keeps it alive.
void RegisterBlockDesc(py::module_& m) {
  py::class_<PyBlock>(m, "BlockDesc")
      .def_property_readonly("idx", [](const PyBlock& b) { return b.idx; })
      .def_property_readonly("parent_idx", [](const PyBlock& b) { return b.get()->ParentIdx(); })
      .def(
          "var",
          [](PyBlock& b, const std::string& n) {
            return PyVar{b.program, b.get()->Var(n)};
          },
          "Finds or creates a var in this block.")
      .def("find_var",
           [](const PyBlock& b, const std::string& n) { return CheckedVar(b, n, false); })
      .def("find_var_recursive",
           [](const PyBlock& b, const std::string& n) { return CheckedVar(b, n, true); })
      .def("has_var", [](const PyBlock& b, const std::string& n) { return b.get()->HasVar(n); })
      .def("has_var_recursive",
           [](const PyBlock& b, const std::string& n) {
             return static_cast<bool>(b.get()->FindVarRecursive(n));
           })
      .def("remove_var", [](PyBlock& b, const std::string& n) { return b.get()->RemoveVar(n); })
      .def("all_vars",
           [](const PyBlock& b) {
             std::vector<PyVar> out;
             for (VarDesc v : b.get()->AllVars()) out.push_back(PyVar{b.program, v});
             return out;
           })
      .def("op_size", [](const PyBlock& b) { return b.get()->OpSize(); })
      .def("op",
           [](const PyBlock& b, int i) {
             if (i < 0 || i >= b.get()->OpSize())
               Throw(InvalidArgument("op index ", i, " out of range (block ", b.idx, " has ",
                                     b.get()->OpSize(), " ops)"));
             return PyOp{b.program, b.get()->Op(i)};
           })
      .def("append_op",
           [](PyBlock& b) {
             return PyOp{b.program, b.get()->AppendOp()};
           })
      .def("insert_op",
           [](PyBlock& b, int i) {
             if (i < 0 || i > b.get()->OpSize())
               Throw(InvalidArgument("insert position ", i, " out of range"));
             return PyOp{b.program, b.get()->InsertOp(i)};
           })
      .def("remove_op",
           [](PyBlock& b, int i) {
             if (i < 0 || i >= b.get()->OpSize())
               Throw(InvalidArgument("op index ", i, " out of range"));
             b.get()->RemoveOp(i);
           })
      .def(
          "infer_shape",
          [](PyBlock& b, int i) { ThrowIfError(InferShapeAtCompileTime(b.get(), i)); },
          "Runs compile-time shape inference of op i, updating its output vars.");
}

// ProgramDesc: the IR a program is built in, saved and loaded as.
void RegisterProgramDesc(py::module_& m) {
  py::class_<ProgramDesc, ProgramPtr>(m, "ProgramDesc")
      .def(py::init<>())
      .def("clone", [](const ProgramDesc& p) { return std::make_shared<ProgramDesc>(p); })
      .def("num_blocks", &ProgramDesc::NumBlocks)
      .def("block",
           [](ProgramPtr p, int i) {
             if (i < 0 || i >= p->NumBlocks())
               Throw(InvalidArgument("block ", i, " does not exist"));
             return PyBlock{p, i};
           })
      .def("append_block",
           [](ProgramPtr p, int parent) {
             if (parent < 0 || parent >= p->NumBlocks())
               Throw(InvalidArgument("block ", parent, " does not exist"));
             BlockDesc* b = p->AppendBlock(*p->Block(parent));
             return PyBlock{p, b->Idx()};
           })
      .def("serialize_to_string",
           [](const ProgramDesc& p) {
             std::string s;
             p.proto().SerializeToString(&s);
             return py::bytes(s);
           })
      .def_static("parse_from_string",
                  [](const py::bytes& b) {
                    return std::make_shared<ProgramDesc>(
                        ValueOrThrow(ParseProgram(std::string(b), "bytes")));
                  })
      .def("to_text", [](const ProgramDesc& p) { return ProgramToText(p); })
      .def("verify", [](const ProgramDesc& p) { ThrowIfError(VerifyProgram(p)); })
      .def("save", [](const ProgramDesc& p,
                      const std::string& path) { ThrowIfError(SaveProgram(p, path)); })
      .def_static("load", [](const std::string& path) {
        return std::make_shared<ProgramDesc>(ValueOrThrow(LoadProgram(path)));
      });
}

// Functions over programs: backward, verification, inference, the registry.
void RegisterProgramFunctions(py::module_& m) {
  m.def(
      "append_backward",
      [](ProgramDesc& p, const std::string& loss, const std::set<std::string>& no_grad) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& pg : ValueOrThrow(AppendBackward(&p, loss, no_grad)))
          out.emplace_back(pg.param, pg.grad);
        return out;
      },
      py::arg("program"), py::arg("loss"), py::arg("no_grad_set") = std::set<std::string>{},
      "Appends grad ops for loss to block 0; returns [(param, grad)].");

  m.def(
      "registered_ops", [] { return OpRegistry::Global().Types(); },
      "The types of every registered op, sorted.");
  m.def("take_op_registration_errors", &TakeOpRegistrationErrors,
        "Registrations refused since the last call (an op type registered twice), cleared.");
  m.def(
      "op_info",
      [](const std::string& type) {
        const OpInfo* info = OpRegistry::Global().Find(type);
        if (!info) Throw(NotFound("unknown op type '", type, "'"));
        return OpInfoToDict(*info);
      },
      py::arg("type"),
      "The registry entry of an op type as a dict: type, doc, inputs and outputs (each "
      "{name, doc, duplicable, dispensable}), attrs (each {name, type, doc, default, required, "
      "from}: type as AttrTypeName spells it ('int', 'float', 'int list', ...), from the forward "
      "op a grad op takes the attribute from, else None; the common attributes such as "
      "op_role are not listed: see common_attrs()), kernels ([(place, dtype)]) and has_grad. "
      "Raises NotFoundError for an unknown type.");
  m.def(
      "accepted_attrs",
      [] {
        py::list out;
        for (const AttrSpec& a : AcceptedAttrs()) {
          py::dict e;
          e["name"] = a.name;
          e["type"] = std::string(AttrTypeName(a.type));
          e["doc"] = a.doc;
          out.append(e);
        }
        return out;
      },
      "Paddle's implementation-choice attributes every op accepts and Loom ignores "
      "(use_mkldnn, use_cudnn, ...).");
  m.def(
      "common_attrs",
      [] {
        py::list out;
        for (const AttrSpec& a : CommonAttrs()) {
          py::dict e;
          e["name"] = a.name;
          e["type"] = std::string(AttrTypeName(a.type));
          e["doc"] = a.doc;
          out.append(e);
        }
        return out;
      },
      "The attributes every op accepts (op_role, op_role_var, op_namescope) as "
      "[{name, type, doc}].");
}

// Scope and Variable: where a run's variables live.
void RegisterScope(py::module_& m) {
  py::class_<Scope, std::shared_ptr<Scope>>(m, "Scope")
      .def(py::init<>())
      .def(
          "var", [](Scope& s, const std::string& n) { return s.Var(n); },
          py::return_value_policy::reference_internal)
      .def(
          "find_var", [](Scope& s, const std::string& n) { return s.FindVar(n); },
          py::return_value_policy::reference_internal)
      .def("erase_local_var", &Scope::EraseLocalVar,
           "Drops a variable of this scope (not of its parents); returns whether it existed.")
      .def("local_var_names", &Scope::LocalVarNames)
      .def("persistables_generation", &Scope::persistables_generation,
           "Advances each time a run or a load writes this scope's persistable variables.");

  py::class_<SelectedRows>(m, "SelectedRows",
                           "Some rows of a [height, ...] tensor: ids (rows()), their values "
                           "(get_tensor(), one row per id) and height(); an embedding's sparse "
                           "gradient.")
      .def(py::init<>())
      .def(
          "rows", [](const SelectedRows& s) { return s.rows; }, "The ids, in order (may repeat).")
      .def(
          "set_rows", [](SelectedRows& s, const std::vector<int64_t>& r) { s.rows = r; },
          "Sets the ids.")
      .def(
          "height", [](const SelectedRows& s) { return s.height; }, "The dense row count.")
      .def(
          "set_height", [](SelectedRows& s, int64_t h) { s.height = h; }, "Sets the height.")
      .def(
          "get_tensor", [](SelectedRows& s) { return &s.value; },
          py::return_value_policy::reference_internal, "The value: one row per id.")
      .def(
          "to_dense",
          [](const SelectedRows& s) {
            SelectedRows host{s.rows, Tensor(), s.height};
            if (s.value.initialized()) TensorCopy(s.value, Place::CPU(), &host.value);
            Tensor dense;
            ThrowIfError(SelectedRowsToDense(host, &dense));
            return dense;
          },
          "A dense [height, ...] tensor with the values scattered (repeats added).")
      .def(
          "merged",
          [](const SelectedRows& s) {
            SelectedRows host{s.rows, Tensor(), s.height}, out;
            if (s.value.initialized()) TensorCopy(s.value, Place::CPU(), &host.value);
            ThrowIfError(MergeRows(host, &out));
            return out;
          },
          "A copy with repeated ids summed: one row per id, ascending.")
      .def("__repr__", [](const SelectedRows& s) { return SelectedRowsSummary(s); });

  py::class_<Variable>(m, "Variable")
      .def(
          "get_tensor",
          [](Variable& v) {
            if (v.IsType<SelectedRows>())
              Throw(
                  InvalidArgument("the variable holds a SelectedRows (a sparse gradient): "
                                  "use get_selected_rows()"));
            return v.GetMutable<Tensor>();
          },
          py::return_value_policy::reference_internal)
      .def(
          "get_selected_rows",
          [](Variable& v) {
            if (v.IsInitialized() && !v.IsType<SelectedRows>())
              Throw(
                  InvalidArgument("the variable holds a dense tensor, not a SelectedRows: "
                                  "use get_tensor()"));
            return v.GetMutable<SelectedRows>();
          },
          py::return_value_policy::reference_internal,
          "The SelectedRows the variable holds (an embedding's sparse gradient).")
      .def("is_selected_rows", [](const Variable& v) { return v.IsType<SelectedRows>(); })
      .def("is_initialized", &Variable::IsInitialized);

  py::class_<PreparedBlock>(m, "PreparedBlock");
}

// The one Executor: prepares and runs programs on a place.
void RegisterExecutor(py::module_& m) {
  py::class_<Timeline>(m, "Timeline",
                       "Records the ops of the runs it is attached to (executor/timeline.h).")
      .def(py::init<>())
      .def("set_enabled", &Timeline::set_enabled)
      .def("enabled", &Timeline::enabled)
      .def("size", &Timeline::size)
      .def("to_json", &Timeline::ToJson, "The chrome://tracing JSON of the events.")
      .def(
          "write", [](const Timeline& t, const std::string& path) { ThrowIfError(t.Write(path)); },
          py::arg("path"), "Writes to_json() to path atomically.")
      .def(
          "events",
          [](const Timeline& t) {
            py::list out;
            for (const Timeline::Event& e : t.events())
              out.append(py::make_tuple(e.rank,
                                        e.lane == Timeline::kCompute ? "compute" : "communication",
                                        e.name, e.detail, e.begin_us, e.dur_us));
            return out;
          },
          "[(rank, lane, op type, variables written, begin_us, dur_us)] in recording order.");
  py::class_<Executor>(m, "Executor")
      .def(py::init<Place>())
      .def(
          "set_timeline",
          [](Executor& e, Timeline* timeline, int rank) { e.set_timeline(timeline, rank); },
          py::arg("timeline").none(true), py::arg("rank") = 0, py::keep_alive<1, 2>(),
          "Records the ops of later runs into timeline as rank `rank` (None: stop recording).")
      .def(
          "prepare",
          [](Executor& e, const ProgramDesc& p, int block) {
            return ValueOrThrow(e.Prepare(p, block));
          },
          py::arg("program"), py::arg("block") = 0)
      .def(
          "run",
          [](Executor& e, PreparedBlock& prepared, Scope& scope, const py::dict& feed,
             const std::vector<std::string>& fetch) {
            FeedMap feeds = FeedsFromPy(feed, e.place());
            // Tensor arrays among the fetches come back as lists of tensors.
            std::vector<std::string> tensors;
            std::vector<bool> is_array;
            const BlockDesc* block = prepared.program().Block(prepared.block_id());
            for (const auto& name : fetch) {
              VarDesc v = block->FindVarRecursive(name);
              is_array.push_back(v && v.Type() == proto::VarType::LOD_TENSOR_ARRAY);
              if (!is_array.back()) tensors.push_back(name);
            }
            std::vector<Tensor> out;
            std::vector<std::vector<Tensor>> arrays(fetch.size());
            Status st;
            {
              py::gil_scoped_release release;
              st = e.Run(&prepared, &scope, feeds, tensors, &out);
              for (size_t k = 0; st.ok() && k < fetch.size(); ++k)
                if (is_array[k]) st = e.FetchArray(&prepared, &scope, fetch[k], &arrays[k]);
            }
            ThrowIfError(st);
            py::list result;
            size_t next = 0;
            for (size_t k = 0; k < fetch.size(); ++k) {
              if (is_array[k])
                result.append(py::cast(std::move(arrays[k])));
              else
                result.append(py::cast(std::move(out[next++])));
            }
            return result;
          },
          py::arg("prepared"), py::arg("scope"), py::arg("feed") = py::dict(),
          py::arg("fetch_list") = std::vector<std::string>{});
}

// Saving and loading parameters, programs and tensors.
void RegisterSaveLoad(py::module_& m) {
  m.def("save_params", [](const ProgramDesc& p, const Scope& s, const std::string& dir) {
    Status st;
    {
      py::gil_scoped_release release;
      st = SaveParams(p, s, dir);
    }
    ThrowIfError(st);
  });
  m.def(
      "load_params",
      [](const ProgramDesc& p, Scope& s, const std::string& dir, const Place& place) {
        ThrowIfError(LoadParams(p, &s, dir, place));
      },
      py::arg("program"), py::arg("scope"), py::arg("dir"), py::arg("place") = Place::CPU());
  m.def(
      "save_params_combined",
      [](const ProgramDesc& p, const Scope& s, const std::string& path) {
        Status st;
        {
          py::gil_scoped_release release;
          st = SaveParamsCombined(p, s, path);
        }
        ThrowIfError(st);
      },
      py::arg("program"), py::arg("scope"), py::arg("path"),
      "Writes the program's persistable variables to one file, sorted by name (Fluid's "
      "save_combine; docs/FORMATS.md), atomically.");
  m.def(
      "load_params_combined",
      [](const ProgramDesc& p, Scope& s, const std::string& path, const Place& place) {
        ThrowIfError(LoadParamsCombined(p, &s, path, place));
      },
      py::arg("program"), py::arg("scope"), py::arg("path"), py::arg("place") = Place::CPU(),
      "Reads what save_params_combined wrote, checking names, dtypes and dims first.");
  m.def(
      "read_params_combined",
      [](const std::string& path) {
        std::vector<std::pair<std::string, Tensor>> entries =
            ValueOrThrow(ReadParamsCombined(path));
        return entries;
      },
      py::arg("path"), "The (name, tensor) entries of a combined parameter file, in file order.");
  m.def(
      "stage_directory", [](const std::string& dir) { return ValueOrThrow(StageDirectory(dir)); },
      py::arg("dir"),
      "A fresh staging directory beside dir to write dir's new contents into; "
      "commit_directory swaps it in atomically (framework/file_util.h).");
  m.def(
      "commit_directory",
      [](const std::string& staging, const std::string& dir) {
        py::gil_scoped_release release;
        ThrowIfError(CommitDirectory(staging, dir));
      },
      py::arg("staging"), py::arg("dir"),
      "Swaps the staging directory in for dir in one step (entries of the old dir it lacks are "
      "carried over), then removes the old contents.");
  m.def(
      "recover_directory", [](const std::string& dir) { ThrowIfError(RecoverDirectory(dir)); },
      py::arg("dir"),
      "Puts back what a save interrupted between its two renames left aside (file systems "
      "without an atomic exchange); removes dead processes' staging directories.");
  m.def(
      "discard_directory", [](const std::string& staging) { DiscardDirectory(staging); },
      py::arg("staging"), "Removes a staging directory that will not be committed.");
  m.def("save_tensor",
        [](const Tensor& t, const std::string& path) { ThrowIfError(SaveTensor(t, path)); });
  m.def("load_tensor", [](const std::string& path) { return ValueOrThrow(LoadTensor(path)); });
}

}  // namespace

PYBIND11_MODULE(core, m) {
  m.doc() = "Loom's C++ core: program descs, scopes, tensors, the executor.";
  RegisterErrors(m);
  RegisterTensor(m);
  RegisterParallel(m);
  RegisterDistributed(m);
  RegisterKVStore(m);
  RegisterPyFunc(m);
  RegisterSim(m);
  RegisterTypes(m);
  RegisterVarAndOpDescs(m);
  RegisterBlockDesc(m);
  RegisterProgramDesc(m);
  RegisterProgramFunctions(m);
  RegisterScope(m);
  RegisterExecutor(m);
  RegisterSaveLoad(m);
}

}  // namespace loom::python
