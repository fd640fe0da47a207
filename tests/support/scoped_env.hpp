// An environment variable set (or unset) for one scope of a test, and put
// back as it was when the scope ends, for tests of the UROCE_* variables.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace uroce::test {

class ScopedEnv {
 public:
  // Sets `name` to `value`, or unsets it when `value` is null.
  explicit ScopedEnv(const char* name, const char* value = nullptr) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    set(value);
  }
  ~ScopedEnv() { set(saved_ ? saved_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const char* value) {
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace uroce::test
