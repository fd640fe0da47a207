// Protection domain: groups the QPs, MRs, SRQs and AHs that may work together.
#pragma once

#include <atomic>

namespace uroce::verbs {

class Context;

class Pd {
 public:
  explicit Pd(Context& ctx) noexcept : ctx_(&ctx) {}
  Pd(const Pd&) = delete;
  Pd& operator=(const Pd&) = delete;

  Context& context() const noexcept { return *ctx_; }
  // Objects created in this PD and not yet destroyed; dealloc fails (EBUSY) while > 0.
  std::atomic<int>& users() noexcept { return users_; }

 private:
  Context* ctx_;
  std::atomic<int> users_{0};
};

}  // namespace uroce::verbs
