#include "tools/proto_text.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

namespace loom::cli {

namespace {

// Keeps the first error; protobuf would otherwise log every one of them itself.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
#if GOOGLE_PROTOBUF_VERSION >= 4022000
  void RecordError(int line, google::protobuf::io::ColumnNumber column,
                   absl::string_view message) override {
    Keep(line, column, std::string(message));
  }
#else
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    Keep(line, column, message);
  }
#endif
  bool seen = false;
  int line = 0, column = 0;
  std::string message;

 private:
  void Keep(int l, int c, std::string m) {
    if (seen) return;
    seen = true;
    line = l;
    column = c;
    message = std::move(m);
    while (!message.empty() && (message.back() == '.' || message.back() == ' ')) message.pop_back();
  }
};

}  // namespace

Status ParseTextProto(const std::string& text, const std::string& path, const std::string& what,
                      google::protobuf::Message* message) {
  FirstError errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (parser.ParseFromString(text, message)) return Status::OK();
  if (!errors.seen) return Corruption(path, ": not a valid ", what, " (protobuf text format)");
  // The tokenizer counts lines and columns from 0.
  return Corruption(path, ":", errors.line + 1, ":", errors.column + 1, ": ", errors.message,
                    " (expected ", what, " in protobuf text format)");
}

}  // namespace loom::cli
