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

// A BIND_MW work request, as the requester executes it.
struct WindowBind {
  uint32_t mw_key = 0;    // names the window: any rkey it has had
  uint32_t new_rkey = 0;  // the grant's rkey: the window's upper 24 bits, the consumer's low byte
  uint32_t mr_lkey = 0;   // the region (none when length is 0)
  uint64_t addr = 0, length = 0;
  uint32_t access = 0;  // verbs::access remote rights (+ zero-based)
};

// Memory the transport may touch: a protection domain and the regions and
// memory windows in it (verbs::Pd).
class MemoryDomain {
 public:
  // Host address of [addr, addr+len) if `lkey` names a live region of this
  // domain granting `need` that holds the range (an on-demand region faults
  // it in); else nullptr.
  virtual uint8_t* local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need) const noexcept = 0;
  // The same through an rkey (a region's, or a window's grant) for a request
  // that arrived on QP `qpn`; on refusal `fault` names the check that failed.
  virtual uint8_t* remote(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need, uint32_t qpn,
                          AccessFault& fault) const noexcept = 0;
  // Executes a BIND_MW posted on QP `qpn` of this domain.
  virtual verbs::WcStatus bind_window(const WindowBind& b, uint32_t qpn) const noexcept = 0;
  // Revokes the type 2 window grant `rkey` (LOCAL_INV, or a SEND_WITH_INV's
  // IETH); false if `rkey` names no bound type 2 window of this domain.
  virtual bool invalidate(uint32_t rkey) const noexcept = 0;

 protected:
  ~MemoryDomain() = default;
};

// An XRC domain opened on a file, as the processes of a host share it:
// the file's device and inode (ino 0: a domain of one process only).
struct XrcFileKey {
  uint64_t dev = 0, ino = 0;
  bool shared() const noexcept { return ino != 0; }
  bool operator==(const XrcFileKey&) const = default;
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
  // An XRC SRQ: the CQ its receive completions go to (a basic SRQ's go to
  // the receive CQ of the QP that took the WQE: nullptr) and the XRC
  // domain it belongs to (0: none).
  virtual CompletionSink* completions() const noexcept { return nullptr; }
  virtual uint32_t xrc_domain() const noexcept { return 0; }
  // An XRC SRQ of a domain shared with other processes: the WQE reserved for
  // a message another process's XRC_RECV QP received (XrcInbox), whose
  // credit was taken already (take() takes one itself).  False when empty.
  virtual bool take_reserved(RecvWqe& out, std::vector<verbs::Sge>& sges) noexcept { return take(out, sges); }

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
