#include "runtime/slurm.h"

#include <cstdlib>

namespace loom::runtime {
namespace {

StatusOr<long> ParseNumber(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0)
    return InvalidArgument(what, ": '", text, "' is not a number >= 0");
  return v;
}

// Splits on commas outside brackets.
std::vector<std::string> SplitTop(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

const char* EnvOf(std::initializer_list<const char*> names, const char** which) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') {
      *which = n;
      return v;
    }
  *which = *names.begin();
  return nullptr;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : SplitTop(list)) {
    const size_t open = item.find('[');
    if (item.empty()) return InvalidArgument("host list '", list, "': an empty entry");
    if (open == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == std::string::npos)
      return InvalidArgument("host list '", list, "': '", item, "' has no closing ']'");
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    for (const std::string& range : SplitTop(item.substr(open + 1, close - open - 1))) {
      const size_t dash = range.find('-');
      const std::string lo = range.substr(0, dash);
      const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      LOOM_ASSIGN_OR_RETURN(long a, ParseNumber(lo, "host list '" + list + "'"));
      LOOM_ASSIGN_OR_RETURN(long b, ParseNumber(hi, "host list '" + list + "'"));
      if (b < a || b - a > 100000)
        return InvalidArgument("host list '", list, "': range '", range, "'");
      for (long n = a; n <= b; ++n) {
        std::string digits = std::to_string(n);
        if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
        hosts.push_back(prefix + digits + suffix);
      }
    }
  }
  return hosts;
}

StatusOr<std::vector<int>> ExpandTasksPerNode(const std::string& spec) {
  std::vector<int> out;
  for (const std::string& item : SplitTop(spec)) {
    const size_t x = item.find("(x");
    const std::string count = item.substr(0, x);
    LOOM_ASSIGN_OR_RETURN(long n, ParseNumber(count, "tasks per node '" + spec + "'"));
    long times = 1;
    if (x != std::string::npos) {
      if (item.back() != ')')
        return InvalidArgument("tasks per node '", spec, "': '", item, "' lacks its ')'");
      LOOM_ASSIGN_OR_RETURN(times, ParseNumber(item.substr(x + 2, item.size() - x - 3),
                                               "tasks per node '" + spec + "'"));
    }
    if (times > 100000) return InvalidArgument("tasks per node '", spec, "': '", item, "'");
    for (long i = 0; i < times; ++i) out.push_back(static_cast<int>(n));
  }
  return out;
}

StatusOr<SlurmStep> SlurmStepFromEnv() {
  const char* name = nullptr;
  const char* procid = EnvOf({"SLURM_PROCID"}, &name);
  if (procid == nullptr) return FailedPrecondition("SLURM_PROCID is unset: not a task of srun");
  LOOM_ASSIGN_OR_RETURN(long rank, ParseNumber(procid, "SLURM_PROCID"));
  const char* ntasks_text = EnvOf({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &name);
  if (ntasks_text == nullptr) return FailedPrecondition("SLURM_NTASKS is unset");
  LOOM_ASSIGN_OR_RETURN(long ntasks, ParseNumber(ntasks_text, name));
  const char* nodes_name = nullptr;
  const char* nodes = EnvOf({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, &nodes_name);
  if (nodes == nullptr) return FailedPrecondition("SLURM_JOB_NODELIST is unset");
  const char* per_name = nullptr;
  const char* per = EnvOf({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &per_name);
  if (per == nullptr) return FailedPrecondition("SLURM_TASKS_PER_NODE is unset");
  LOOM_ASSIGN_OR_RETURN(auto hosts, ExpandHostlist(nodes));
  LOOM_ASSIGN_OR_RETURN(auto counts, ExpandTasksPerNode(per));
  if (hosts.size() != counts.size())
    return InvalidArgument(nodes_name, " names ", hosts.size(), " nodes, ", per_name, " gives ",
                           counts.size(), " counts ('", nodes, "', '", per, "')");
  SlurmStep step;
  for (size_t n = 0; n < hosts.size(); ++n)
    for (int i = 0; i < counts[n]; ++i) {
      step.task_hosts.push_back(hosts[n]);
      step.local_index.push_back(i);
    }
  if (static_cast<long>(step.task_hosts.size()) != ntasks)
    return InvalidArgument(per_name, " '", per, "' places ", step.task_hosts.size(), " tasks, ",
                           name, " is ", ntasks);
  if (rank >= ntasks) return InvalidArgument("SLURM_PROCID ", rank, " is not a task of ", ntasks);
  step.rank = static_cast<int>(rank);
  return step;
}

}  // namespace loom::runtime
