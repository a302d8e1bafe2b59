// A directory given where the CLI expects a program: a program bundle (`loom run` reads it) or a
// model Python's save_inference_model wrote. Its DIR/bundle.pbtxt names the program file when it
// is not main.pb (model_filename) and the combined parameter file (params_filename); otherwise
// the program is DIR/main.pb and an inference model's parameters are DIR/params.
#pragma once

#include <string>

#include "base/status.h"
#include "framework/framework.pb.h"

namespace loom::cli {

struct ModelDir {
  std::string program;       // the program file: DIR/main.pb or DIR/<model_file>
  std::string params;        // DIR/params, DIR/<params_file>, or empty when DIR holds neither
  bool has_startup = false;  // DIR/startup.pb exists (a training bundle)
  proto::BundleManifest manifest;
};

// Reads DIR/bundle.pbtxt (when present) and finds the program file. Errors name DIR, the file
// looked for and, for a model_file the manifest names, the manifest.
StatusOr<ModelDir> ResolveModelDir(const std::string& dir);

}  // namespace loom::cli
