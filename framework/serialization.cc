#include "framework/serialization.h"

#include <google/protobuf/text_format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "base/copy.h"
#include "framework/file_util.h"
#include "framework/verifier.h"

namespace loom {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class Reader {
 public:
  Reader(const std::string& bytes, std::string source) : b_(bytes), source_(std::move(source)) {}
  template <typename T>
  Status Read(T* v, const char* what) {
    if (pos_ + sizeof(T) > b_.size())
      return Corruption(source_, ": truncated (reading ", what, " at byte ", pos_, ")");
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::OK();
  }
  Status Skip(size_t n, const char* what) {
    if (pos_ + n > b_.size() || pos_ + n < pos_)
      return Corruption(source_, ": truncated (", what, " needs ", n, " bytes at byte ", pos_,
                        ", file has ", b_.size(), ")");
    pos_ += n;
    return Status::OK();
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& b_;
  std::string source_;
  size_t pos_ = 0;
};

constexpr char kTensorMagic[8] = {'L', 'O', 'O', 'M', 'T', 'N', 'S', 'R'};
constexpr uint32_t kTensorVersion = 1;
constexpr char kRowsMagic[8] = {'L', 'O', 'O', 'M', 'S', 'R', 'O', 'W'};
constexpr uint32_t kRowsVersion = 1;

}  // namespace

// ------------------------------------------------------------------ programs

StatusOr<ProgramDesc> ParseProgram(const std::string& bytes, const std::string& source) {
  proto::ProgramDesc p;
  if (!p.ParseFromString(bytes))
    return Corruption(source,
                      ": not a Loom program (protobuf parse failed: truncated or not a "
                      "ProgramDesc; ",
                      bytes.size(), " bytes)");
  return ProgramDesc(p);
}

StatusOr<ProgramDesc> ParseProgramText(const std::string& text, const std::string& source) {
  proto::ProgramDesc p;
  if (!google::protobuf::TextFormat::ParseFromString(text, &p))
    return Corruption(source, ": not a Loom program in protobuf text format");
  return ProgramDesc(p);
}

StatusOr<ProgramDesc> LoadProgram(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  bool text = EndsWith(path, ".pbtxt") || EndsWith(path, ".txt");
  LOOM_ASSIGN_OR_RETURN(ProgramDesc program,
                        text ? ParseProgramText(bytes, path) : ParseProgram(bytes, path));
  Status st = VerifyProgram(program);
  if (!st.ok()) return st.WithContext(path);
  return program;
}

Status SaveProgram(const ProgramDesc& program, const std::string& path) {
  bool text = EndsWith(path, ".pbtxt") || EndsWith(path, ".txt");
  std::string out;
  if (text) {
    out = ProgramToText(program);
  } else if (!program.proto().SerializeToString(&out)) {
    return Internal("cannot serialize program for '", path, "'");
  }
  return WriteFileAtomic(path, out);
}

std::string ProgramToText(const ProgramDesc& program) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(program.proto(), &out);
  return out;
}

// ------------------------------------------------------------------ tensors

std::string SerializeTensor(const Tensor& t) {
  Tensor host = t;
  if (t.initialized() && !t.place().is_cpu()) TensorCopy(t, Place::CPU(), &host);
  std::string out(kTensorMagic, sizeof(kTensorMagic));
  Append<uint32_t>(&out, kTensorVersion);
  Append<uint32_t>(&out, static_cast<uint32_t>(t.dtype()));
  Append<uint32_t>(&out, static_cast<uint32_t>(t.dims().size()));
  for (int64_t d : t.dims()) Append<int64_t>(&out, d);
  uint64_t nbytes = t.initialized() ? t.nbytes() : 0;
  Append<uint64_t>(&out, nbytes);
  if (nbytes) out.append(static_cast<const char*>(host.raw_data()), nbytes);
  uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
  Append<uint32_t>(&out, crc);
  return out;
}

StatusOr<Tensor> DeserializeTensor(const std::string& bytes, const std::string& source,
                                   const Place& place) {
  if (bytes.size() < sizeof(kTensorMagic) || std::memcmp(bytes.data(), kTensorMagic, 8) != 0)
    return Corruption(source, ": not a Loom tensor file (bad magic)");
  Reader r(bytes, source);
  LOOM_RETURN_IF_ERROR(r.Skip(8, "magic"));
  uint32_t version = 0, dtype = 0, rank = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&version, "version"));
  if (version != kTensorVersion)
    return Corruption(source, ": unsupported tensor format version ", version, " (expected ",
                      kTensorVersion, ")");
  LOOM_RETURN_IF_ERROR(r.Read(&dtype, "dtype"));
  if (!proto::DataType_IsValid(static_cast<int>(dtype)))
    return Corruption(source, ": invalid dtype code ", dtype);
  LOOM_RETURN_IF_ERROR(r.Read(&rank, "rank"));
  if (rank > static_cast<uint32_t>(DDim::kMaxRank))
    return Corruption(source, ": rank ", rank, " above the maximum ", DDim::kMaxRank);
  DDim dims;
  for (uint32_t i = 0; i < rank; ++i) {
    int64_t d = 0;
    LOOM_RETURN_IF_ERROR(r.Read(&d, "dims"));
    if (d < 0 || d > (int64_t{1} << 40)) return Corruption(source, ": invalid dim ", d);
    dims.push_back(d);
  }
  uint64_t nbytes = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&nbytes, "data size"));
  auto dt = static_cast<DataType>(dtype);
  uint64_t want_bytes = 0;
  if (!CheckedByteSize(dims, SizeOf(dt), &want_bytes))
    return Corruption(source, ": dims ", dims.ToString(), " of ", DataTypeName(dt),
                      " overflow the addressable size");
  if (nbytes != want_bytes)
    return Corruption(source, ": data size ", nbytes, " does not match dims ", dims.ToString(),
                      " of ", DataTypeName(dt));
  size_t data_at = r.pos();
  LOOM_RETURN_IF_ERROR(r.Skip(nbytes, "data"));
  size_t crc_at = r.pos();
  uint32_t stored_crc = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&stored_crc, "checksum"));
  if (r.pos() != bytes.size())
    return Corruption(source, ": ", bytes.size() - r.pos(), " trailing bytes after the checksum");
  uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(crc_at)));
  if (crc != stored_crc)
    return Corruption(source, ": checksum mismatch (stored ", stored_crc, ", computed ", crc,
                      "): the file is corrupt");
  Tensor t(dt, dims);
  void* dst = t.mutable_data(place, dt);
  MemCopy(place, dst, Place::CPU(), bytes.data() + data_at, nbytes);
  return t;
}

std::string SerializeSelectedRows(const SelectedRows& s) {
  std::string out(kRowsMagic, sizeof(kRowsMagic));
  Append<uint32_t>(&out, kRowsVersion);
  Append<uint64_t>(&out, s.rows.size());
  for (int64_t id : s.rows) Append<int64_t>(&out, id);
  Append<int64_t>(&out, s.height);
  uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
  Append<uint32_t>(&out, crc);
  out += SerializeTensor(s.value);
  return out;
}

StatusOr<SelectedRows> DeserializeSelectedRows(const std::string& bytes, const std::string& source,
                                               const Place& place) {
  if (bytes.size() < sizeof(kRowsMagic) || std::memcmp(bytes.data(), kRowsMagic, 8) != 0)
    return Corruption(source, ": not a Loom SelectedRows file (bad magic)");
  Reader r(bytes, source);
  LOOM_RETURN_IF_ERROR(r.Skip(8, "magic"));
  uint32_t version = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&version, "version"));
  if (version != kRowsVersion)
    return Corruption(source, ": unsupported SelectedRows format version ", version, " (expected ",
                      kRowsVersion, ")");
  uint64_t n = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&n, "row count"));
  if (n > (bytes.size() - r.pos()) / sizeof(int64_t))
    return Corruption(source, ": truncated (", n, " row ids do not fit in the file)");
  SelectedRows s;
  s.rows.resize(n);
  for (uint64_t i = 0; i < n; ++i) LOOM_RETURN_IF_ERROR(r.Read(&s.rows[i], "row id"));
  LOOM_RETURN_IF_ERROR(r.Read(&s.height, "height"));
  const size_t header = r.pos();
  uint32_t crc = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&crc, "checksum"));
  uint32_t want = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(header)));
  if (crc != want) return Corruption(source, ": checksum mismatch in the row ids");
  LOOM_ASSIGN_OR_RETURN(s.value, DeserializeTensor(bytes.substr(r.pos()), source, place));
  LOOM_RETURN_IF_ERROR(CheckSelectedRows(s, source));
  return s;
}

Status SaveSelectedRows(const SelectedRows& s, const std::string& path) {
  LOOM_RETURN_IF_ERROR(CheckSelectedRows(s, StrCat("saving ", path)));
  return WriteFileAtomic(path, SerializeSelectedRows(s));
}

StatusOr<SelectedRows> LoadSelectedRows(const std::string& path, const Place& place) {
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DeserializeSelectedRows(bytes, path, place);
}

Status SaveTensor(const Tensor& t, const std::string& path) {
  return WriteFileAtomic(path, SerializeTensor(t));
}

StatusOr<Tensor> LoadTensor(const std::string& path, const Place& place) {
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DeserializeTensor(bytes, path, place);
}

// ------------------------------------------------------------------ .npy

namespace {
StatusOr<std::string> NpyField(const std::string& header, const std::string& key,
                               const std::string& source) {
  auto k = header.find("'" + key + "'");
  if (k == std::string::npos) return Corruption(source, ": .npy header has no '", key, "'");
  auto colon = header.find(':', k);
  if (colon == std::string::npos) return Corruption(source, ": malformed .npy header");
  size_t start = colon + 1;
  while (start < header.size() && header[start] == ' ') ++start;
  size_t end = start;
  if (start < header.size() && header[start] == '(') {
    end = header.find(')', start);
    if (end == std::string::npos) return Corruption(source, ": malformed .npy shape");
    return header.substr(start + 1, end - start - 1);
  }
  if (start < header.size() && header[start] == '\'') {
    end = header.find('\'', start + 1);
    if (end == std::string::npos) return Corruption(source, ": malformed .npy header");
    return header.substr(start + 1, end - start - 1);
  }
  end = header.find_first_of(",}", start);
  return header.substr(start, end - start);
}
}  // namespace

StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return Corruption(source, ": not a .npy file (bad magic)");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Corruption(source, ": truncated .npy header");
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_at = 12;
  } else {
    return Corruption(source, ": unsupported .npy version ", major);
  }
  if (header_at + header_len > bytes.size()) return Corruption(source, ": truncated .npy header");
  std::string header = bytes.substr(header_at, header_len);
  LOOM_ASSIGN_OR_RETURN(std::string descr, NpyField(header, "descr", source));
  LOOM_ASSIGN_OR_RETURN(std::string fortran, NpyField(header, "fortran_order", source));
  LOOM_ASSIGN_OR_RETURN(std::string shape, NpyField(header, "shape", source));
  if (fortran.find("True") != std::string::npos)
    return InvalidArgument(source,
                           ": Fortran-order .npy arrays are not supported (save with "
                           "numpy.ascontiguousarray)");
  DataType dtype;
  bool from_u8 = false;
  if (descr == "<f4")
    dtype = proto::FP32;
  else if (descr == "<f8")
    dtype = proto::FP64;
  else if (descr == "<f2")
    dtype = proto::FP16;
  else if (descr == "<i4")
    dtype = proto::INT32;
  else if (descr == "<i8")
    dtype = proto::INT64;
  else if (descr == "|b1")
    dtype = proto::BOOL;
  else if (descr == "|u1") {
    dtype = proto::INT32;
    from_u8 = true;
  } else
    return InvalidArgument(source, ": unsupported .npy dtype '", descr,
                           "' (supported: <f2 <f4 <f8 <i4 <i8 |b1 |u1)");
  DDim dims;
  size_t pos = 0;
  while (pos < shape.size()) {
    size_t comma = shape.find(',', pos);
    std::string item =
        shape.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? shape.size() : comma + 1;
    size_t a = item.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    item = item.substr(a, item.find_last_not_of(' ') - a + 1);
    char* end = nullptr;
    long long d = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' && *end != 'L') return Corruption(source, ": bad .npy shape '", shape, "'");
    if (d < 0 || dims.size() == DDim::kMaxRank)
      return Corruption(source, ": bad .npy shape '", shape, "'");
    dims.push_back(d);
  }
  size_t data_at = header_at + header_len;
  size_t elem = from_u8 ? 1 : SizeOf(dtype);
  uint64_t need = 0;
  if (!CheckedByteSize(dims, elem, &need))
    return Corruption(source, ": .npy shape ", dims.ToString(), " overflows the addressable size");
  if (bytes.size() - data_at != need)
    return Corruption(source, ": .npy data has ", bytes.size() - data_at, " bytes, shape ",
                      dims.ToString(), " of ", descr, " needs ", need);
  Tensor t(dtype, dims);
  void* dst = t.mutable_data(Place::CPU(), dtype);
  if (from_u8) {
    auto* out = static_cast<int32_t*>(dst);
    for (size_t i = 0; i < need; ++i) out[i] = static_cast<unsigned char>(bytes[data_at + i]);
  } else if (need) {
    CopyBytes(dst, bytes.data() + data_at, need);
  }
  return t;
}

StatusOr<Tensor> LoadNpy(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseNpy(bytes, path);
}

std::string SerializeNpy(const Tensor& t) {
  const char* descr = "<f4";
  switch (t.dtype()) {
    case proto::FP32: descr = "<f4"; break;
    case proto::FP64: descr = "<f8"; break;
    case proto::FP16: descr = "<f2"; break;
    case proto::INT32: descr = "<i4"; break;
    case proto::INT64: descr = "<i8"; break;
    case proto::BOOL: descr = "|b1"; break;
  }
  std::string shape;
  for (int i = 0; i < t.dims().size(); ++i) shape += (i ? ", " : "") + std::to_string(t.dims()[i]);
  if (t.dims().size() == 1) shape += ",";
  std::string header =
      StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  Append<uint16_t>(&out, static_cast<uint16_t>(header.size()));
  out += header;
  Tensor host = t;
  if (!t.place().is_cpu()) TensorCopy(t, Place::CPU(), &host);
  if (t.nbytes()) out.append(static_cast<const char*>(host.raw_data()), t.nbytes());
  return out;
}

Status SaveNpy(const Tensor& t, const std::string& path) {
  return WriteFileAtomic(path, SerializeNpy(t));
}

// ------------------------------------------------------------------ params

std::string ParamFileName(const std::string& var_name) {
  std::string out;
  for (char c : var_name) {
    if (c == '/')
      out += "%2F";
    else if (c == '%')
      out += "%25";
    else
      out += c;
  }
  return out;
}

namespace {

// DIR/CHECKPOINT: written last by SaveParams into the directory it swaps in whole, so that a
// directory without one was not written by SaveParams; one line per file with its size and CRC-32,
// so that a mix of files from two saves is found before anything is loaded.
constexpr const char* kCheckpointFile = "CHECKPOINT";
constexpr const char* kCheckpointHeader = "loom-checkpoint 1";

struct CheckpointEntry {
  std::string file;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// The CRC-32 of a tensor file's contents before its own trailing checksum (a CRC taken over
// the whole file, checksum included, is the same constant for every sound file).
uint32_t Crc32Of(const std::string& bytes) {
  const size_t n = bytes.size() >= 4 ? bytes.size() - 4 : bytes.size();
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n)));
}

StatusOr<std::map<std::string, CheckpointEntry>> ReadCheckpoint(const std::string& dir) {
  const std::string path = JoinPath(dir, kCheckpointFile);
  if (!FileExists(path))
    return FailedPrecondition("'", dir, "' holds no ", kCheckpointFile,
                              " file: it was not written by save_params, or its save was "
                              "interrupted; nothing was loaded");
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::istringstream lines(text);
  std::string line;
  if (!std::getline(lines, line) || line != kCheckpointHeader)
    return Corruption(path, ": not a checkpoint manifest (expected '", kCheckpointHeader, "')");
  std::map<std::string, CheckpointEntry> entries;
  for (int no = 2; std::getline(lines, line); ++no) {
    std::istringstream fields(line);
    std::string name;
    CheckpointEntry e;
    if (!std::getline(fields, name, '\t') || !std::getline(fields, e.file, '\t') ||
        !(fields >> e.bytes >> std::hex >> e.crc))
      return Corruption(path, ":", no, ": expected NAME<TAB>FILE<TAB>BYTES CRC32");
    entries[name] = e;
  }
  return entries;
}

// The persistable dense tensors of block 0 with their values in the scope, sorted by name; an
// error names the first one without a value. Everything to save must exist before a file is
// touched.
// The persistables a save writes, sorted by name: dense tensors, and SelectedRows (the rows of
// a sparse table an inference model exports).
struct ToSave {
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  std::vector<std::pair<std::string, const SelectedRows*>> rows;
};

StatusOr<ToSave> PersistablesToSave(const ProgramDesc& program, const Scope& scope) {
  ToSave out;
  for (const VarDesc& v : program.GlobalBlock()->AllVars()) {
    if (!v.Persistable()) continue;
    const Variable* var = scope.FindVar(v.Name());
    if (v.Type() == proto::VarType::SELECTED_ROWS) {
      if (!var || !var->IsType<SelectedRows>())
        return FailedPrecondition("cannot save sparse table '", v.Name(),
                                  "': the scope holds no SelectedRows of that name");
      out.rows.push_back({v.Name(), &var->Get<SelectedRows>()});
      continue;
    }
    if (v.Type() != proto::VarType::DENSE_TENSOR) continue;
    if (!var || !var->IsType<Tensor>() || !var->Get<Tensor>().initialized())
      return FailedPrecondition("cannot save parameter '", v.Name(),
                                "': it has no value in the scope (run the startup program first)");
    out.tensors.push_back({v.Name(), &var->Get<Tensor>()});
  }
  auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::sort(out.tensors.begin(), out.tensors.end(), by_name);
  std::sort(out.rows.begin(), out.rows.end(), by_name);
  return out;
}

// A loaded SelectedRows against the program's declaration [height, width...] of it.
Status CheckDeclaredRows(const SelectedRows& s, const VarDesc& v, const std::string& source) {
  if (s.value.dtype() != v.Dtype())
    return InvalidArgument(source, ": sparse table '", v.Name(), "' is ",
                           DataTypeName(s.value.dtype()), ", the program declares ",
                           DataTypeName(v.Dtype()));
  DDim want = v.Dims(), got = s.value.dims();
  bool ok = want.size() == got.size();
  for (int i = 1; ok && i < want.size(); ++i) ok = want[i] < 0 || want[i] == got[i];
  if (!ok)
    return InvalidArgument(source, ": sparse table '", v.Name(), "' has rows of dims ",
                           got.ToString(), ", the program declares ", want.ToString());
  return Status::OK();
}

Status RefuseSparseInCombined(const ProgramDesc& program, const std::string& path) {
  for (const VarDesc& v : program.GlobalBlock()->AllVars())
    if (v.Persistable() && v.Type() == proto::VarType::SELECTED_ROWS)
      return InvalidArgument("combined parameter file '", path, "': the program has sparse "
                             "table '", v.Name(), "', which only a params directory holds "
                             "(save without params_filename)");
  return Status::OK();
}

// A loaded tensor against the program's declaration of it.
Status CheckDeclared(const Tensor& t, const VarDesc& v, const std::string& source) {
  if (t.dtype() != v.Dtype())
    return InvalidArgument(source, ": parameter '", v.Name(), "' is ", DataTypeName(t.dtype()),
                           ", the program declares ", DataTypeName(v.Dtype()));
  if (!DimsCompatible(t.dims(), v.Dims()))
    return InvalidArgument(source, ": parameter '", v.Name(), "' has dims ", t.dims().ToString(),
                           ", the program declares ", v.Dims().ToString());
  return Status::OK();
}

constexpr char kCombinedMagic[8] = {'L', 'O', 'O', 'M', 'P', 'R', 'M', 'S'};
constexpr uint32_t kCombinedVersion = 1;

}  // namespace

Status SaveParams(const ProgramDesc& program, const Scope& scope, const std::string& dir) {
  if (dir.empty()) return InvalidArgument("save_params: an empty directory name");
  LOOM_ASSIGN_OR_RETURN(ToSave to_save, PersistablesToSave(program, scope));
  // The whole directory is written beside the old one and swapped in (file_util.h): the
  // previous checkpoint stays loadable until this one is complete.
  return ReplaceDirectory(dir, [&](const std::string& staging) -> Status {
    std::string text = std::string(kCheckpointHeader) + "\n";
    auto write = [&](const std::string& name, const std::string& bytes) -> Status {
      const std::string file = ParamFileName(name);
      LOOM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, file), bytes));
      char crc[16];
      std::snprintf(crc, sizeof(crc), "%08x", Crc32Of(bytes));
      text += StrCat(name, "\t", file, "\t", bytes.size(), " ", crc, "\n");
      return Status::OK();
    };
    for (const auto& [name, tensor] : to_save.tensors)
      LOOM_RETURN_IF_ERROR(write(name, SerializeTensor(*tensor)));
    for (const auto& [name, rows] : to_save.rows) {
      LOOM_RETURN_IF_ERROR(CheckSelectedRows(*rows, StrCat("saving sparse table '", name, "'")));
      LOOM_RETURN_IF_ERROR(write(name, SerializeSelectedRows(*rows)));
    }
    return WriteFileAtomic(JoinPath(staging, kCheckpointFile), text);
  });
}

Status LoadParams(const ProgramDesc& program, Scope* scope, const std::string& dir,
                  const Place& place) {
  if (dir.empty()) return InvalidArgument("load_params: an empty directory name");
  LOOM_RETURN_IF_ERROR(RecoverDirectory(dir));  // a save that crashed between its two renames
  if (!IsDirectory(dir)) return NotFound("parameter directory '", dir, "' does not exist");
  LOOM_ASSIGN_OR_RETURN(auto entries, ReadCheckpoint(dir));
  // Every file is read and checked before the scope changes: a failed load leaves it as it was.
  std::vector<std::pair<std::string, Tensor>> loaded;
  std::vector<std::pair<std::string, SelectedRows>> loaded_rows;
  for (const VarDesc& v : program.GlobalBlock()->AllVars()) {
    const bool sparse = v.Type() == proto::VarType::SELECTED_ROWS;
    if (!v.Persistable() || (v.Type() != proto::VarType::DENSE_TENSOR && !sparse)) continue;
    auto it = entries.find(v.Name());
    if (it == entries.end())
      return NotFound("'", dir, "' holds no ", sparse ? "sparse table" : "parameter", " '",
                      v.Name(), "' (", entries.size(), " saved); nothing was loaded");
    const std::string path = JoinPath(dir, it->second.file);
    LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
    // The file's own checksum first (a damaged file), then the checkpoint's record of it (a
    // sound file from another save).
    Tensor t;
    SelectedRows rows;
    if (sparse) {
      LOOM_ASSIGN_OR_RETURN(rows, DeserializeSelectedRows(bytes, path, place));
    } else {
      LOOM_ASSIGN_OR_RETURN(t, DeserializeTensor(bytes, path, place));
    }
    if (bytes.size() != it->second.bytes || Crc32Of(bytes) != it->second.crc)
      return Corruption(path, ": is not the file ", kCheckpointFile, " records (", bytes.size(),
                        " bytes, recorded ", it->second.bytes,
                        "): the directory mixes files of two saves; nothing was loaded");
    if (sparse) {
      LOOM_RETURN_IF_ERROR(CheckDeclaredRows(rows, v, path));
      loaded_rows.push_back({v.Name(), std::move(rows)});
    } else {
      LOOM_RETURN_IF_ERROR(CheckDeclared(t, v, path));
      loaded.push_back({v.Name(), std::move(t)});
    }
  }
  for (auto& [name, t] : loaded) *scope->Var(name)->GetMutable<Tensor>() = std::move(t);
  for (auto& [name, r] : loaded_rows)
    *scope->Var(name)->GetMutable<SelectedRows>() = std::move(r);
  scope->AdvancePersistablesGeneration();
  return Status::OK();
}

Status SaveParamsCombined(const ProgramDesc& program, const Scope& scope, const std::string& path) {
  if (path.empty()) return InvalidArgument("save_combine: an empty file name");
  LOOM_RETURN_IF_ERROR(RefuseSparseInCombined(program, path));
  LOOM_ASSIGN_OR_RETURN(ToSave to_save, PersistablesToSave(program, scope));
  const auto& tensors = to_save.tensors;
  std::string out(kCombinedMagic, sizeof(kCombinedMagic));
  Append<uint32_t>(&out, kCombinedVersion);
  Append<uint32_t>(&out, static_cast<uint32_t>(tensors.size()));
  for (const auto& [name, tensor] : tensors) {
    Append<uint32_t>(&out, static_cast<uint32_t>(name.size()));
    out += name;
    const std::string bytes = SerializeTensor(*tensor);
    Append<uint64_t>(&out, bytes.size());
    out += bytes;
  }
  Append<uint32_t>(&out, static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(out.data()),
                                                     static_cast<uInt>(out.size()))));
  return WriteFileAtomic(path, out);
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadParamsCombined(const std::string& path,
                                                                         const Place& place) {
  if (path.empty()) return InvalidArgument("load_combine: an empty file name");
  if (IsDirectory(path))
    return InvalidArgument("combined parameter file '", path,
                           "' is a directory (a params/ directory is loaded without "
                           "params_filename)");
  if (!FileExists(path)) return NotFound("combined parameter file '", path, "' does not exist");
  LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  if (bytes.size() < sizeof(kCombinedMagic) ||
      std::memcmp(bytes.data(), kCombinedMagic, sizeof(kCombinedMagic)) != 0)
    return Corruption(path, ": not a Loom combined parameter file (bad magic)");
  if (bytes.size() < sizeof(kCombinedMagic) + 12)
    return Corruption(path, ": truncated (", bytes.size(), " bytes)");
  const size_t crc_at = bytes.size() - 4;
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + crc_at, 4);
  const auto crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(crc_at)));
  if (crc != stored_crc)
    return Corruption(path, ": checksum mismatch (stored ", stored_crc, ", computed ", crc,
                      "): the file is corrupt or truncated");
  Reader r(bytes, path);
  LOOM_RETURN_IF_ERROR(r.Skip(sizeof(kCombinedMagic), "magic"));
  uint32_t version = 0, count = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&version, "version"));
  if (version != kCombinedVersion)
    return Corruption(path, ": unsupported combined format version ", version, " (expected ",
                      kCombinedVersion, ")");
  LOOM_RETURN_IF_ERROR(r.Read(&count, "count"));
  std::vector<std::pair<std::string, Tensor>> out;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_size = 0;
    LOOM_RETURN_IF_ERROR(r.Read(&name_size, "name size"));
    const size_t name_at = r.pos();
    LOOM_RETURN_IF_ERROR(r.Skip(name_size, "name"));
    std::string name = bytes.substr(name_at, name_size);
    if (!out.empty() && !(out.back().first < name))
      return Corruption(path, ": entry ", i, " '", name,
                        "' is out of order (entries are "
                        "sorted by name)");
    uint64_t size = 0;
    LOOM_RETURN_IF_ERROR(r.Read(&size, "tensor size"));
    const size_t at = r.pos();
    LOOM_RETURN_IF_ERROR(r.Skip(size, "tensor"));
    if (r.pos() > crc_at) return Corruption(path, ": truncated (entry '", name, "')");
    LOOM_ASSIGN_OR_RETURN(
        Tensor t,
        DeserializeTensor(bytes.substr(at, size), StrCat(path, " (entry '", name, "')"), place));
    out.push_back({std::move(name), std::move(t)});
  }
  if (r.pos() != crc_at)
    return Corruption(path, ": ", crc_at - r.pos(), " bytes after the last of ", count, " entries");
  return out;
}

Status LoadParamsCombined(const ProgramDesc& program, Scope* scope, const std::string& path,
                          const Place& place) {
  LOOM_RETURN_IF_ERROR(RefuseSparseInCombined(program, path));
  LOOM_ASSIGN_OR_RETURN(auto entries, ReadParamsCombined(path, place));
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, t] : entries) by_name[name] = &t;
  // Every entry is checked before the scope changes: a failed load leaves it as it was.
  std::vector<std::pair<std::string, Tensor*>> loaded;
  for (const VarDesc& v : program.GlobalBlock()->AllVars()) {
    if (!v.Persistable() || v.Type() != proto::VarType::DENSE_TENSOR) continue;
    auto it = by_name.find(v.Name());
    if (it == by_name.end())
      return NotFound("'", path, "' holds no parameter '", v.Name(), "' (", entries.size(),
                      " saved); nothing was loaded");
    LOOM_RETURN_IF_ERROR(CheckDeclared(*it->second, v, path));
    loaded.push_back({v.Name(), it->second});
  }
  for (auto& [name, t] : loaded) *scope->Var(name)->GetMutable<Tensor>() = std::move(*t);
  scope->AdvancePersistablesGeneration();
  return Status::OK();
}

uint64_t TensorDigest(const Tensor& t) {
  const std::string shape = StrCat(static_cast<int>(t.dtype()), ":", t.dims().ToString());
  const uLong meta =
      crc32(0L, reinterpret_cast<const Bytef*>(shape.data()), static_cast<uInt>(shape.size()));
  uLong data = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(t.raw_data());
  for (size_t left = t.nbytes(); left > 0;) {  // crc32 takes at most 4 GiB at a time
    const size_t n = std::min<size_t>(left, size_t{1} << 30);
    data = crc32(data, p, static_cast<uInt>(n));
    p += n;
    left -= n;
  }
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(meta & 0x7fffffff) << 32) |
         (data & 0xffffffff);
}

}  // namespace loom
