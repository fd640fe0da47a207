// Shared receive queues: one pool of receive buffers for many QPs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "uroce/fwd.hpp"

namespace uroce {

struct SrqConfig {
  uint32_t max_wr = 128;  // receive WRs it holds, 1..32768
  uint32_t max_sge = 4;   // SGEs per receive WR, up to 32
  // When non-zero, SRQ_LIMIT_REACHED is raised (once) when fewer than this
  // many WRs remain.
  uint32_t srq_limit = 0;
};

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(SharedReceiveQueue&&) noexcept;
  SharedReceiveQueue& operator=(SharedReceiveQueue&&) noexcept;
  ~SharedReceiveQueue();  // every QP using it must be destroyed first

  // Posts receive WRs in order; on failure *bad (if given) is the index of
  // the first one not posted.  ENOMEM when full, EINVAL on too many SGEs.
  Status post_recv(std::span<const RecvWr> wrs, size_t* bad = nullptr);
  Status post_recv(const RecvWr& wr);

  // Arms the limit event: SRQ_LIMIT_REACHED once fewer than `limit` WRs
  // remain (0 disarms).
  Status arm_limit(uint32_t limit);
  // Current max_wr, max_sge and (armed) limit.
  SrqConfig query() const;

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class ProtectionDomain;
  friend struct detail::SrqImpl;
  explicit SharedReceiveQueue(std::unique_ptr<detail::SrqImpl> impl) noexcept;
  std::unique_ptr<detail::SrqImpl> impl_;
};

}  // namespace uroce
