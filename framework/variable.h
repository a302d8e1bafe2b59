// Variable: a named slot in a Scope holding one object (a Tensor, or e.g. a communicator).
// Not thread-safe: the executor orders readers and writers by the program's dependencies.
#pragma once

#include <memory>
#include <typeindex>

#include "base/status.h"
#include "framework/tensor.h"

namespace loom {

class Variable {
 public:
  template <typename T>
  T* GetMutable() {
    if (!holder_) {
      holder_ = std::make_unique<Holder<T>>();
    } else {
      LOOM_CHECK(holder_->type() == typeid(T), "variable holds ", holder_->type().name(),
                 ", requested ", typeid(T).name());
    }
    return static_cast<T*>(holder_->ptr());
  }
  template <typename T>
  const T& Get() const {
    LOOM_CHECK(holder_ && holder_->type() == typeid(T), "variable does not hold ",
               typeid(T).name());
    return *static_cast<const T*>(holder_->ptr());
  }
  template <typename T>
  bool IsType() const {
    return holder_ && holder_->type() == typeid(T);
  }
  bool IsInitialized() const { return holder_ != nullptr; }
  void Clear() { holder_.reset(); }

 private:
  struct Placeholder {
    virtual ~Placeholder() = default;
    virtual std::type_index type() const = 0;
    virtual void* ptr() = 0;
  };
  template <typename T>
  struct Holder : Placeholder {
    T value;
    std::type_index type() const override { return typeid(T); }
    void* ptr() override { return &value; }
  };
  std::unique_ptr<Placeholder> holder_;
};

}  // namespace loom
