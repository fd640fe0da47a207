#include "transport/qp_table.hpp"

#include <sys/random.h>

#include <string>

namespace uroce::transport {
namespace {

constexpr uint32_t kCount = QpTable::kIndexMask + 1 - QpTable::kFirstIndex;  // usable indexes

uint32_t clamp_index(uint32_t i) noexcept { return QpTable::kFirstIndex + i % kCount; }

}  // namespace

uint32_t QpTable::random_index() noexcept {
  uint32_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != ssize_t(sizeof r)) r = 0;
  return clamp_index(r);
}

QpTable::QpTable(uint32_t slot, uint32_t first)
    : slot_(slot), next_(clamp_index(first - kFirstIndex)), qps_(kIndexMask + 1, nullptr) {}

Result<uint32_t> QpTable::add(QpEngine& qp) {
  // The QPN 0xffffff is the multicast QPN, never a QP's.
  const uint32_t reserved = (slot_ << kIndexBits) == (0xffffffu & ~kIndexMask) ? kIndexMask : ~0u;
  for (uint32_t n = 0; n < kCount; ++n) {
    const uint32_t index = clamp_index(next_ - kFirstIndex + n);
    if (qps_[index] || index == reserved) continue;
    qps_[index] = &qp;
    ++used_;
    next_ = clamp_index(index + 1 - kFirstIndex);
    return (slot_ << kIndexBits | index) & 0xffffffu;
  }
  return err::nomem("no free QP number (" + std::to_string(kCount) + " QPs per process)");
}

void QpTable::remove(uint32_t qpn, const QpEngine& qp) noexcept {
  if ((qpn >> kIndexBits) != slot_) return;
  QpEngine*& e = qps_[qpn & kIndexMask];
  if (e == &qp) {
    e = nullptr;
    --used_;
  }
}

}  // namespace uroce::transport
