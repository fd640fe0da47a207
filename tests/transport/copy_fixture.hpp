// What the one-copy tests (rc_copy_test.cpp, rc_copy_errors_test.cpp)
// share: a Pair over shared memory with the one-copy path
// (docs/one_copy_design.md), posting and waiting, and memory taken away
// from under a registration.
#pragma once

#include <sys/mman.h>

#include <optional>

#include "loopback.hpp"
#include "support/fault_skip.hpp"

namespace uroce::test::copy {

inline constexpr size_t kBuf = (8u << 20) + 4096;
inline constexpr uint8_t kPoison = 0xa5;
inline constexpr size_t kGuard = 64;

inline PairOptions copy_options(Mtu mtu = Mtu::m4096, bool copy = true) {
  PairOptions o = over(PacketPath::shm);
  o.mtu = mtu;
  o.buf_size = kBuf;
  o.shm_copy = copy;
  return o;
}

// A decorator of a side's packet I/O (PairOptions::wrap_a, wrap_b) that
// passes everything through: tests override what they change.
class ForwardingIo : public net::PacketIo {
 public:
  explicit ForwardingIo(std::unique_ptr<net::PacketIo> inner) : inner_(std::move(inner)) {}
  Endpoint local() const noexcept override { return inner_->local(); }
  uint16_t tx_ipv4_id() const noexcept override { return inner_->tx_ipv4_id(); }
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override { return inner_->send_batch(pkts); }
  size_t recv_batch(std::span<net::RxPacket> out) noexcept override { return inner_->recv_batch(out); }
  int wait_fd() const noexcept override { return inner_->wait_fd(); }
  bool prepare_wait() noexcept override { return inner_->prepare_wait(); }
  void done_wait() noexcept override { inner_->done_wait(); }
  int max_sleep_ms() const noexcept override { return inner_->max_sleep_ms(); }
  void use_clock(const std::chrono::steady_clock::time_point* now) noexcept override { inner_->use_clock(now); }
  size_t max_payload() const noexcept override { return inner_->max_payload(); }
  bool host_local(const IpAddr& dst) noexcept override { return inner_->host_local(dst); }
  bool ring_owner(const Endpoint& dst, uint32_t qpn, net::RingOwner& out) noexcept override {
    return inner_->ring_owner(dst, qpn, out);
  }
  void advertise(uint64_t caps) noexcept override { inner_->advertise(caps); }
  bool defers_icrc() const noexcept override { return inner_->defers_icrc(); }
  std::atomic<uint64_t>* copy_gate() noexcept override { return inner_->copy_gate(); }
  std::shared_ptr<std::atomic<uint64_t>> peer_copy_gate(const Endpoint& dst, uint32_t qpn) noexcept override {
    return inner_->peer_copy_gate(dst, qpn);
  }
  net::IoStats stats() const noexcept override { return inner_->stats(); }

 protected:
  std::unique_ptr<net::PacketIo> inner_;
};

// Orders our accesses to the buffers after the NICs' (see rc_sizes_test).
inline void sync_with(Pair& p) {
  { std::lock_guard g(p.a.ctx->nic().mu()); }
  { std::lock_guard g(p.b.ctx->nic().mu()); }
}

inline SendWr write_wr(uint64_t id, WrOpcode op, const Side& dst, size_t off) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = send_flags::kSignaled;
  wr.remote_addr = dst.addr(off);
  wr.rkey = dst.mr->rkey();
  return wr;
}

inline Status post_write(Qp& qp, SendWr wr, const std::vector<Sge>& sges) {
  wr.sg_list = sges;
  return post_send(qp, wr);
}

// Posts `wr` on A's QP and waits for its completion: its status (nullopt:
// not posted, or no completion within the wait).
inline std::optional<WcStatus> run_one(Pair& p, const SendWr& wr, const std::vector<Sge>& sges) {
  if (!post_write(*p.a.qp, wr, sges).ok()) return std::nullopt;
  const auto wc = poll_n(*p.a.scq, 1);
  if (wc.size() != 1 || wc[0].wr_id != wr.wr_id) return std::nullopt;
  return wc[0].status;
}

// 1 MiB of fresh memory filled with `fill`, registered in `pd` with
// `access`, then re-protected to `prot`: memory the application took away
// from under a registration.  Unregistered and unmapped at the end.
struct Revoked {
  static constexpr size_t kLen = 1u << 20;
  uint8_t* p = nullptr;
  std::unique_ptr<Mr> mr;
  Revoked(Pd& pd, uint32_t access, uint8_t fill, int prot) {
    void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    p = static_cast<uint8_t*>(m);
    std::memset(p, fill, kLen);
    mr = reg_mr(pd, p, kLen, access);
    if (mr && ::mprotect(p, kLen, prot) != 0) mr.reset();
  }
  ~Revoked() {
    mr.reset();
    if (p) ::munmap(p, kLen);
  }
  bool ok() const { return p && mr; }
  uint64_t addr() const { return uint64_t(uintptr_t(p)); }
};

}  // namespace uroce::test::copy
