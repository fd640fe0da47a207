// What the transport needs of the objects above it, as interfaces it owns and
// the verbs objects implement (verbs sits on transport: the transport includes
// no verbs/ header).  Every call is made with the NIC lock held.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/work_queue.hpp"
#include "uroce/types.hpp"

namespace uroce::transport {

// Where completions go: a completion queue (verbs::Cq).
class CompletionSink {
 public:
  // Appends `wc`; `solicited` marks one that may wake a solicited-only
  // notification.  False when the queue overflowed (the sink reports it);
  // Nic::deliver counts both outcomes.
  virtual bool complete(const verbs::Wc& wc, bool solicited) noexcept = 0;

 protected:
  ~CompletionSink() = default;
};

// Why a remote access was refused, in the order the checks are made.
// `gone`: the region's pages were unmapped while it was registered.
enum class AccessFault : uint8_t { none, key, pd, rights, gone, bounds };

// Memory the transport may touch: a protection domain and the regions
// registered in it (verbs::Pd).
class MemoryDomain {
 public:
  // Host address of [addr, addr+len) if `lkey` names a live region of this
  // domain granting `need` that holds the range (an on-demand region faults
  // it in); else nullptr.
  virtual uint8_t* local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need) const noexcept = 0;
  // The same through an rkey; on refusal `fault` names the check that failed.
  virtual uint8_t* remote(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need,
                          AccessFault& fault) const noexcept = 0;

 protected:
  ~MemoryDomain() = default;
};

// Receive WQEs shared by several QPs: a shared receive queue (verbs::Srq).
class RecvSource {
 public:
  // Takes the oldest WQE and copies its SGEs into `sges` (raising the limit
  // event itself when it applies).  False when empty.
  virtual bool take(RecvWqe& out, std::vector<verbs::Sge>& sges) noexcept = 0;
  // The domain its receive buffers are registered in: the SRQ's own PD,
  // which may differ from the PD of a QP that takes from it.
  virtual const MemoryDomain& memory() const noexcept = 0;

 protected:
  ~RecvSource() = default;
};

// The verbs object a QP's engine belongs to (verbs::Qp): told of the
// asynchronous events the engine raises (SQ drained, last WQE reached).
class QpOwner {
 public:
  virtual void async_event(verbs::AsyncEventType type) noexcept = 0;

 protected:
  ~QpOwner() = default;
};

}  // namespace uroce::transport
