// An environment variable set (or, with nullptr, unset) for a scope, as it was afterwards: the
// tests that compare settings of kiln's variables (docs/env_vars.md) leave none behind for the
// tests after them.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace kiln::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace kiln::testing
