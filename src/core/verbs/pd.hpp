// Protection domain: groups the QPs, MRs, SRQs and AHs that may work together.
#pragma once

#include <atomic>
#include <memory>

#include "common/status.hpp"
#include "transport/ports.hpp"
#include "verbs/resources.hpp"

namespace uroce::verbs {

class Context;

class Pd final : public transport::MemoryDomain {
 public:
  // ENOMEM beyond the device's max_pd.
  static Result<std::unique_ptr<Pd>> create(Context& ctx);
  ~Pd();
  Pd(const Pd&) = delete;
  Pd& operator=(const Pd&) = delete;

  Context& context() const noexcept { return *ctx_; }
  // Objects created in this PD and not yet destroyed; dealloc fails (EBUSY) while > 0.
  std::atomic<int>& users() noexcept { return users_; }

  // transport::MemoryDomain: the regions of this PD, by key.
  uint8_t* local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need) const noexcept override;
  uint8_t* remote(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need, uint32_t qpn,
                  transport::AccessFault& fault) const noexcept override;
  WcStatus bind_window(const transport::WindowBind& b, uint32_t qpn) const noexcept override;
  bool invalidate(uint32_t rkey) const noexcept override;

 private:
  Pd(Context& ctx, ResourceHold hold) noexcept : ctx_(&ctx), hold_(std::move(hold)) {}
  Context* ctx_;
  ResourceHold hold_;
  std::atomic<int> users_{0};
};

}  // namespace uroce::verbs
