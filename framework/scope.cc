#include "framework/scope.h"

#include <algorithm>
#include <atomic>
#include <unordered_set>

namespace loom {

Scope::~Scope() { DropKids(); }

Variable* Scope::Var(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = vars_[name];
  if (!slot) slot = std::make_unique<Variable>();
  return slot.get();
}

Variable* Scope::FindLocalVar(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : it->second.get();
}

Variable* Scope::FindVar(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_) {
    if (Variable* v = s->FindLocalVar(name)) return v;
  }
  return nullptr;
}

bool Scope::EraseLocalVar(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return vars_.erase(name) > 0;
}

std::vector<std::string> Scope::LocalVarNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (auto& kv : vars_) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  return names;
}

Scope& Scope::NewScope() {
  std::lock_guard<std::mutex> lock(mu_);
  kids_.push_back(std::unique_ptr<Scope>(new Scope(this)));
  return *kids_.back();
}

uint64_t Scope::NextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void Scope::DeleteScope(Scope* kid) {
  std::lock_guard<std::mutex> lock(mu_);
  kids_.remove_if([kid](const std::unique_ptr<Scope>& s) { return s.get() == kid; });
}

void Scope::DeleteScopes(const std::vector<Scope*>& kids) {
  if (kids.empty()) return;
  std::unordered_set<const Scope*> doomed(kids.begin(), kids.end());
  std::lock_guard<std::mutex> lock(mu_);
  kids_.remove_if([&doomed](const std::unique_ptr<Scope>& s) { return doomed.count(s.get()) > 0; });
}

void Scope::DropKids() {
  std::lock_guard<std::mutex> lock(mu_);
  kids_.clear();
}

}  // namespace loom
