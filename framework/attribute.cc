#include "framework/attribute.h"

#include <sstream>

namespace loom {

proto::AttrType AttrTypeOf(const Attribute& attr) {
  static const proto::AttrType kTypes[] = {
      proto::INT,     proto::FLOAT,    proto::STRING, proto::INTS, proto::FLOATS, proto::STRINGS,
      proto::BOOLEAN, proto::BOOLEANS, proto::BLOCK,  proto::LONG, proto::LONGS};
  return kTypes[attr.index()];
}

const char* AttrTypeName(proto::AttrType type) {
  switch (type) {
    case proto::INT: return "int";
    case proto::FLOAT: return "float";
    case proto::STRING: return "string";
    case proto::INTS: return "int list";
    case proto::FLOATS: return "float list";
    case proto::STRINGS: return "string list";
    case proto::BOOLEAN: return "bool";
    case proto::BOOLEANS: return "bool list";
    case proto::BLOCK: return "block";
    case proto::LONG: return "long";
    case proto::LONGS: return "long list";
  }
  return "unknown";
}

void AttrToProto(const std::string& name, const Attribute& attr, proto::OpDesc::Attr* out) {
  out->Clear();
  out->set_name(name);
  out->set_type(AttrTypeOf(attr));
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int>)
          out->set_i(v);
        else if constexpr (std::is_same_v<T, float>)
          out->set_f(v);
        else if constexpr (std::is_same_v<T, std::string>)
          out->set_s(v);
        else if constexpr (std::is_same_v<T, std::vector<int>>)
          for (int x : v) out->add_ints(x);
        else if constexpr (std::is_same_v<T, std::vector<float>>)
          for (float x : v) out->add_floats(x);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          for (auto& x : v) out->add_strings(x);
        else if constexpr (std::is_same_v<T, bool>)
          out->set_b(v);
        else if constexpr (std::is_same_v<T, std::vector<bool>>)
          for (bool x : v) out->add_bools(x);
        else if constexpr (std::is_same_v<T, BlockIndex>)
          out->set_block_idx(v.idx);
        else if constexpr (std::is_same_v<T, int64_t>)
          out->set_l(v);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
          for (int64_t x : v) out->add_longs(x);
      },
      attr);
}

StatusOr<Attribute> AttrFromProto(const proto::OpDesc::Attr& a) {
  switch (a.type()) {
    case proto::INT: return Attribute(a.i());
    case proto::FLOAT: return Attribute(a.f());
    case proto::STRING: return Attribute(a.s());
    case proto::INTS: return Attribute(std::vector<int>(a.ints().begin(), a.ints().end()));
    case proto::FLOATS: return Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
    case proto::STRINGS:
      return Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case proto::BOOLEAN: return Attribute(a.b());
    case proto::BOOLEANS: return Attribute(std::vector<bool>(a.bools().begin(), a.bools().end()));
    case proto::BLOCK: return Attribute(BlockIndex{a.block_idx()});
    case proto::LONG: return Attribute(static_cast<int64_t>(a.l()));
    case proto::LONGS: return Attribute(std::vector<int64_t>(a.longs().begin(), a.longs().end()));
  }
  return InvalidArgument("attribute '", a.name(), "' has unknown type ",
                         static_cast<int>(a.type()));
}

namespace {
template <typename T>
void PrintList(std::ostream& os, const std::vector<T>& v) {
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    if constexpr (std::is_same_v<T, std::string>)
      os << '"' << v[i] << '"';
    else if constexpr (std::is_same_v<T, bool>)
      os << (v[i] ? "true" : "false");
    else
      os << v[i];
  }
  os << "]";
}
}  // namespace

std::string AttrToString(const Attribute& attr) {
  std::ostringstream os;
  std::visit(
      [&os](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          os << '"' << v << '"';
        else if constexpr (std::is_same_v<T, bool>)
          os << (v ? "true" : "false");
        else if constexpr (std::is_same_v<T, BlockIndex>)
          os << "block " << v.idx;
        else if constexpr (std::is_same_v<T, std::vector<bool>>)
          PrintList(os, v);
        else if constexpr (std::is_arithmetic_v<T>)
          os << v;
        else
          PrintList(os, v);
      },
      attr);
  return os.str();
}

}  // namespace loom
