// Reading and writing programs and tensors. Formats are documented in docs/FORMATS.md.
// All writers are atomic (see file_util.h); all readers validate and return clear errors.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/program_desc.h"
#include "framework/scope.h"
#include "framework/selected_rows.h"
#include "framework/tensor.h"

namespace loom {

// Programs: binary protobuf (.pb), or protobuf text format when the path ends in .pbtxt/.txt.
StatusOr<ProgramDesc> ParseProgram(const std::string& bytes, const std::string& source);
StatusOr<ProgramDesc> ParseProgramText(const std::string& text, const std::string& source);
// Reads and verifies a program file.
StatusOr<ProgramDesc> LoadProgram(const std::string& path);
Status SaveProgram(const ProgramDesc& program, const std::string& path);
std::string ProgramToText(const ProgramDesc& program);

// Tensors ("LOOMTNSR" format: magic, version, dtype, dims, data, CRC-32). CPU or device tensors;
// loaded tensors land on place.
std::string SerializeTensor(const Tensor& t);
StatusOr<Tensor> DeserializeTensor(const std::string& bytes, const std::string& source,
                                   const Place& place = Place::CPU());
Status SaveTensor(const Tensor& t, const std::string& path);
StatusOr<Tensor> LoadTensor(const std::string& path, const Place& place = Place::CPU());

// SelectedRows ("LOOMSROW" format: magic, version, row count, the int64 ids, height, CRC-32,
// then the value as one LOOMTNSR record). Loading checks the ids against the height and the
// value's rows against the ids (CheckSelectedRows).
std::string SerializeSelectedRows(const SelectedRows& s);
StatusOr<SelectedRows> DeserializeSelectedRows(const std::string& bytes, const std::string& source,
                                               const Place& place = Place::CPU());
Status SaveSelectedRows(const SelectedRows& s, const std::string& path);
StatusOr<SelectedRows> LoadSelectedRows(const std::string& path, const Place& place = Place::CPU());

// NumPy .npy (versions 1.0-3.0, little-endian, C order; f2/f4/f8/i4/i8/b1; i8 and u1 read too).
StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& source);
StatusOr<Tensor> LoadNpy(const std::string& path);
std::string SerializeNpy(const Tensor& t);
Status SaveNpy(const Tensor& t, const std::string& path);

// Persistable variables of a program: one tensor file per var, named after the var
// ('/' in names becomes '%2F'). Loading checks dims and dtype against the program's VarDescs.
Status SaveParams(const ProgramDesc& program, const Scope& scope, const std::string& dir);
Status LoadParams(const ProgramDesc& program, Scope* scope, const std::string& dir,
                  const Place& place = Place::CPU());
std::string ParamFileName(const std::string& var_name);

// The same persistable variables in one file (Fluid's save_combine / load_combine; format
// "LOOMPRMS" in docs/FORMATS.md): the variables sorted by name, each a name and a tensor record,
// then a CRC-32 of the whole file. Written atomically. ReadParamsCombined returns the entries in
// file order; LoadParamsCombined checks them against the program's VarDescs (a variable the
// program needs and the file lacks is an error; extra entries are ignored) before it changes the
// scope. Every error names the file.
Status SaveParamsCombined(const ProgramDesc& program, const Scope& scope, const std::string& path);
StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadParamsCombined(
    const std::string& path, const Place& place = Place::CPU());
Status LoadParamsCombined(const ProgramDesc& program, Scope* scope, const std::string& path,
                          const Place& place = Place::CPU());

// A digest of a CPU tensor's dtype, dims and bytes (CRC-32s; bit 63 always set, so 0 can stand
// for "no tensor"): equal tensors give equal digests in every process, different ones differ
// but by a 2^-32 chance. For checks that ranks or servers start from the same state.
uint64_t TensorDigest(const Tensor& t);

}  // namespace loom
