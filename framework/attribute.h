// Op attributes: a typed value per name, mirroring proto::OpDesc::Attr.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "framework/framework.pb.h"

namespace loom {

// An attribute naming a sub-block of the program by index.
struct BlockIndex {
  int idx = 0;
  bool operator==(const BlockIndex& o) const { return idx == o.idx; }
};

using Attribute = std::variant<int, float, std::string, std::vector<int>, std::vector<float>,
                               std::vector<std::string>, bool, std::vector<bool>, BlockIndex,
                               int64_t, std::vector<int64_t>>;
// Ordered so that printing and serialization are deterministic.
using AttributeMap = std::map<std::string, Attribute>;

proto::AttrType AttrTypeOf(const Attribute& attr);
const char* AttrTypeName(proto::AttrType type);
void AttrToProto(const std::string& name, const Attribute& attr, proto::OpDesc::Attr* out);
// Fails when the proto's type is not a known AttrType.
StatusOr<Attribute> AttrFromProto(const proto::OpDesc::Attr& attr);
std::string AttrToString(const Attribute& attr);

template <typename T>
struct AttrTypeTrait;
#define LOOM_ATTR_TRAIT(T, E)                          \
  template <>                                          \
  struct AttrTypeTrait<T> {                            \
    static constexpr proto::AttrType value = proto::E; \
  };
LOOM_ATTR_TRAIT(int, INT)
LOOM_ATTR_TRAIT(float, FLOAT)
LOOM_ATTR_TRAIT(std::string, STRING)
LOOM_ATTR_TRAIT(std::vector<int>, INTS)
LOOM_ATTR_TRAIT(std::vector<float>, FLOATS)
LOOM_ATTR_TRAIT(std::vector<std::string>, STRINGS)
LOOM_ATTR_TRAIT(bool, BOOLEAN)
LOOM_ATTR_TRAIT(std::vector<bool>, BOOLEANS)
LOOM_ATTR_TRAIT(BlockIndex, BLOCK)
LOOM_ATTR_TRAIT(int64_t, LONG)
LOOM_ATTR_TRAIT(std::vector<int64_t>, LONGS)
#undef LOOM_ATTR_TRAIT

// Reads attribute name of type T from attrs; aborts if absent or of another type (the verifier
// and the registry's defaults guarantee presence and type for registered attributes).
template <typename T>
const T& GetAttr(const AttributeMap& attrs, const std::string& name) {
  auto it = attrs.find(name);
  LOOM_CHECK(it != attrs.end(), "attribute '", name, "' missing");
  const T* v = std::get_if<T>(&it->second);
  LOOM_CHECK(v != nullptr, "attribute '", name, "' is ", AttrTypeName(AttrTypeOf(it->second)),
             ", read as ", AttrTypeName(AttrTypeTrait<T>::value));
  return *v;
}

}  // namespace loom
