// A small flag parser for the loom subcommands: each subcommand declares a table of flags
// (name, value name, help, default, repeatable) that both parses argv and prints --help.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::cli {

struct FlagSpec {
  std::string name;   // without the leading "--"
  std::string value;  // value placeholder for help ("N"); empty for a boolean switch
  std::string help;
  std::string default_value;
  bool repeated = false;
};

class Flags {
 public:
  Flags(std::string command, std::string synopsis, std::string description,
        std::vector<FlagSpec> specs, int min_positional, int max_positional);

  // Parses argv (after the subcommand name). Usage errors come back as InvalidArgument.
  Status Parse(int argc, char** argv);
  bool help() const { return help_; }
  std::string Help() const;

  const std::string& Get(const std::string& name) const;
  const std::vector<std::string>& GetAll(const std::string& name) const;
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  bool Switch(const std::string& name) const { return Has(name); }
  StatusOr<int64_t> GetInt(const std::string& name) const;
  // A finite number in [min, max]; inf, nan and values outside are errors that say the range.
  StatusOr<double> GetDouble(const std::string& name, double min, double max) const;
  const std::vector<std::string>& positional() const { return positional_; }
  const std::string& command() const { return command_; }

 private:
  const FlagSpec* Find(const std::string& name) const;

  std::string command_, synopsis_, description_;
  std::vector<FlagSpec> specs_;
  int min_positional_, max_positional_;
  bool help_ = false;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// A flag table kept in groups: every group's flags, in order.
std::vector<FlagSpec> JoinFlags(std::vector<std::vector<FlagSpec>> groups);

// Exit codes of the loom tool.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// The shape of every subcommand's entry point: parses argv into flags; --help prints the help
// (exit 0); a parse error or an error from `check` (extra usage rules) prints
// "loom CMD: MESSAGE" (exit 2); otherwise runs `body`, whose error prints
// "loom CMD: error: MESSAGE" (exit 1).
int RunSubcommand(Flags& flags, int argc, char** argv,
                  const std::function<Status(const Flags&)>& body,
                  const std::function<Status(const Flags&)>& check = nullptr);

// A size flag's value: bytes with an optional K, M or G (powers of 1024), e.g. 4096, 64K, 1M.
StatusOr<size_t> ParseSizeFlag(const std::string& flag, const std::string& v);

}  // namespace loom::cli
