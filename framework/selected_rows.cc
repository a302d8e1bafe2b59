#include "framework/selected_rows.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

namespace loom {

DDim SelectedRows::DenseDims() const {
  DDim d;
  d.push_back(height);
  for (int i = 1; i < value.dims().size(); ++i) d.push_back(value.dims()[i]);
  return d;
}

int64_t SelectedRows::RowWidth() const {
  const DDim& d = value.dims();
  return d.size() <= 1 ? 1 : d.product(1, d.size());
}

Status CheckSelectedRows(const SelectedRows& s, const std::string& where) {
  LOOM_ENFORCE(s.height >= 0, where, ": SelectedRows height ", s.height, " is negative");
  LOOM_ENFORCE(s.value.dims().size() >= 1, where,
               ": SelectedRows value needs at least one dim (one per row), has ",
               s.value.dims().ToString());
  LOOM_ENFORCE(s.value.dims()[0] == static_cast<int64_t>(s.rows.size()), where,
               ": SelectedRows has ", s.rows.size(), " rows but its value has ", s.value.dims()[0],
               " (value ", s.value.dims().ToString(), ")");
  LOOM_ENFORCE(s.rows.empty() || s.value.initialized(), where,
               ": SelectedRows value is not initialized");
  for (size_t i = 0; i < s.rows.size(); ++i)
    LOOM_ENFORCE(s.rows[i] >= 0 && s.rows[i] < s.height, where, ": SelectedRows row ", i, " is id ",
                 s.rows[i], ", outside [0, ", s.height, ")");
  return Status::OK();
}

namespace {

template <typename T>
void AddRow(const T* src, T* dst, int64_t w) {
  for (int64_t j = 0; j < w; ++j) dst[j] += src[j];
}

// Calls f(T{}) for the float dtypes SelectedRows arithmetic supports on the host.
template <typename F>
Status ForFloat(DataType t, const char* what, F&& f) {
  switch (t) {
    case proto::FP32: f(float{}); return Status::OK();
    case proto::FP64: f(double{}); return Status::OK();
    default:
      return Unimplemented(what, " of a SelectedRows of ", DataTypeName(t),
                           " (float32 and float64 only)");
  }
}

}  // namespace

Status MergeRows(const SelectedRows& s, SelectedRows* out) {
  LOOM_RETURN_IF_ERROR(CheckSelectedRows(s, "merge_selected_rows input"));
  LOOM_ENFORCE(s.rows.empty() || s.value.place().is_cpu(), "merge_selected_rows: the value is on ",
               s.value.place().ToString(), "; MergeRows runs on the host");
  std::map<int64_t, int64_t> slot;  // id -> output row
  for (int64_t id : s.rows) slot.emplace(id, 0);
  int64_t n = 0;
  for (auto& kv : slot) kv.second = n++;
  const int64_t w = s.RowWidth();
  SelectedRows r;
  r.height = s.height;
  r.rows.reserve(slot.size());
  for (const auto& kv : slot) r.rows.push_back(kv.first);
  DDim dims = s.value.dims();
  dims[0] = n;
  r.value = Tensor(s.value.dtype(), dims);
  if (n == 0) {
    r.value.mutable_data(Place::CPU(), s.value.dtype());
    *out = std::move(r);
    return Status::OK();
  }
  LOOM_RETURN_IF_ERROR(ForFloat(s.value.dtype(), "merge", [&](auto zero) {
    using T = decltype(zero);
    T* dst = r.value.mutable_data<T>(Place::CPU());
    std::fill(dst, dst + n * w, T(0));
    const T* src = s.value.data<T>();
    for (size_t i = 0; i < s.rows.size(); ++i)
      AddRow(src + static_cast<int64_t>(i) * w, dst + slot[s.rows[i]] * w, w);
  }));
  *out = std::move(r);
  return Status::OK();
}

Status SelectedRowsToDense(const SelectedRows& s, Tensor* dense) {
  LOOM_RETURN_IF_ERROR(CheckSelectedRows(s, "SelectedRows to dense"));
  LOOM_ENFORCE(s.rows.empty() || s.value.place().is_cpu(),
               "SelectedRows to dense: the value is on ", s.value.place().ToString(),
               "; this conversion runs on the host");
  const int64_t w = s.RowWidth();
  Tensor d(s.value.dtype(), s.DenseDims());
  LOOM_RETURN_IF_ERROR(ForFloat(s.value.dtype(), "to dense", [&](auto zero) {
    using T = decltype(zero);
    T* dst = d.mutable_data<T>(Place::CPU());
    std::fill(dst, dst + s.height * w, T(0));
    if (s.rows.empty()) return;
    const T* src = s.value.data<T>();
    for (size_t i = 0; i < s.rows.size(); ++i)
      AddRow(src + static_cast<int64_t>(i) * w, dst + s.rows[i] * w, w);
  }));
  *dense = std::move(d);
  return Status::OK();
}

std::string SelectedRowsSummary(const SelectedRows& s, int max_elems) {
  std::ostringstream os;
  os << "rows " << s.rows.size() << " of height " << s.height << " {";
  for (size_t i = 0; i < s.rows.size() && static_cast<int>(i) < max_elems; ++i)
    os << (i ? ", " : "") << s.rows[i];
  if (static_cast<int>(s.rows.size()) > max_elems) os << ", ...";
  os << "} value " << (s.value.initialized() ? TensorSummary(s.value, max_elems) : "(empty)");
  return os.str();
}

}  // namespace loom
