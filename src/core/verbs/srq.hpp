// Shared receive queue, with the limit event (IBV_EVENT_SRQ_LIMIT_REACHED):
// armed by modify(limit), it fires once when fewer than `limit` WQEs remain.
#pragma once

#include <atomic>
#include <memory>
#include <span>

#include "common/status.hpp"
#include "transport/ports.hpp"
#include "transport/work_queue.hpp"
#include "verbs/resources.hpp"
#include "verbs/types.hpp"

namespace uroce::transport {
class Nic;
}

namespace uroce::verbs {

class Pd;
class Cq;
class Xrcd;

// An XRC SRQ's domain and the CQ its receive completions go to.
struct XrcSrqInit {
  Xrcd* xrcd = nullptr;
  Cq* cq = nullptr;
};

struct SrqAttr {
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  uint32_t srq_limit = 0;
};
namespace srq_attr_mask {
inline constexpr uint32_t kMaxWr = 1u << 0;
inline constexpr uint32_t kLimit = 1u << 1;
}  // namespace srq_attr_mask

class Srq final : public transport::RecvSource {
 public:
  static constexpr uint32_t kMaxWr = 1u << 15;
  static constexpr uint32_t kMaxSge = 32;

  // `xrc`: an XRC SRQ (ibv_create_srq_ex with IBV_SRQT_XRC).
  static Result<std::unique_ptr<Srq>> create(Pd& pd, const SrqAttr& attr, void* user_context = nullptr,
                                             const XrcSrqInit* xrc = nullptr);
  ~Srq();
  Srq(const Srq&) = delete;
  Srq& operator=(const Srq&) = delete;

  // Posts receives; on failure *bad is the index of the first not posted.
  Status post_recv(std::span<const RecvWr> wrs, size_t* bad);
  Status modify(const SrqAttr& attr, uint32_t mask);
  SrqAttr query() const;

  Pd& pd() const noexcept { return *pd_; }
  transport::Nic& nic() const noexcept;
  std::atomic<int>& users() noexcept { return users_; }
  void* user_context() const noexcept { return user_context_; }
  // The first step of destroying: an XRC SRQ stops taking packets' WQEs, so
  // it raises no more events, and queued events about it are dropped.  Only
  // destruction may follow.  Closing again does nothing; the destructor
  // closes too.
  void close() noexcept;

  // --- transport side, NIC lock held ---
  // Takes the oldest WQE; copies its SGEs into `sges`.  Raises the limit
  // event when it applies.  False when empty.
  bool take(transport::RecvWqe& out, std::vector<Sge>& sges) noexcept override;
  bool take_reserved(transport::RecvWqe& out, std::vector<Sge>& sges) noexcept override;
  const transport::MemoryDomain& memory() const noexcept override;
  bool empty() const noexcept { return q_.empty(); }
  // XRC: the SRQ's number (ibv_get_srq_num), 0 for a basic SRQ.
  uint32_t srq_num() const noexcept { return srqn_; }
  transport::CompletionSink* completions() const noexcept override;
  uint32_t xrc_domain() const noexcept override;

 private:
  Srq(Pd& pd, void* user_context) : pd_(&pd), user_context_(user_context) {}
  Pd* pd_;
  void* user_context_;
  transport::WorkQueue<transport::RecvWqe> q_;
  uint32_t limit_ = 0;  // 0 = not armed
  std::atomic<int> users_{0};
  ResourceHold hold_;  // one of the device's max_srq
  XrcSrqInit xrc_;     // an XRC SRQ's, else null
  uint32_t srqn_ = 0;
  // An XRC SRQ in a domain shared with other processes: WQEs posted and not
  // yet taken, which every consumer (theirs and ours) takes one at a time.
  std::atomic<uint64_t>* credits_ = nullptr;
  bool pop(transport::RecvWqe& out, std::vector<Sge>& sges) noexcept;
};

}  // namespace uroce::verbs
