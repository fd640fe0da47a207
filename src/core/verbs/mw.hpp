// Memory windows (IBA 10.6.7): a grant of remote access to part of a memory
// region, bound and revoked without registering anything.
//
// Type 1 windows belong to their PD: ibv_bind_mw binds them (through a
// BIND_MW work request on any QP of the PD), a bind of length 0 revokes
// them.  Type 2 windows are bound by a BIND_MW work request to the QP that
// posts it, and only that QP's peer may use them; LOCAL_INV on the QP or a
// SEND_WITH_INV from the peer revokes them.  A window's rkey keeps its upper
// 24 bits for the window's life (keys.hpp); each bind may change the low
// byte (ibv_inc_rkey), so a revoked grant's rkey is refused even after the
// window is bound again.
//
// Windows live in a process-wide table beside the regions'; a remote
// access resolves them in O(1) without locks.  Their state changes (bind,
// invalidate) and the accesses through them happen under the lock of their
// PD's NIC.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.hpp"
#include "transport/ports.hpp"
#include "verbs/keys.hpp"
#include "verbs/types.hpp"

namespace uroce::verbs {

class Mr;
class Pd;

class Mw {
 public:
  static Result<std::unique_ptr<Mw>> alloc(Pd& pd, MwType type);
  // Revokes the window (under the NIC lock) and frees its key.
  ~Mw();
  Mw(const Mw&) = delete;
  Mw& operator=(const Mw&) = delete;

  Pd& pd() const noexcept { return *pd_; }
  MwType type() const noexcept { return type_; }
  // The rkey of the current grant (or of the last one, once revoked; at
  // allocation, the one a first bind increments).
  uint32_t rkey() const noexcept { return rkey_.load(std::memory_order_relaxed); }
  bool bound() const noexcept { return mr_ != nullptr; }

  // --- NIC lock held ---
  // Executes a bind for a QP of `qp_pd` numbered `qpn` (IBA C10-72..75,
  // o10-36.2.2, o10-37.2.30/40): success, or mw_bind_err and nothing changed.
  WcStatus bind(const transport::WindowBind& b, const Pd& qp_pd, uint32_t qpn) noexcept;
  // Revokes a bound type 2 window whose grant `rkey` names; false otherwise.
  bool invalidate(uint32_t rkey) noexcept;
  // Host address of [va, va+len) through grant `rkey` for a request arriving
  // on QP `qpn` of `qp_pd`, needing `need`; nullptr with `fault` set if not.
  uint8_t* translate(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need, const Pd& qp_pd, uint32_t qpn,
                     transport::AccessFault& fault) const noexcept;

 private:
  friend class MwTable;
  Mw() = default;
  void unbind() noexcept;
  Pd* pd_ = nullptr;
  MwType type_ = MwType::type1;
  uint32_t index_ = 0;
  std::atomic<uint32_t> rkey_{0};
  const Mr* mr_ = nullptr;  // the region of the grant; nullptr: not bound
  uint64_t addr_ = 0, length_ = 0;
  uint32_t access_ = 0;
  uint32_t qpn_ = 0;  // type 2: the QP it is bound to
};

// The process's windows, by key.
class MwTable {
 public:
  static MwTable& instance();
  static constexpr uint32_t kMaxMws = KeyCipher::kMaxWindowIndex - 1;  // index 0 is never used

  // The window whose key has `rkey`'s upper 24 bits (any grant of it).
  Mw* lookup(uint32_t rkey) const noexcept;
  // Revokes every window bound to `mr` (the region is going away; the C
  // ABI refuses that with EINVAL first, the C++ API's destructor cannot).
  // NIC lock held.
  void revoke_region(const Mr& mr) noexcept;
  size_t size() const noexcept;

 private:
  friend class Mw;
  MwTable();
  Result<uint32_t> add(Mw& mw);  // sets mw.index_ and its first rkey
  void remove(Mw& mw) noexcept;
  struct Entry {
    std::atomic<Mw*> mw{nullptr};
    uint8_t gen = 0;
  };
  std::array<Entry, KeyCipher::kMaxWindowIndex> entries_{};
  std::mutex mu_;
  std::vector<uint32_t> free_;
  uint32_t next_ = 1;
  size_t live_ = 0;
};

}  // namespace uroce::verbs
