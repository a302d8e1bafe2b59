#include "tools/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/byte_size.h"

namespace loom::cli {

Flags::Flags(std::string command, std::string synopsis, std::string description,
             std::vector<FlagSpec> specs, int min_positional, int max_positional)
    : command_(std::move(command)),
      synopsis_(std::move(synopsis)),
      description_(std::move(description)),
      specs_(std::move(specs)),
      min_positional_(min_positional),
      max_positional_(max_positional) {}

std::vector<FlagSpec> JoinFlags(std::vector<std::vector<FlagSpec>> groups) {
  std::vector<FlagSpec> out;
  for (std::vector<FlagSpec>& group : groups) {
    for (FlagSpec& spec : group) out.push_back(std::move(spec));
  }
  return out;
}

const FlagSpec* Flags::Find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

Status Flags::Parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return Status::OK();
    }
    if (arg == "-o" && Find("output")) arg = "--output";  // the one short alias
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2), value;
      bool inline_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      const FlagSpec* spec = Find(name);
      if (!spec)
        return InvalidArgument("unknown flag --", name, " (see loom ", command_, " --help)");
      if (spec->value.empty()) {
        if (inline_value) return InvalidArgument("flag --", name, " takes no value");
        values_[name].push_back("1");
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argc)
          return InvalidArgument("flag --", name, " needs a value (", spec->value, ")");
        value = argv[++i];
      }
      // An empty value would mean "the current directory" for a path and nothing for anything
      // else: a mistake, not a choice.
      if (value.empty())
        return InvalidArgument("flag --", name, " was given an empty value (", spec->value, ")");
      if (!spec->repeated && values_.count(name))
        return InvalidArgument("flag --", name, " given twice");
      values_[name].push_back(value);
      continue;
    }
    positional_.push_back(arg);
  }
  int n = static_cast<int>(positional_.size());
  if (n < min_positional_ || n > max_positional_)
    return InvalidArgument(
        "expected ", min_positional_ == max_positional_ ? "" : "between ", min_positional_,
        min_positional_ == max_positional_ ? "" : StrCat(" and ", max_positional_),
        " argument(s), got ", n, ": usage: ", synopsis_);
  return Status::OK();
}

std::string Flags::Help() const {
  std::ostringstream os;
  os << "usage: " << synopsis_ << "\n\n" << description_ << "\n";
  if (!specs_.empty()) os << "\nflags:\n";
  for (const auto& s : specs_) {
    std::string left = "  --" + s.name + (s.value.empty() ? "" : " " + s.value);
    os << left;
    if (left.size() < 28)
      os << std::string(28 - left.size(), ' ');
    else
      os << "\n" << std::string(28, ' ');
    os << s.help;
    if (!s.default_value.empty()) os << " (default: " << s.default_value << ")";
    if (s.repeated) os << " [repeatable]";
    os << "\n";
  }
  os << "  --help                    print this help\n";
  return os.str();
}

const std::string& Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second.back();
  const FlagSpec* spec = Find(name);
  LOOM_CHECK(spec != nullptr, "flag --", name, " is not declared");
  return spec->default_value;
}

const std::vector<std::string>& Flags::GetAll(const std::string& name) const {
  static const std::vector<std::string> kEmpty;
  auto it = values_.find(name);
  return it == values_.end() ? kEmpty : it->second;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name) const {
  const std::string& v = Get(name);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0')
    return InvalidArgument("flag --", name, " expects an integer, got '", v, "'");
  if (errno == ERANGE) return InvalidArgument("flag --", name, " value '", v, "' is out of range");
  return static_cast<int64_t>(x);
}

StatusOr<double> Flags::GetDouble(const std::string& name, double min, double max) const {
  const std::string& v = Get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max)
    return InvalidArgument("flag --", name, " expects a number in [", min, ", ", max, "], got '", v,
                           "'");
  return x;
}

int RunSubcommand(Flags& flags, int argc, char** argv,
                  const std::function<Status(const Flags&)>& body,
                  const std::function<Status(const Flags&)>& check) {
  Status parsed = flags.Parse(argc, argv);
  if (flags.help()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  if (parsed.ok() && check) parsed = check(flags);
  if (!parsed.ok()) {
    std::fprintf(stderr, "loom %s: %s\n", flags.command().c_str(), parsed.message().c_str());
    return kExitUsage;
  }
  Status st;
  try {
    st = body(flags);
  } catch (...) {  // an exception is an error like any other (base/status.h)
    st = StatusOfException(std::current_exception());
  }
  if (!st.ok()) {
    std::fprintf(stderr, "loom %s: error: %s\n", flags.command().c_str(), st.message().c_str());
    return kExitError;
  }
  return kExitOk;
}

StatusOr<size_t> ParseSizeFlag(const std::string& flag, const std::string& v) {
  StatusOr<size_t> size = ParseByteSize(v);
  if (!size.ok())
    return InvalidArgument("--", flag, " expects a size like 4096, 64K, 1M or 2G, got '", v, "'");
  return size;
}

}  // namespace loom::cli
