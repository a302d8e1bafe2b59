// loom inspect FILE.pb: prints a program, verifies it, draws it; --ops lists registered ops.
#include <cstdio>
#include <sstream>
#include <variant>

#include "framework/file_util.h"
#include "framework/op_registry.h"
#include "framework/serialization.h"
#include "framework/verifier.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_dir.h"
#include "tools/proto_text.h"

namespace loom::cli {

namespace {

Flags InspectFlags() {
  return Flags("inspect", "loom inspect FILE.pb|DIR [--dot OUT.dot] | loom inspect --ops",
               "Prints a program readably (blocks, vars with dtype and dims, ops with slots,\n"
               "attributes and roles) and the result of the verifier. Text programs (.pbtxt)\n"
               "are read too. A directory (a bundle, or a model save_inference_model wrote)\n"
               "means its main.pb, or the model_file its bundle.pbtxt names.",
               {
                   {"dot", "OUT.dot",
                    "also write the program as a Graphviz graph (only when it verifies)", ""},
                   {"ops", "", "list registered ops: slots, attributes, kernels", ""},
                   {"no-verify", "", "print without running the verifier", ""},
               },
               0, 1);
}

std::string Slots(const google::protobuf::RepeatedPtrField<proto::OpDesc::Var>& slots) {
  std::string s;
  for (const auto& v : slots) {
    if (!s.empty()) s += ", ";
    s += v.parameter() + "=[";
    for (int i = 0; i < v.arguments_size(); ++i) s += (i ? ", " : "") + v.arguments(i);
    s += "]";
  }
  return s;
}

std::string PrintProgram(const ProgramDesc& p) {
  std::ostringstream os;
  for (int b = 0; b < p.NumBlocks(); ++b) {
    const BlockDesc& block = *p.Block(b);
    os << "block " << b << " (parent " << block.ParentIdx() << "): " << block.AllVars().size()
       << " vars, " << block.OpSize() << " ops\n";
    for (const VarDesc& v : block.AllVars()) {
      os << "  var " << v.Name() << " : ";
      // Dense tensors print as dtype[dims]; other kinds name themselves first.
      if (v.Type() != proto::VarType::DENSE_TENSOR)
        os << proto::VarType::Type_Name(v.Type()) << " ";
      os << DataTypeName(v.Dtype()) << v.Dims().ToString();
      if (v.Persistable()) os << " persistable";
      if (v.IsParameter()) os << " parameter";
      if (v.StopGradient()) os << " stop_gradient";
      os << "\n";
    }
    for (int i = 0; i < block.OpSize(); ++i) {
      OpDesc op = block.Op(i);
      os << "  #" << i << " " << op.Type() << "(" << Slots(op.proto()->inputs()) << ") -> ("
         << Slots(op.proto()->outputs()) << ")";
      std::string attrs;
      for (const auto& a : op.proto()->attrs()) {
        if (a.name() == kOpRoleAttr) continue;
        auto v = AttrFromProto(a);
        attrs += (attrs.empty() ? "" : ", ") + a.name() + "=" +
                 (v.ok() ? AttrToString(v.value()) : std::string("?"));
      }
      if (!attrs.empty()) os << " {" << attrs << "}";
      os << " [" << OpRoleToString(op.Role()) << "]\n";
    }
  }
  return os.str();
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string ToDot(const ProgramDesc& p) {
  std::ostringstream os;
  os << "digraph program {\n  rankdir=TB;\n  compound=true;\n"
        "  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (int b = 0; b < p.NumBlocks(); ++b) {
    const BlockDesc& block = *p.Block(b);
    os << "  subgraph cluster_block" << b << " {\n    label=\"block " << b << " (parent "
       << block.ParentIdx() << ")\";\n";
    // Control-flow ops point at this node (an edge to the cluster).
    os << "    " << Quote(StrCat("b", b, "_anchor")) << " [shape=point, style=invis];\n";
    for (const VarDesc& v : block.AllVars()) {
      os << "    " << Quote(StrCat("b", b, "_var_", v.Name()))
         << " [shape=ellipse, label=" << Quote(v.Name() + "\n" + v.Dims().ToString())
         << (v.Persistable() ? ", style=filled, fillcolor=lightyellow" : "") << "];\n";
    }
    for (int i = 0; i < block.OpSize(); ++i) {
      OpDesc op = block.Op(i);
      std::string id = StrCat("b", b, "_op", i);
      const char* color = (op.Role() & kOpRoleOptimize)   ? "lightblue"
                          : (op.Role() & kOpRoleBackward) ? "mistyrose"
                                                          : "palegreen";
      os << "    " << Quote(id) << " [shape=box, style=filled, fillcolor=" << color
         << ", label=" << Quote(StrCat("#", i, " ", op.Type())) << "];\n";
      for (const auto& v : op.InputArgumentNames())
        if (block.FindVarRecursive(v))
          os << "    " << Quote(StrCat("b", b, "_var_", v)) << " -> " << Quote(id) << ";\n";
      for (const auto& v : op.OutputArgumentNames())
        if (block.FindVarRecursive(v))
          os << "    " << Quote(id) << " -> " << Quote(StrCat("b", b, "_var_", v)) << ";\n";
      for (const auto& name : op.AttrNames()) {
        auto a = op.GetAttr(name);
        const BlockIndex* sub = a.ok() ? std::get_if<BlockIndex>(&a.value()) : nullptr;
        if (sub && sub->idx > b && sub->idx < p.NumBlocks())
          os << "    " << Quote(id) << " -> " << Quote(StrCat("b", sub->idx, "_anchor"))
             << " [style=dashed, lhead=cluster_block" << sub->idx << ", label=" << Quote(name)
             << "];\n";
      }
    }
    os << "  }\n";
  }
  os << "}\n";
  return os.str();
}

std::string PrintOps() {
  std::ostringstream os;
  const auto& registry = OpRegistry::Global();
  for (const auto& type : registry.Types()) {
    const OpInfo& info = *registry.Find(type);
    os << type << (info.grad_maker ? "" : " (no gradient)") << "\n  " << info.doc << "\n";
    auto slots = [&os](const char* what, const std::vector<SlotSpec>& specs) {
      for (const auto& s : specs) {
        os << "  " << what << " " << s.name;
        if (s.duplicable) os << " (list)";
        if (s.dispensable) os << " (optional)";
        os << ": " << s.doc << "\n";
      }
    };
    slots("in ", info.inputs);
    slots("out", info.outputs);
    // Own attributes, then those taken from the forward op (AttrsFrom), marked as such.
    const std::vector<const AttrSpec*> attrs = info.AllAttrs();
    for (size_t i = 0; i < attrs.size(); ++i) {
      const AttrSpec& a = *attrs[i];
      os << "  attr " << a.name << " : " << AttrTypeName(a.type) << " = "
         << (a.default_value ? AttrToString(*a.default_value) : std::string("(required)")) << "  "
         << a.doc;
      if (i >= info.attrs.size()) os << " (as in " << info.attrs_from << ")";
      os << "\n";
    }
    os << "  kernels:";
    if (info.kernels.empty()) os << " none";
    for (const auto& kv : info.kernels)
      os << " " << PlaceKindName(kv.first.place) << "/" << DataTypeName(kv.first.dtype);
    os << "\n\n";
  }
  os << registry.Types().size() << " ops registered\n";
  return os.str();
}

Status Inspect(const Flags& flags) {
  if (flags.Switch("ops")) {
    std::fputs(PrintOps().c_str(), stdout);
    return Status::OK();
  }
  std::string path = flags.positional()[0];
  if (IsDirectory(path)) {  // a bundle or a model save_inference_model wrote
    LOOM_ASSIGN_OR_RETURN(ModelDir model, ResolveModelDir(path));
    path = model.program;
  }
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  auto ends_with = [&path](const std::string& suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  bool text = ends_with(".pbtxt") || ends_with(".txt");
  if (text) {
    // Syntax errors with their line and column, in one line.
    proto::ProgramDesc syntax_only;
    LOOM_RETURN_IF_ERROR(ParseTextProto(bytes, path, "a Loom program", &syntax_only));
  }
  LOOM_ASSIGN_OR_RETURN(ProgramDesc program,
                        text ? ParseProgramText(bytes, path) : ParseProgram(bytes, path));
  std::fputs(PrintProgram(program).c_str(), stdout);
  // Verify before drawing: a failed command leaves no output file behind.
  if (!flags.Switch("no-verify")) {
    Status st = VerifyProgram(program);
    if (!st.ok()) return st.WithContext(StrCat(path, ": verification failed"));
    std::printf("verified: ok\n");
  }
  if (flags.Has("dot")) {
    LOOM_RETURN_IF_ERROR(WriteFileAtomic(flags.Get("dot"), ToDot(program)));
    std::printf("wrote %s\n", flags.Get("dot").c_str());
  }
  return Status::OK();
}

}  // namespace

int InspectCommand(int argc, char** argv) {
  Flags flags = InspectFlags();
  return RunSubcommand(flags, argc, argv, Inspect, [](const Flags& f) -> Status {
    bool ops = f.Switch("ops"), file = !f.positional().empty();
    if (ops && (file || f.Has("dot")))
      return InvalidArgument("--ops takes no FILE and no --dot (see loom inspect --help)");
    if (!ops && !file)
      return InvalidArgument(
          "nothing to inspect: give FILE.pb, DIR or --ops (see loom inspect --help)");
    return Status::OK();
  });
}

}  // namespace loom::cli
