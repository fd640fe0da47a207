#include "transport/xrc_share.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "net/proc_info.hpp"
#include "transport/nic.hpp"
#include "transport/qp_table.hpp"
#include "transport/sge.hpp"

namespace uroce::transport {
namespace {

using verbs::WcStatus;

// The words of the ring header's user area (net::shm::Header::user).
enum Word : size_t { kCredits = 0, kDomainDev = 1, kDomainIno = 2 };
constexpr auto kRlx = std::memory_order_relaxed;

// Small: a message crosses a piece at a time, and the owner drains at every
// poll; a full inbox costs the sender a resend.
constexpr uint32_t kInboxSlots = 64;

// The bell's name in the abstract namespace (of our network namespace).
socklen_t bell_name(sockaddr_un& a, const Endpoint& dev, uint32_t slot) {
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "uroce-xrc-%u-%s-%u", unsigned(::geteuid()),
                              dev.to_string().c_str(), slot);
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

}  // namespace

Result<net::UniqueFd> xrc_share::open_bell(const Endpoint& dev, uint32_t slot) {
  net::UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return err::from_errno(errno, std::string("XRC bell: socket: ") + std::strerror(errno));
  sockaddr_un a;
  const socklen_t len = bell_name(a, dev, slot);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0)
    return err::from_errno(errno, std::string("XRC bell: bind: ") + std::strerror(errno));
  return fd;
}

bool xrc_share::ring_bell(int fd, const Endpoint& dev, uint32_t slot) noexcept {
  sockaddr_un a;
  const socklen_t len = bell_name(a, dev, slot);
  const uint8_t one = 1;
  return ::sendto(fd, &one, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&a), len) == 1 || errno == EAGAIN;
}

void xrc_share::quiet_bell(int fd) noexcept {
  uint8_t b[64];
  while (::recv(fd, b, sizeof b, MSG_DONTWAIT) >= 0) {
  }
}

std::string xrc_share::inbox_path(const std::string& dir, const Endpoint& dev, uint32_t srqn) {
  static const uint64_t netns = net::ns_inode("net");
  return dir + "/uroce-" + std::to_string(::geteuid()) + "-" + std::to_string(netns) + "-" + dev.addr.to_string() +
         "-" + std::to_string(dev.port) + "-xsrq-" + std::to_string(srqn) + ".ring";
}

// ------------------------------------------------------------------- inbox

Result<std::unique_ptr<XrcInbox>> XrcInbox::create(const std::string& dir, const Endpoint& dev, uint32_t srqn,
                                                   XrcFileKey key, RecvSource& srq) {
  net::ShmRing::CreateOptions opt;
  opt.slots = kInboxSlots;
  opt.payload_max = sizeof(xrc_share::Piece) + net::shm::kDefaultPayload;
  opt.user[kDomainDev] = key.dev;  // in place before any producer can look
  opt.user[kDomainIno] = key.ino;
  opt.exclusive = true;  // a live inbox of that name (another registry's slot) stays
  auto ring = net::ShmRing::create(xrc_share::inbox_path(dir, dev, srqn), opt);
  if (!ring.ok()) return ring.status();
  std::unique_ptr<XrcInbox> in(new XrcInbox());
  in->ring_ = std::move(*ring);
  in->srq_ = &srq;
  in->srqn_ = srqn;
  in->rx_.resize(16);
  return in;
}

XrcInbox::~XrcInbox() {
  if (ring_) ring_->close();
}

std::atomic<uint64_t>& XrcInbox::credits() noexcept { return ring_->header().user[kCredits]; }

size_t XrcInbox::drain(Nic& nic) noexcept {
  size_t total = 0;
  while (true) {
    const size_t n = ring_->take(rx_);
    for (size_t i = 0; i < n; ++i) {
      const std::span<const uint8_t> d = rx_[i].data;
      xrc_share::Piece p;
      if (d.size() < sizeof p) {  // a producer's read fault emptied it: nothing to place
        ++nic.counters().xrc_handoff_errors;
        continue;
      }
      std::memcpy(&p, d.data(), sizeof p);
      if (p.len != d.size() - sizeof p) {
        ++nic.counters().xrc_handoff_errors;
        continue;
      }
      handle(nic, p, d.subspan(sizeof p));
    }
    total += n;
    if (n < rx_.size()) return total;
  }
}

void XrcInbox::handle(Nic& nic, const xrc_share::Piece& p, std::span<const uint8_t> data) noexcept {
  const uint64_t id = uint64_t(p.tgt_qpn) << 32 | p.msn;
  if (p.flags & xrc_share::kFirst) {
    Message& m = messages_[id];
    m = Message{};
    // The sender took a credit for this message: a WQE is there.
    m.have_wqe = srq_->take_reserved(m.wqe, m.sges);
    if (!m.have_wqe) m.status = WcStatus::loc_qp_op_err;
  }
  auto it = messages_.find(id);
  if (it == messages_.end()) {  // its first piece never came (its sender died in between)
    ++nic.counters().xrc_handoff_errors;
    return;
  }
  Message& m = it->second;
  if (m.status == WcStatus::success) {
    if (uint64_t(p.offset) + data.size() > m.wqe.length || p.offset != m.bytes) {
      m.status = WcStatus::loc_len_err;
    } else if (!scatter(srq_->memory(), m.sges, p.offset, data)) {
      m.status = WcStatus::loc_prot_err;
    } else {
      m.bytes += uint32_t(data.size());
    }
  }
  if (!(p.flags & xrc_share::kLast)) return;
  if (m.have_wqe) {
    verbs::Wc wc;
    wc.wr_id = m.wqe.wr_id;
    wc.status = m.status;
    wc.opcode = verbs::WcOpcode::recv;
    wc.byte_len = m.status == WcStatus::success ? m.bytes : 0;
    wc.qp_num = p.tgt_qpn;
    wc.src_qp = p.src_qp;
    if (p.flags & xrc_share::kImm) {
      wc.wc_flags = verbs::wc_flags::kWithImm;
      wc.imm_data = p.imm;
    }
    if (CompletionSink* cq = srq_->completions())
      nic.deliver(*cq, wc, (p.flags & xrc_share::kSolicited) || m.status != WcStatus::success);
  }
  ++(m.status == WcStatus::success ? nic.counters().xrc_handoff_received : nic.counters().xrc_handoff_errors);
  messages_.erase(it);
}

// ------------------------------------------------------------------ remote

Result<std::unique_ptr<XrcRemote>> XrcRemote::attach(const std::string& dir, const Endpoint& dev, uint32_t srqn) {
  auto ring = net::ShmRing::attach(xrc_share::inbox_path(dir, dev, srqn));
  if (!ring.ok()) return ring.status();
  std::unique_ptr<XrcRemote> r(new XrcRemote());
  r->ring_ = std::move(*ring);
  r->srqn_ = srqn;
  auto& u = r->ring_->header().user;
  r->key_.ino = u[kDomainIno].load(std::memory_order_acquire);
  r->key_.dev = u[kDomainDev].load(kRlx);
  r->dev_ = dev;
  r->checked_ = std::chrono::steady_clock::now();
  return r;
}

bool XrcRemote::usable() noexcept {
  if (ring_->closed()) return false;
  // Whether its owner lives costs a read of /proc: not for every packet.
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_ >= kLivenessPeriod) {
    checked_ = now;
    alive_ = ring_->owner_alive();
  }
  return alive_;
}

XrcRemote::Take XrcRemote::take_credit() noexcept {
  if (!usable()) return Take::gone;
  std::atomic<uint64_t>& c = ring_->header().user[kCredits];
  uint64_t cur = c.load(std::memory_order_acquire);
  while (cur > 0)
    if (c.compare_exchange_weak(cur, cur - 1, std::memory_order_acq_rel)) return Take::ok;
  return Take::empty;
}

void XrcRemote::give_back() noexcept { ring_->header().user[kCredits].fetch_add(1, std::memory_order_acq_rel); }

net::ShmRing::Put XrcRemote::put(const xrc_share::Piece& p, std::span<const uint8_t> data) noexcept {
  if (ring_->closed()) return net::ShmRing::Put::full;
  net::ShmMeta meta;
  const auto head = std::span(reinterpret_cast<const uint8_t*>(&p), sizeof p);
  const net::ShmRing::Put r = ring_->put(meta, head, data, {});
  if (r == net::ShmRing::Put::ok && ring_->need_doorbell()) {
    if (!bell_fd_.valid()) bell_fd_ = net::UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    // Unrung, the latch must not stay set: the next producer rings instead.
    if (!bell_fd_.valid() || !xrc_share::ring_bell(bell_fd_.get(), dev_, srqn_ >> QpTable::kIndexBits))
      ring_->header().bell.store(0, std::memory_order_release);
  }
  return r;
}

}  // namespace uroce::transport
