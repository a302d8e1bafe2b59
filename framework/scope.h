// Scope: a hierarchical name -> Variable map. Lookups walk up to the parent; persistable
// variables live in the outer scope, temporaries in a child scope per prepared program.
// Thread-safety: creating and finding variables is safe from several threads.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/variable.h"

namespace loom {

class Scope {
 public:
  Scope() = default;
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // Finds name in this scope only, creating it if absent.
  Variable* Var(const std::string& name);
  // Finds name here or in an ancestor; nullptr when absent.
  Variable* FindVar(const std::string& name) const;
  Variable* FindLocalVar(const std::string& name) const;
  bool EraseLocalVar(const std::string& name);
  std::vector<std::string> LocalVarNames() const;

  Scope& NewScope();
  void DeleteScope(Scope* kid);
  // Deletes several kids in one pass (a loop's per-iteration scopes).
  void DeleteScopes(const std::vector<Scope*>& kids);
  void DropKids();
  // Unique per scope ever created in the process: caches key on it, not on the address.
  uint64_t serial() const { return serial_; }
  // Counts the runs and loads that wrote this scope's persistable variables (the executor and
  // LoadParams advance it): a holder of copies of them (the places of a data-parallel program)
  // sees that they changed behind its back.
  uint64_t persistables_generation() const { return generation_.load(); }
  void AdvancePersistablesGeneration() { generation_.fetch_add(1); }
  const Scope* parent() const { return parent_; }

 private:
  explicit Scope(const Scope* parent) : parent_(parent) {}

  static uint64_t NextSerial();
  const Scope* parent_ = nullptr;
  uint64_t serial_ = NextSerial();
  std::atomic<uint64_t> generation_{0};
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Variable>> vars_;
  std::list<std::unique_ptr<Scope>> kids_;
};

}  // namespace loom
