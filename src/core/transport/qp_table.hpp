// The QP numbers of one NIC and the engines behind them.
//
// A QP number is slot << 14 | index: the host registry's slot of this
// process makes it unique on the host (and tells a same-host peer where to
// send, see peer_ports.hpp), the index finds the engine in one step.
// Indexes 0 and 1 are never given (QP0 and QP1 are the management QPs).
// Indexes are handed out cyclically from a random starting point, as rxe
// does, so that a QP number says little about how many QPs came before it
// and a restarted process does not hand out the same numbers again.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.hpp"

namespace uroce::transport {

class QpEngine;

class QpTable {
 public:
  static constexpr uint32_t kIndexBits = 14;
  static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
  static constexpr uint32_t kFirstIndex = 2;

  // `first` is where the cyclic search starts (random by default).
  explicit QpTable(uint32_t slot, uint32_t first = random_index());

  // A new QP number for `qp`; ENOMEM when every index is taken.
  Result<uint32_t> add(QpEngine& qp);
  // Frees qpn's index if it still belongs to `qp`.
  void remove(uint32_t qpn, const QpEngine& qp) noexcept;
  // The engine of `qpn`, or nullptr (another slot's number, or free).
  QpEngine* find(uint32_t qpn) const noexcept {
    if ((qpn >> kIndexBits) != slot_) return nullptr;
    return qps_[qpn & kIndexMask];
  }
  uint32_t slot() const noexcept { return slot_; }
  template <class F>
  void for_each(F f) const {
    for (QpEngine* q : qps_)
      if (q) f(*q);
  }
  size_t size() const noexcept { return used_; }

  static uint32_t slot_of(uint32_t qpn) noexcept { return qpn >> kIndexBits; }
  static uint32_t random_index() noexcept;

 private:
  uint32_t slot_;
  uint32_t next_;  // where the next search starts
  size_t used_ = 0;
  std::vector<QpEngine*> qps_;
};

}  // namespace uroce::transport
