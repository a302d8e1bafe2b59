#include "tools/model_dir.h"

#include "framework/file_util.h"
#include "tools/proto_text.h"

namespace loom::cli {

StatusOr<ModelDir> ResolveModelDir(const std::string& dir) {
  if (!IsDirectory(dir)) return NotFound("directory '", dir, "' does not exist");
  ModelDir m;
  const std::string manifest = JoinPath(dir, "bundle.pbtxt");
  if (FileExists(manifest)) {
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(manifest));
    LOOM_RETURN_IF_ERROR(ParseTextProto(text, manifest, "a bundle manifest", &m.manifest));
  }
  const std::string& model_file = m.manifest.model_file();
  if (!model_file.empty() && model_file.find('/') != std::string::npos)
    return InvalidArgument(manifest, ": model_file '", model_file,
                           "' must be a file name inside the directory");
  m.program = JoinPath(dir, model_file.empty() ? "main.pb" : model_file);
  if (!FileExists(m.program) || IsDirectory(m.program)) {
    if (!model_file.empty())
      return NotFound(manifest, " names model_file '", model_file, "', but ", m.program,
                      " does not exist");
    return NotFound("'", dir,
                    "' is a directory without main.pb: give a program file, a bundle "
                    "directory or a directory save_inference_model wrote");
  }
  const std::string& params_file = m.manifest.params_file();
  if (!params_file.empty()) {
    m.params = JoinPath(dir, params_file);
    if (!FileExists(m.params))
      return NotFound(manifest, " names params_file '", params_file, "', but ", m.params,
                      " does not exist");
  } else if (IsDirectory(JoinPath(dir, "params"))) {
    m.params = JoinPath(dir, "params");
  }
  m.has_startup = FileExists(JoinPath(dir, "startup.pb"));
  return m;
}

}  // namespace loom::cli
