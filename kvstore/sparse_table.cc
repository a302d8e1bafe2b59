#include "kvstore/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "framework/file_util.h"

namespace loom::kvstore {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'S', 'P', 'T', 'B'};
constexpr uint32_t kVersion = 2;  // 1: rows only; 2: + optimizer state and scalars
constexpr int64_t kMaxRowElems = int64_t{1} << 40;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from the top 53 bits of a hash of (row key, counter).
double Unit(uint64_t row_key, uint64_t counter) {
  return static_cast<double>(SplitMix64(row_key ^ SplitMix64(counter)) >> 11) * 0x1.0p-53;
}

// 64-bit FNV-1a. Version 1 files were written with the offset basis 1469598103934665603;
// version 2 files use the standard 14695981039346656037 (FORMATS.md).
constexpr uint64_t kFnvBasisV1 = 1469598103934665603ull;
constexpr uint64_t kFnvBasis = 14695981039346656037ull;
uint64_t Fnv1a(const char* p, size_t n, uint64_t basis = kFnvBasis) {
  uint64_t h = basis;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Reads fixed-size fields off a byte string, failing (not reading past the end) when short.
class Reader {
 public:
  Reader(const std::string& s, const std::string& path) : s_(s), path_(path) {}
  template <typename T>
  Status Get(T* v, const char* field) {
    if (s_.size() - pos_ < sizeof(T))
      return Corruption("sparse table file '", path_, "' ends inside its ", field, " (at byte ",
                        pos_, " of ", s_.size(), ")");
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::OK();
  }
  size_t pos() const { return pos_; }
  size_t left() const { return s_.size() - pos_; }
  void Skip(size_t n) { pos_ += n; }  // n <= left()

 private:
  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

template <typename T>
void FillRow(const RowInitializer& init, int64_t id, int64_t width, T* row) {
  for (int64_t j = 0; j < width; ++j)
    row[j] = static_cast<T>(SparseTable::InitialValue(init, id, j));
}

}  // namespace

StatusOr<RowInitializer> RowInitializer::FromName(const std::string& name, double a, double b,
                                                  uint64_t seed) {
  RowInitializer init;
  if (name == "constant") {
    init = Constant(a);
  } else if (name == "uniform") {
    init = Uniform(a, b, seed);
  } else if (name == "gaussian" || name == "normal") {
    init = Gaussian(a, b, seed);
  } else {
    return InvalidArgument("unknown row initializer '", name,
                           "' (a sparse table takes constant, uniform, gaussian)");
  }
  LOOM_RETURN_IF_ERROR(init.Check());
  return init;
}

const char* RowInitializer::name() const {
  switch (kind) {
    case Kind::kConstant: return "constant";
    case Kind::kUniform: return "uniform";
    case Kind::kGaussian: return "gaussian";
  }
  return "unknown";
}

Status RowInitializer::Check() const {
  if (kind != Kind::kConstant && kind != Kind::kUniform && kind != Kind::kGaussian)
    return InvalidArgument("row initializer kind ", static_cast<int>(kind), " is unknown");
  if (!std::isfinite(a) || !std::isfinite(b))
    return InvalidArgument("row initializer ", ToString(), ": its numbers must be finite");
  if (kind == Kind::kUniform && a > b)
    return InvalidArgument("row initializer ", ToString(), ": low > high");
  if (kind == Kind::kGaussian && b < 0)
    return InvalidArgument("row initializer ", ToString(), ": std < 0");
  return Status::OK();
}

std::string RowInitializer::ToString() const {
  switch (kind) {
    case Kind::kConstant: return StrCat("constant(", a, ")");
    case Kind::kUniform: return StrCat("uniform(", a, ", ", b, ", seed ", seed, ")");
    case Kind::kGaussian: return StrCat("gaussian(", a, ", ", b, ", seed ", seed, ")");
  }
  return "unknown";
}

int64_t SparseTableSpec::width() const {
  return row_dims.empty() ? 1 : row_dims.product(0, row_dims.size());
}

std::string SparseTableSpec::DimsString() const {
  std::string s = height < 0 ? "[*" : StrCat("[", height);
  for (int64_t d : row_dims) s += StrCat(", ", d);
  return s + "]";
}

double SparseTable::InitialValue(const RowInitializer& init, int64_t id, int64_t j) {
  const uint64_t row_key = SplitMix64(init.seed ^ SplitMix64(static_cast<uint64_t>(id)));
  switch (init.kind) {
    case RowInitializer::Kind::kConstant: return init.a;
    case RowInitializer::Kind::kUniform:
      return init.a + (init.b - init.a) * Unit(row_key, static_cast<uint64_t>(j));
    case RowInitializer::Kind::kGaussian: {
      // Box-Muller on the pair (2j, 2j + 1); 1 - u keeps the logarithm's argument in (0, 1].
      const double u1 = 1.0 - Unit(row_key, 2 * static_cast<uint64_t>(j));
      const double u2 = Unit(row_key, 2 * static_cast<uint64_t>(j) + 1);
      return init.a + init.b * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
  }
  return 0;
}

int SparseTable::ShardOf(int64_t id, int num_servers) {
  if (num_servers <= 1) return 0;
  return static_cast<int>(SplitMix64(static_cast<uint64_t>(id)) %
                          static_cast<uint64_t>(num_servers));
}

SparseTable::SparseTable(SparseTableSpec spec)
    : spec_(std::move(spec)),
      width_(spec_.width()),
      row_bytes_(static_cast<size_t>(width_) * SizeOf(spec_.dtype)) {}

StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(const SparseTableSpec& spec) {
  if (spec.dtype != proto::FP32 && spec.dtype != proto::FP64)
    return InvalidArgument("a sparse table holds float32 or float64 rows, not ",
                           DataTypeName(spec.dtype));
  if (spec.height < -1)
    return InvalidArgument("sparse table height ", spec.height, " (-1 for any id, else >= 0)");
  int64_t width = 1;
  for (int64_t d : spec.row_dims) {
    if (d <= 0)
      return InvalidArgument("sparse table row dims ", spec.row_dims.ToString(),
                             ": every dim must be positive");
    if (width > kMaxRowElems / d)
      return InvalidArgument("sparse table row dims ", spec.row_dims.ToString(), " are too large");
    width *= d;
  }
  LOOM_RETURN_IF_ERROR(spec.init.Check());
  return std::unique_ptr<SparseTable>(new SparseTable(spec));
}

int64_t SparseTable::Size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(rows_.size());
}

Status SparseTable::CheckIds(const int64_t* ids, int64_t n, const std::string& what) const {
  if (n < 0) return InvalidArgument(what, ": ", n, " ids");
  if (spec_.height < 0) return Status::OK();
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= spec_.height)
      return InvalidArgument(what, ": row id ", ids[i], " (entry ", i, ") is outside [0, ",
                             spec_.height, ")");
  return Status::OK();
}

int64_t SparseTable::Row(int64_t id) {
  auto [it, fresh] = rows_.emplace(id, static_cast<int64_t>(rows_.size()));
  if (!fresh) return it->second;
  data_.resize(data_.size() + row_bytes_);
  if (state_slots_ > 0) state_.resize(state_.size() + row_bytes_ * state_slots_, 0);
  if (spec_.dtype == proto::FP32)
    FillRow(spec_.init, id, width_, reinterpret_cast<float*>(RowData(it->second)));
  else
    FillRow(spec_.init, id, width_, reinterpret_cast<double*>(RowData(it->second)));
  return it->second;
}

Status SparseTable::Lookup(const int64_t* ids, int64_t n, void* out, const std::string& what) {
  LOOM_RETURN_IF_ERROR(CheckIds(ids, n, what));
  std::lock_guard<std::mutex> lock(mu_);
  char* dst = static_cast<char*>(out);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * row_bytes_, RowData(Row(ids[i])), row_bytes_);
  return Status::OK();
}

Status SparseTable::Assign(const int64_t* ids, int64_t n, const void* values,
                           const std::string& what) {
  LOOM_RETURN_IF_ERROR(CheckIds(ids, n, what));
  std::lock_guard<std::mutex> lock(mu_);
  const char* src = static_cast<const char*>(values);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(RowData(Row(ids[i])), src + i * row_bytes_, row_bytes_);
  return Status::OK();
}

Status SparseTable::Apply(const RowUpdater& updater, const int64_t* ids, int64_t n,
                          const void* grads, int parts, const std::string& what) {
  LOOM_RETURN_IF_ERROR(CheckIds(ids, n, what));
  std::unordered_set<int64_t> seen;
  for (int64_t i = 0; i < n; ++i)
    if (!seen.insert(ids[i]).second)
      return InvalidArgument(what, ": row id ", ids[i], " appears twice (merge the rows first)");
  std::lock_guard<std::mutex> lock(mu_);
  const int slots = updater.state_slots();
  if (slots > state_slots_) {  // the first optimizer with state: zero state for every row
    state_slots_ = slots;
    state_.assign(rows_.size() * row_bytes_ * slots, 0);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = Row(ids[i]);
    char* s = state_slots_ ? state_.data() + r * row_bytes_ * state_slots_ : nullptr;
    if (spec_.dtype == proto::FP32)
      updater.Update(static_cast<const float*>(grads) + i * width_, parts,
                     reinterpret_cast<float*>(RowData(r)), reinterpret_cast<float*>(s), width_);
    else
      updater.Update(static_cast<const double*>(grads) + i * width_, parts,
                     reinterpret_cast<double*>(RowData(r)), reinterpret_cast<double*>(s), width_);
  }
  return Status::OK();
}

void SparseTable::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  rows_.clear();
  data_.clear();
  state_.clear();
}

std::vector<int64_t> SparseTable::Ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  ids.reserve(rows_.size());
  for (const auto& kv : rows_) ids.push_back(kv.first);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status SparseTable::Save(const std::string& path) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<int64_t, int64_t>> rows(rows_.begin(), rows_.end());
    std::sort(rows.begin(), rows.end());
    out.reserve(96 + rows.size() * (8 + row_bytes_));
    out.append(kMagic, sizeof(kMagic));
    Put<uint32_t>(&out, kVersion);
    Put<int32_t>(&out, static_cast<int32_t>(spec_.dtype));
    Put<int64_t>(&out, spec_.height);
    Put<int32_t>(&out, spec_.row_dims.size());
    for (int64_t d : spec_.row_dims) Put<int64_t>(&out, d);
    Put<int32_t>(&out, static_cast<int32_t>(spec_.init.kind));
    Put<double>(&out, spec_.init.a);
    Put<double>(&out, spec_.init.b);
    Put<uint64_t>(&out, spec_.init.seed);
    Put<int64_t>(&out, static_cast<int64_t>(rows.size()));
    for (const auto& r : rows) Put<int64_t>(&out, r.first);
    for (const auto& r : rows) out.append(data_.data() + r.second * row_bytes_, row_bytes_);
    Put<int32_t>(&out, state_slots_);
    const size_t state_bytes = row_bytes_ * static_cast<size_t>(state_slots_);
    for (const auto& r : rows)
      if (state_bytes) out.append(state_.data() + r.second * state_bytes, state_bytes);
    Put<int32_t>(&out, static_cast<int32_t>(scalars_.size()));
    for (const auto& [name, value] : scalars_) {
      Put<uint32_t>(&out, static_cast<uint32_t>(name.size()));
      out += name;
      Put<double>(&out, value);
    }
  }
  Put<uint64_t>(&out, Fnv1a(out.data(), out.size()));
  Status st = WriteFileAtomic(path, out);
  return st.ok() ? st : st.WithContext(StrCat("saving a sparse table to '", path, "'"));
}

StatusOr<std::unique_ptr<SparseTable>> SparseTable::Load(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string s, ReadFile(path));
  const std::string where = StrCat("sparse table file '", path, "'");
  if (s.size() < sizeof(kMagic) + 8 || std::memcmp(s.data(), kMagic, sizeof(kMagic)) != 0)
    return Corruption(where, " does not start with LOOMSPTB (not a sparse table)");
  uint64_t sum;
  std::memcpy(&sum, s.data() + s.size() - 8, 8);
  uint32_t file_version = 0;
  if (s.size() >= sizeof(kMagic) + 12) std::memcpy(&file_version, s.data() + sizeof(kMagic), 4);
  if (Fnv1a(s.data(), s.size() - 8, file_version == 1 ? kFnvBasisV1 : kFnvBasis) != sum)
    return Corruption(where, " fails its checksum (truncated or corrupt)");
  const std::string body = s.substr(0, s.size() - 8);
  Reader r(body, path);
  char magic[8];
  LOOM_RETURN_IF_ERROR(r.Get(&magic, "magic"));
  uint32_t version;
  int32_t dtype, rank, kind;
  SparseTableSpec spec;
  LOOM_RETURN_IF_ERROR(r.Get(&version, "version"));
  if (version != 1 && version != kVersion)
    return Corruption(where, " is version ", version, "; this Loom reads versions 1 to ", kVersion);
  LOOM_RETURN_IF_ERROR(r.Get(&dtype, "dtype"));
  LOOM_RETURN_IF_ERROR(r.Get(&spec.height, "height"));
  LOOM_RETURN_IF_ERROR(r.Get(&rank, "rank"));
  if (rank < 0 || rank > DDim::kMaxRank - 1)
    return Corruption(where, ": row rank ", rank, " (0 to ", DDim::kMaxRank - 1, ")");
  for (int i = 0; i < rank; ++i) {
    int64_t d;
    LOOM_RETURN_IF_ERROR(r.Get(&d, "row dims"));
    spec.row_dims.push_back(d);
  }
  LOOM_RETURN_IF_ERROR(r.Get(&kind, "initializer"));
  LOOM_RETURN_IF_ERROR(r.Get(&spec.init.a, "initializer"));
  LOOM_RETURN_IF_ERROR(r.Get(&spec.init.b, "initializer"));
  LOOM_RETURN_IF_ERROR(r.Get(&spec.init.seed, "initializer"));
  spec.init.kind = static_cast<RowInitializer::Kind>(kind);
  if (dtype != proto::FP32 && dtype != proto::FP64)
    return Corruption(where, ": dtype ", dtype, " (a sparse table is float32 or float64)");
  spec.dtype = static_cast<DataType>(dtype);
  auto made = Create(spec);
  if (!made.ok()) return Corruption(where, ": ", made.status().message());
  std::unique_ptr<SparseTable> t = std::move(made).value();
  int64_t n;
  LOOM_RETURN_IF_ERROR(r.Get(&n, "row count"));
  const uint64_t per_row = 8 + t->row_bytes_;
  if (n < 0 || static_cast<uint64_t>(n) > r.left() / per_row ||
      (version == 1 && static_cast<uint64_t>(n) * per_row != r.left()))
    return Corruption(where, ": ", n, " rows of ", t->row_bytes_, " bytes do not fit the ",
                      r.left(), " bytes left");
  std::vector<int64_t> ids(static_cast<size_t>(n));
  if (n) std::memcpy(ids.data(), body.data() + r.pos(), static_cast<size_t>(n) * 8);
  for (int64_t i = 0; i < n; ++i) {
    if (spec.height >= 0 && (ids[i] < 0 || ids[i] >= spec.height))
      return Corruption(where, ": row id ", ids[i], " is outside [0, ", spec.height, ")");
    if (i > 0 && ids[i] <= ids[i - 1])
      return Corruption(where, ": row ids are not strictly ascending at entry ", i);
  }
  const size_t rows_at = r.pos() + static_cast<size_t>(n) * 8;
  const size_t rows_bytes = static_cast<size_t>(n) * t->row_bytes_;
  int32_t slots = 0;
  std::map<std::string, double> scalars;
  size_t state_at = rows_at + rows_bytes;
  if (version >= 2) {
    std::string rest = body.substr(state_at);
    Reader tail(rest, path);
    LOOM_RETURN_IF_ERROR(tail.Get(&slots, "state slot count"));
    if (slots < 0 || slots > 8) return Corruption(where, ": ", slots, " optimizer state slots");
    const uint64_t state_bytes = static_cast<uint64_t>(n) * t->row_bytes_ * slots;
    if (state_bytes > tail.left())
      return Corruption(where, ": ", slots, " state slots of ", n, " rows do not fit the ",
                        tail.left(), " bytes left");
    state_at += 4;
    std::string after = rest.substr(4 + state_bytes);
    Reader sc(after, path);
    int32_t count = 0;
    LOOM_RETURN_IF_ERROR(sc.Get(&count, "scalar count"));
    if (count < 0 || count > 64) return Corruption(where, ": ", count, " scalars");
    for (int32_t i = 0; i < count; ++i) {
      uint32_t len = 0;
      LOOM_RETURN_IF_ERROR(sc.Get(&len, "scalar name"));
      if (len > sc.left()) return Corruption(where, " ends inside scalar ", i, "'s name");
      std::string name = after.substr(sc.pos(), len);
      sc.Skip(len);
      double value = 0;
      LOOM_RETURN_IF_ERROR(sc.Get(&value, "scalar value"));
      scalars[name] = value;
    }
    if (sc.left() != 0) return Corruption(where, ": ", sc.left(), " bytes after the scalars");
  }
  std::lock_guard<std::mutex> lock(t->mu_);
  t->data_.assign(body.data() + rows_at, body.data() + rows_at + rows_bytes);
  t->state_slots_ = slots;
  if (slots)
    t->state_.assign(body.data() + state_at,
                     body.data() + state_at + rows_bytes * static_cast<size_t>(slots));
  t->scalars_ = std::move(scalars);
  for (int64_t i = 0; i < n; ++i) t->rows_.emplace(ids[i], i);
  return t;
}

void SparseTable::SetScalar(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  scalars_[name] = value;
}

bool SparseTable::GetScalar(const std::string& name, double* value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = scalars_.find(name);
  if (it == scalars_.end()) return false;
  *value = it->second;
  return true;
}

Status SparseTable::TakeRowsOf(SparseTable* other) {
  if (other == this) return Status::OK();
  if (other->dtype() != dtype() || other->width() != width())
    return InvalidArgument("a table of ", DataTypeName(dtype()), " rows of ", width(),
                           " cannot take the rows of a table of ", DataTypeName(other->dtype()),
                           " rows of ", other->width());
  std::scoped_lock lock(mu_, other->mu_);
  rows_ = std::move(other->rows_);
  data_ = std::move(other->data_);
  state_ = std::move(other->state_);
  state_slots_ = other->state_slots_;
  scalars_ = std::move(other->scalars_);
  other->rows_.clear();
  other->data_.clear();
  other->state_.clear();
  other->state_slots_ = 0;
  other->scalars_.clear();
  return Status::OK();
}

}  // namespace loom::kvstore
