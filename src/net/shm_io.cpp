#include "net/shm_io.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/log.hpp"
#include "common/parse_number.hpp"
#include "wire/opcode.hpp"

namespace uroce::net {
namespace {

constexpr auto kRecheck = std::chrono::seconds(1);               // a ring in use: is it still the one?
constexpr auto kRecheckAbsent = std::chrono::milliseconds(250);  // no ring: has one appeared?
constexpr auto kUdpHot = std::chrono::milliseconds(1);           // datagrams came lately: read every time
constexpr auto kRingHot = std::chrono::milliseconds(1);          // the ring fed us lately: skip some socket reads
constexpr size_t kMaxPeers = 1024;
constexpr size_t kBellToken = 0;  // the ring header's user word holding the bell's token
constexpr size_t kCapsWord = 1;   // ...and the one holding RingOwner::caps
constexpr size_t kGateWords = 2;  // ...and the first of the two of the copy gate (packet_io.hpp)
constexpr uint32_t kGsiQpn = 1;
constexpr uint32_t kQpnIndexBits = 14;  // QPNs are registry slot << 14 | index (net/registry.hpp)

bool same_qp_slot(const TxPacket& a, const TxPacket& b) noexcept {
  return a.head.size() >= 8 && b.head.size() >= 8 && a.head[5] == b.head[5] && (a.head[6] >> 6) == (b.head[6] >> 6);
}

uint32_t dest_qpn(const TxPacket& pkt) noexcept {
  return uint32_t(pkt.head[5]) << 16 | uint32_t(pkt.head[6]) << 8 | pkt.head[7];
}

}  // namespace

bool ShmIo::enabled_by_env() noexcept {
  const char* v = std::getenv("UROCE_SHM");
  if (!v) return true;
  const std::string_view s = v;
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

Result<uint32_t> ShmIo::slots_from_env() {
  const char* v = std::getenv("UROCE_SHM_SLOTS");
  if (!v || !*v) return uint32_t(0);
  const auto n = parse_unsigned<uint32_t>(v);
  if (!n || *n < 2 || *n > 65536)
    return err::inval(std::string("UROCE_SHM_SLOTS=") + v + ": expected a number of ring slots, 2 to 65536");
  return *n;
}

Result<std::optional<bool>> ShmIo::copy_from_env() {
  const char* v = std::getenv("UROCE_SHM_COPY");
  if (!v || !*v) return std::optional<bool>();
  const std::string_view s = v;
  if (s == "1" || s == "on" || s == "true" || s == "yes") return std::optional<bool>(true);
  if (s == "0" || s == "off" || s == "false" || s == "no") return std::optional<bool>(false);
  return err::inval(std::string("UROCE_SHM_COPY=") + v + ": expected 1 or 0");
}

std::unique_ptr<PacketIo> ShmIo::wrap_if_enabled(std::unique_ptr<UdpIo> udp, int slot, bool enable, uint32_t slots) {
  if (!enable) return udp;
  ShmConfig cfg;
  cfg.slot = slot;
  if (slots) cfg.ring.slots = slots;
  auto shm = wrap(std::move(udp), cfg);
  if (shm.ok()) return std::move(*shm);
  UROCE_LOG(warn, "shared-memory rings unavailable, UDP only (UROCE_SHM=0 says so quietly): %s",
            shm.status().to_string().c_str());
  return udp;  // untouched: wrap() takes it only on success
}

Result<std::unique_ptr<ShmIo>> ShmIo::wrap(std::unique_ptr<UdpIo>&& udp, const ShmConfig& cfg) {
  if (!udp) return err::inval("ShmIo needs a UdpIo to wrap");
  std::unique_ptr<ShmIo> io(new ShmIo());
  io->cfg_ = cfg;
  if (cfg.dir.empty()) {
    auto dir = shm_dir();
    if (!dir) return dir.status();
    io->dir_ = *dir;
  } else {
    io->dir_ = cfg.dir;
  }
  const Endpoint local = udp->local();
  io->use_shm_ = !local.addr.is_unspecified();
  if (io->use_shm_) {
    if (cfg.clean_stale) {
      const size_t n = ShmRing::clean_stale(io->dir_);
      if (n) UROCE_LOG(info, "shm: removed %zu ring files of dead processes from %s", n, io->dir_.c_str());
    }
    auto bell = ShmBell::open();
    if (!bell.ok()) return bell.status();
    auto ringer = ShmBell::open_ringer();
    if (!ringer.ok()) return ringer.status();
    io->ep_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (!io->ep_.valid() || ::epoll_ctl(io->ep_.get(), EPOLL_CTL_ADD, bell->fd(), &ev) != 0)
      return err::from_errno(errno, "shm: epoll for the bell");
    io->ringer_ = std::move(*ringer);
    ShmRing::CreateOptions opt = cfg.ring;
    opt.user[kBellToken] = bell->token();
    // The copy gate's generation starts anywhere (half the bell's random
    // token): a request built for an earlier ring of this endpoint (a
    // device closed and opened again) does not match the new one by both
    // starting at 0.
    opt.user[kGateWords] = bell->token() >> 32;
    io->bell_.emplace(std::move(*bell));
    opt.payload_max = udp->max_payload();
    io->slot_ = udp->port_shared() ? cfg.slot : -1;
    // A small tmpfs (a container's 64 MiB /dev/shm) fits a few rings of the
    // full size: then a smaller ring rather than none.
    const uint32_t asked = opt.slots;
    auto ring = ShmRing::create(shm_ring_path(io->dir_, local, io->slot_), opt);
    while (!ring.ok() && ring.status().code() == ENOSPC && opt.slots >= 4 * 64) {
      opt.slots /= 4;
      ring = ShmRing::create(shm_ring_path(io->dir_, local, io->slot_), opt);
    }
    if (!ring.ok()) return ring.status();
    if (opt.slots != asked)
      UROCE_LOG(warn, "shm: no room for a ring of %u slots in %s: %u slots", asked, io->dir_.c_str(), opt.slots);
    io->ring_ = std::move(*ring);
    ShmRing::publish_local(io->ring_);
    UROCE_LOG(info, "shm: %s receives through %s", local.to_string().c_str(), io->ring_->path().c_str());
  }
  io->udp_out_.reserve(2 * kMaxBatch);
  io->touched_.reserve(16);
  io->udp_ = std::move(udp);
  if (io->ep_.valid()) io->watch_udp();
  return io;
}

void ShmIo::watch_udp() noexcept {
  const int fd = udp_->wait_fd();
  if (fd == ep_udp_fd_) return;
  if (ep_udp_fd_ >= 0) (void)::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, ep_udp_fd_, nullptr);  // (gone if closed)
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    UROCE_LOG(warn, "shm: cannot watch the UDP socket: %s", std::strerror(errno));
  ep_udp_fd_ = fd;
}

Status ShmIo::join_group(const IpAddr& group) {
  Status s = udp_->join_group(group);
  if (ep_.valid()) watch_udp();
  return s;
}

Status ShmIo::leave_group(const IpAddr& group) {
  Status s = udp_->leave_group(group);
  if (ep_.valid()) watch_udp();
  return s;
}

bool ShmIo::ring_bell(ShmRing& ring) noexcept {
  if (ShmBell::ring(ringer_.get(), ring.header().user[kBellToken].load(std::memory_order_relaxed))) return true;
  // Unrung, the latch must not stay set: the next producer rings instead.
  ring.header().bell.store(0, std::memory_order_release);
  return false;
}

void ShmIo::ring_bell(Peer& p) noexcept {
  if (ring_bell(*p.ring)) ++bells_tx_;
}

ShmIo::~ShmIo() {
  if (ring_) ring_->close();  // other NICs of this process may still hold it: close it now
}

size_t ShmIo::peer(const Endpoint& ep, int slot, Clock::time_point now) noexcept {
  size_t i = last_peer_;
  if (i >= peers_.size() || peers_[i].ep != ep || peers_[i].slot != slot) {
    i = 0;
    while (i < peers_.size() && (peers_[i].ep != ep || peers_[i].slot != slot)) ++i;
    if (i == peers_.size()) {
      Peer p;
      p.ep = ep;
      p.slot = slot;
      p.path = shm_ring_path(dir_, ep, slot);
      if (slot >= 0) p.alt_path = shm_ring_path(dir_, ep, -1);
      p.recheck = Clock::time_point::min();
      peers_.push_back(std::move(p));
    }
    last_peer_ = i;
  }
  Peer& p = peers_[i];
  if (now >= p.recheck || (p.ring && p.ring->closed())) refresh(p, now);
  return i;
}

namespace {

// The ring at `path` if there is one: a NIC's of this process, or attached.
std::shared_ptr<ShmRing> find_ring(const std::string& path) {
  if (path.empty()) return nullptr;
  if (auto mine = ShmRing::local(path)) return mine;
  auto r = ShmRing::attach(path);
  return r.ok() ? std::shared_ptr<ShmRing>(std::move(*r)) : nullptr;
}

}  // namespace

// One answer per (endpoint, slot): the slot's ring, else the endpoint's
// ring without a slot (a port not shared), else none (UDP).  A ring found
// by the second name is dropped for the first as soon as that appears.
void ShmIo::refresh(Peer& p, Clock::time_point now) noexcept {
  if (p.ring) {
    struct stat st;
    const bool valid = !p.ring->closed() && ::stat(p.ring->path().c_str(), &st) == 0 &&
                       uint64_t(st.st_ino) == p.ring->inode() && p.ring->owner_alive();
    if (valid && p.ring->path() == p.path) {
      p.recheck = now + kRecheck;
      return;
    }
    if (valid) {  // the slot-less ring: keep it unless the slot's own has appeared
      if (auto own = find_ring(p.path)) p.ring = std::move(own);
      p.recheck = now + kRecheck;
      return;
    }
    UROCE_LOG(debug, "shm: the ring of %s is gone or replaced", p.ep.to_string().c_str());
    p.ring.reset();
  }
  for (const std::string* path : {&p.path, &p.alt_path}) {
    if (auto r = find_ring(*path)) {
      p.ring = std::move(r);
      p.recheck = now + kRecheck;
      UROCE_LOG(debug, "shm: %s is reached through %s", p.ep.to_string().c_str(), p.ring->path().c_str());
      return;
    }
  }
  p.recheck = now + kRecheckAbsent;
}

uint64_t ShmIo::caps(const Peer& p) noexcept {
  return p.ring->header().user[kCapsWord].load(std::memory_order_relaxed);
}

bool ShmIo::put(Peer& p, const TxPacket& pkt, uint16_t id_hint) noexcept {
  // A peer that takes packets without an ICRC (kRingTakesNoIcrc) is spared
  // ours: about 250 instructions a packet on each side.
  const bool omit = pkt.icrc && (caps(p) & kRingTakesNoIcrc) != 0;
  if (!omit) finish_icrc(pkt);
  const ShmMeta meta{udp_->local(), pkt.dst.addr, pkt.tos, udp_->tx_ttl(), id_hint, omit};
  return put_slot(p, 1, pkt.size(), [&] { return p.ring->put(meta, pkt.head, pkt.body, pkt.tail); });
}

bool ShmIo::put_packed(Peer& p, size_t n) noexcept {
  bool omit = (caps(p) & kRingTakesNoIcrc) != 0;
  for (size_t i = 0; i < n; ++i) omit = omit && packed_[i]->icrc;
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const TxPacket& pkt = *packed_[i];
    if (!omit) finish_icrc(pkt);
    ShmRing::Part& part = parts_[i];
    part.head = pkt.head;
    part.body = pkt.body;
    part.tail = pkt.tail;
    bytes += pkt.size();
  }
  const TxPacket& first = *packed_[0];
  const ShmMeta meta{udp_->local(), first.dst.addr, first.tos, udp_->tx_ttl(), parts_[0].ipv4_id_hint, omit};
  return put_slot(p, n, bytes,
                  [&] { return p.ring->put_packed(meta, std::span<const ShmRing::Part>(parts_.data(), n)); });
}

template <class Attempt>
bool ShmIo::put_slot(Peer& p, size_t npkts, size_t bytes, Attempt&& attempt) noexcept {
  if (p.full) {
    shm_full_ += npkts;
    return false;
  }
  Clock::time_point first_full{};
  for (;;) {
    switch (attempt()) {
      case ShmRing::Put::ok:
        shm_tx_ += npkts;
        shm_tx_bytes_ += bytes;
        return true;
      case ShmRing::Put::lost:
      case ShmRing::Put::too_big:  // (checked before: cannot happen)
        shm_lost_ += npkts;
        return false;
      case ShmRing::Put::full: break;
    }
    // Full: the consumer is behind.  Make sure it is awake, give it a
    // moment, then drop (as a full socket buffer would).
    const Clock::time_point now = Clock::now();
    if (first_full == Clock::time_point{}) {
      first_full = now;
      if (p.ring->need_doorbell()) ring_bell(p);
      if (!p.ring->owner_alive()) {  // nobody will ever empty it
        p.recheck = now;
        p.full = true;
        shm_full_ += npkts;
        return false;
      }
    } else if (now - first_full >= cfg_.full_wait) {
      p.full = true;
      shm_full_ += npkts;
      return false;
    }
    ::sched_yield();
  }
}

// The ring a packet goes to: that of its destination QP's slot among the
// processes sharing the destination port, else that of the destination's
// own port.
ShmIo::Peer* ShmIo::ring_peer(const TxPacket& pkt, Clock::time_point now) noexcept {
  if (pkt.head.size() < 8) return nullptr;
  const uint32_t qpn = dest_qpn(pkt);
  if (qpn == kGsiQpn) return nullptr;
  const size_t i = peer(pkt.dst, int(qpn >> kQpnIndexBits), now);
  Peer& p = peers_[i];
  if (!p.ring || pkt.size() > p.ring->payload_max()) return nullptr;
  if (std::find(touched_.begin(), touched_.end(), i) == touched_.end()) touched_.push_back(i);
  return &p;
}

// The ring of QP `dest_qpn` at `dst` (as ring_peer() finds it for a
// packet), if it has one on this host.
const ShmIo::Peer* ShmIo::peer_ring(const Endpoint& dst, uint32_t dest_qpn) noexcept {
  if (!use_shm_ || dest_qpn == kGsiQpn || dst.addr.is_v4() != udp_->local().addr.is_v4() || !udp_->host_local(dst.addr))
    return nullptr;
  if (peers_.size() >= kMaxPeers) {  // (as send_batch does)
    peers_.clear();
    last_peer_ = 0;
  }
  const Peer& p = peers_[peer(dst, int(dest_qpn >> kQpnIndexBits), now())];
  return p.ring ? &p : nullptr;
}

bool ShmIo::ring_owner(const Endpoint& dst, uint32_t dest_qpn, RingOwner& out) noexcept {
  const Peer* found = peer_ring(dst, dest_qpn);
  if (!found) return false;
  const Peer& p = *found;
  out.pid = p.ring->header().owner_pid;
  out.start = p.ring->header().owner_start;
  out.caps = caps(p);
  return true;
}

std::atomic<uint64_t>* ShmIo::copy_gate() noexcept { return ring_ ? &ring_->header().user[kGateWords] : nullptr; }

std::shared_ptr<std::atomic<uint64_t>> ShmIo::peer_copy_gate(const Endpoint& dst, uint32_t dest_qpn) noexcept {
  const Peer* p = peer_ring(dst, dest_qpn);
  if (!p) return nullptr;
  return std::shared_ptr<std::atomic<uint64_t>>(p->ring, &p->ring->header().user[kGateWords]);
}

void ShmIo::advertise(uint64_t caps) noexcept {
  // (Packed slots are this ring's format: ShmRing::take reads them.)
  if (ring_) ring_->header().user[kCapsWord].store(caps | kRingTakesPacked, std::memory_order_relaxed);
}

size_t ShmIo::send_batch(std::span<const TxPacket> pkts) noexcept {
  const Clock::time_point now = this->now();
  if (peers_.size() >= kMaxPeers) {
    peers_.clear();
    last_peer_ = 0;
  }
  udp_out_.clear();
  touched_.clear();
  size_t sent = 0;
  const TxPacket* prev = nullptr;  // the first packet of the last train that went to a ring...
  size_t prev_peer = 0;            // ...and that ring's peer (an index: peers_ may grow)
  for (size_t k = 0; k < pkts.size();) {
    const TxPacket& first = pkts[k];
    const size_t segs = first.gso_segments > 1 ? std::min<size_t>(first.gso_segments, pkts.size() - k) : 1;
    Peer* p = nullptr;
    // Only an address of this host can have a ring: others take no look-up.
    // One we reached through a ring lately is (that saves the question per
    // packet to a same-host peer).  A train to the QP slot of the train
    // before (an answer behind its ACK) takes that one's ring as it is.
    const Peer* last = last_peer_ < peers_.size() ? &peers_[last_peer_] : nullptr;
    if (prev && first.dst == prev->dst && same_qp_slot(first, *prev) && dest_qpn(first) != kGsiQpn &&
        peers_[prev_peer].ring && first.size() <= peers_[prev_peer].ring->payload_max())
      p = &peers_[prev_peer];
    else if (use_shm_ && ((last && last->ring && last->ep.addr == first.dst.addr) ||
                          (first.dst.addr.is_v4() == udp_->local().addr.is_v4() && udp_->host_local(first.dst.addr))))
      p = ring_peer(first, now);
    if (!p) {  // by UDP, trains as they are
      udp_out_.insert(udp_out_.end(), pkts.begin() + ptrdiff_t(k), pkts.begin() + ptrdiff_t(k + segs));
    } else {
      // A train becomes one slot per packet; packet j carries the ICRC its
      // sender computed for IPv4 ID j, as a GRO receive would report it.  A
      // train may hold packets of several QPs of the destination endpoint.
      // One that ends in an ACK (an answer and the ACK held for it,
      // Nic::pump) puts the ACK first: the receiver's look at the ring may
      // come between two slots, and it must not see the answer before it
      // (as a GRO receive lets Nic::poll_rx take that ACK first).
      const size_t first_peer = size_t(p - peers_.data());
      prev = &first;
      prev_peer = first_peer;
      const TxPacket& end = pkts[k + segs - 1];
      const bool ack_last = segs > 1 && !end.head.empty() && wire::is_acknowledge(end.head[0]);
      // Packets after each other to the first one's ring share a slot while
      // they fit one (its owner takes packed slots): an answer and its ACK
      // cost the consumer one slot's cache lines, not two.
      const auto order = [&](size_t i) { return !ack_last ? i : i == 0 ? segs - 1 : i - 1; };
      const bool packs = (caps(peers_[first_peer]) & kRingTakesPacked) != 0;
      for (size_t i = 0; i < segs;) {
        const size_t j = order(i);
        const TxPacket& pkt = pkts[k + j];
        const bool home = j == 0 || same_qp_slot(pkt, first);
        Peer* q = home ? &peers_[first_peer] : ring_peer(pkt, now);
        if (!q) {
          udp_out_.push_back(pkt);
          udp_out_.back().gso_segments = 1;  // (its ICRC is for IPv4 ID j: the receiver solves it)
          ++i;
          continue;
        }
        size_t run = 1;
        if (packs && home) {
          size_t bytes = shm::kRecordHeader + pkt.size();
          while (i + run < segs && run < shm::kMaxPacked) {
            const TxPacket& next = pkts[k + order(i + run)];
            if (!same_qp_slot(next, first) || bytes + shm::kRecordHeader + next.size() > q->ring->payload_max()) break;
            bytes += shm::kRecordHeader + next.size();
            ++run;
          }
        }
        if (run == 1) {
          if (put(*q, pkt, uint16_t(j))) ++sent;
        } else {
          for (size_t r = 0; r < run; ++r) {
            const size_t at = order(i + r);
            packed_[r] = &pkts[k + at];
            parts_[r].ipv4_id_hint = uint16_t(at);
          }
          if (put_packed(*q, run)) sent += run;
        }
        i += run;
      }
    }
    k += segs;
  }
  for (size_t i : touched_) {
    Peer& p = peers_[i];
    p.full = false;
    if (p.ring && p.ring->need_doorbell()) ring_bell(p);
  }
  if (!udp_out_.empty()) sent += udp_->send_batch(udp_out_);
  return sent;
}

size_t ShmIo::recv_batch(std::span<RxPacket> out) noexcept {
  size_t n = ring_ ? ring_->take(out) : 0;
  if (n == out.size()) return n;
  const Clock::time_point now = this->now();
  if (n > 0) ring_hot_until_ = now + kRingHot;
  bool due = udp_due_.load(std::memory_order_relaxed);
  if (due) udp_due_.store(false, std::memory_order_relaxed);
  // The socket is read at every poll, as UdpIo alone would, unless the ring
  // is what feeds us: then only every udp_poll_interval while no datagram
  // came lately (a busy poller of a same-host peer makes no system call).
  due = due || udp_->rx_buffered() || now >= udp_next_ || now < udp_hot_until_ || now >= ring_hot_until_;
  if (due) {
    const size_t m = udp_->recv_batch(out.subspan(n));  // (via_ring false)
    udp_next_ = now + cfg_.udp_poll_interval;
    if (m > 0) udp_hot_until_ = now + kUdpHot;
    n += m;
  }
  return n;
}

bool ShmIo::prepare_wait() noexcept {
  const bool ring = ring_ ? ring_->prepare_sleep() : false;  // (announced: done_wait() ends it)
  return udp_->prepare_wait() || ring;
}

void ShmIo::done_wait() noexcept {
  if (ring_) {
    ring_->end_sleep();
    // The bell may have been meant for another thread of ours that announced
    // its sleep but had not yet entered poll(): it now sleeps with the latch
    // set.  Re-arm it, so that the next publish rings again, and ring for
    // it what was published before (our caller may not receive now).
    if (const size_t rang = bell_->drain(); rang > 0) {
      bells_rx_.fetch_add(rang, std::memory_order_relaxed);
      ring_->rearm_bell();
      if (ring_->waiting() && ring_->need_doorbell()) (void)ring_bell(*ring_);
    }
  }
  udp_due_.store(true, std::memory_order_relaxed);  // whatever woke us may be in the socket
}

IoStats ShmIo::stats() const noexcept {
  IoStats s = udp_->stats();
  s.tx_packets += shm_tx_;
  s.tx_bytes += shm_tx_bytes_;
  s.tx_errors += shm_full_ + shm_lost_;
  s.shm_tx_packets = shm_tx_;
  s.shm_tx_full = shm_full_;
  s.doorbells_tx = bells_tx_;
  s.doorbells_rx = bells_rx_.load(std::memory_order_relaxed);
  if (ring_) {
    s.shm_rx_packets = ring_->rx_packets();
    s.shm_rx_skipped = ring_->skipped();
    s.rx_packets += ring_->rx_packets();
    s.rx_bytes += ring_->header().rx_bytes.load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace uroce::net
