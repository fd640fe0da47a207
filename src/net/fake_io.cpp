#include "net/fake_io.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

#include "common/fault_guard.hpp"

namespace uroce::net {

// An attached endpoint's receive side.
struct FakeNetwork::Port {
  UniqueFd efd;  // readable (counter 1) while deliverable packets wait
  bool signalled = false;
  bool held = false;
  std::deque<FakePacket> q;
};

std::shared_ptr<FakeNetwork> FakeNetwork::create() { return std::shared_ptr<FakeNetwork>(new FakeNetwork()); }

FakeNetwork::~FakeNetwork() = default;

FakeNetwork::Port* FakeNetwork::find(const Endpoint& ep) const {
  auto it = ports_.find(ep);
  return it == ports_.end() ? nullptr : it->second.get();
}

void FakeNetwork::signal(Port& p) {
  const bool want = !p.held && !p.q.empty();
  if (want == p.signalled) return;
  uint64_t v = 1;
  ssize_t r = want ? ::write(p.efd.get(), &v, sizeof v) : ::read(p.efd.get(), &v, sizeof v);
  (void)r;  // a non-blocking eventfd that we keep at 0 or 1 cannot fail here
  p.signalled = want;
}

Result<std::unique_ptr<FakeIo>> FakeNetwork::attach(const Endpoint& want, size_t max_payload) {
  std::lock_guard lk(mu_);
  Endpoint ep = want;
  if (ep.port == 0) {
    for (int tries = 0; tries < 16384; ++tries) {
      ep.port = next_port_;
      next_port_ = next_port_ == 65535 ? 49152 : uint16_t(next_port_ + 1);
      if (!find(ep)) break;
    }
  }
  if (find(ep)) return err::exist("fake endpoint " + ep.to_string() + " is already attached");
  auto port = std::make_unique<Port>();
  port->efd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!port->efd.valid()) return err::from_errno(errno, std::string("eventfd: ") + std::strerror(errno));
  const int fd = port->efd.get();
  ports_.emplace(ep, std::move(port));
  return std::unique_ptr<FakeIo>(new FakeIo(shared_from_this(), ep, max_payload, fd));
}

void FakeNetwork::set_ecn_threshold(size_t packets) {
  std::lock_guard lk(mu_);
  ecn_threshold_ = packets;
}

void FakeNetwork::set_gso_max(uint16_t segments) {
  std::lock_guard lk(mu_);
  gso_max_ = segments;
}

uint16_t FakeNetwork::gso_max() const {
  std::lock_guard lk(mu_);
  return gso_max_;
}

void FakeNetwork::detach(const Endpoint& ep) {
  std::lock_guard lk(mu_);
  ports_.erase(ep);
}

void FakeNetwork::send(const Endpoint& src, std::span<const TxPacket> pkts) {
  std::lock_guard lk(mu_);
  ++batches_;
  size_t train_left = 0;  // packets still to come of the GSO train in the batch
  for (const TxPacket& t : pkts) {
    const bool joined = train_left > 0;
    train_left = joined ? train_left - 1 : t.gso_segments > 1 ? t.gso_segments - 1u : 0;
    FakePacket p{src, t.dst, t.tos, {}, joined, batches_};
    p.data.resize(t.size());
    if (!t.head.empty()) std::memcpy(p.data.data(), t.head.data(), t.head.size());
    // The body may be application memory that went away: the packet is lost.
    if (!t.body.empty() &&
        !fault_guard::copy(p.data.data() + t.head.size(), t.body.data(), t.body.size(), t.body.data()))
      continue;
    if (!t.tail.empty()) std::memcpy(p.data.data() + t.head.size() + t.body.size(), t.tail.data(), t.tail.size());
    ++stats_.sent;
    if (recording_) recorded_.push_back(p);
    if (filter_ && !filter_(p)) {
      ++stats_.filtered;
      continue;
    }
    Port* dst = find(p.dst);
    if (!dst) {
      ++stats_.no_endpoint;
      continue;
    }
    if (dst->q.size() >= queue_limit_) {
      ++stats_.overflow;
      continue;
    }
    // A switch's ECN marking: an ECN-capable packet that finds the queue at
    // or above the threshold leaves it Congestion Experienced.
    if (ecn_threshold_ != 0 && (p.tos & 3) != 0 && dst->q.size() >= ecn_threshold_) {
      p.tos |= 3;
      ++stats_.ce_marked;
    }
    dst->q.push_back(std::move(p));
    ++stats_.delivered;
    signal(*dst);
  }
}

size_t FakeNetwork::recv(const Endpoint& ep, std::vector<FakePacket>& into, size_t max) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p || p->held) return 0;
  size_t n = 0;
  for (; n < max && !p->q.empty(); ++n) {
    into.push_back(std::move(p->q.front()));
    p->q.pop_front();
  }
  signal(*p);
  return n;
}

void FakeNetwork::set_recording(bool on) {
  std::lock_guard lk(mu_);
  recording_ = on;
}

std::vector<FakePacket> FakeNetwork::recorded() const {
  std::lock_guard lk(mu_);
  return recorded_;
}

void FakeNetwork::clear_recorded() {
  std::lock_guard lk(mu_);
  recorded_.clear();
}

void FakeNetwork::set_filter(Filter f) {
  std::lock_guard lk(mu_);
  filter_ = std::move(f);
}

void FakeNetwork::set_queue_limit(size_t packets) {
  std::lock_guard lk(mu_);
  queue_limit_ = packets;
}

FakeNetStats FakeNetwork::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

bool FakeNetwork::hold(const Endpoint& ep, bool on) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p) return false;
  p->held = on;
  signal(*p);
  return true;
}

size_t FakeNetwork::queued(const Endpoint& ep) const {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  return p ? p->q.size() : 0;
}

std::vector<FakePacket> FakeNetwork::peek(const Endpoint& ep) const {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  return p ? std::vector<FakePacket>(p->q.begin(), p->q.end()) : std::vector<FakePacket>{};
}

bool FakeNetwork::drop(const Endpoint& ep, size_t index) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p || index >= p->q.size()) return false;
  p->q.erase(p->q.begin() + std::ptrdiff_t(index));
  signal(*p);
  return true;
}

bool FakeNetwork::duplicate(const Endpoint& ep, size_t index) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p || index >= p->q.size()) return false;
  FakePacket copy = p->q[index];
  p->q.insert(p->q.begin() + std::ptrdiff_t(index + 1), std::move(copy));
  return true;
}

bool FakeNetwork::reorder(const Endpoint& ep, const std::vector<size_t>& order) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p || order.size() != p->q.size()) return false;
  std::vector<bool> seen(order.size());
  for (size_t i : order) {
    if (i >= order.size() || seen[i]) return false;
    seen[i] = true;
  }
  std::deque<FakePacket> q;
  for (size_t i : order) q.push_back(std::move(p->q[i]));
  p->q = std::move(q);
  return true;
}

bool FakeNetwork::reverse(const Endpoint& ep) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p) return false;
  std::reverse(p->q.begin(), p->q.end());
  return true;
}

bool FakeNetwork::inject(const Endpoint& ep, FakePacket pkt) {
  std::lock_guard lk(mu_);
  Port* p = find(ep);
  if (!p) return false;
  p->q.push_back(std::move(pkt));
  signal(*p);
  return true;
}

FakeIo::~FakeIo() { net_->detach(local_); }

size_t FakeIo::send_batch(std::span<const TxPacket> pkts) noexcept {
  finish_icrcs(pkts);
  size_t ok = 0;
  size_t first = 0;
  // Hand over runs of acceptable packets; refuse oversize / wrong-family ones.
  for (size_t i = 0; i <= pkts.size(); ++i) {
    const bool bad =
        i < pkts.size() && (pkts[i].size() > max_payload_ || pkts[i].dst.addr.is_v4() != local_.addr.is_v4());
    if (i < pkts.size() && !bad) continue;
    if (i > first) {
      net_->send(local_, pkts.subspan(first, i - first));
      for (size_t j = first; j < i; ++j) stats_.tx_bytes += pkts[j].size();
      ok += i - first;
    }
    if (bad) ++stats_.tx_errors;
    first = i + 1;
  }
  stats_.tx_packets += ok;
  return ok;
}

size_t FakeIo::recv_batch(std::span<RxPacket> out) noexcept {
  last_.clear();
  const size_t n = net_->recv(local_, last_, out.size());
  for (size_t i = 0; i < n; ++i) {
    FakePacket& p = last_[i];
    RxPacket& r = out[i];
    r.truncated = p.data.size() > max_payload_;
    r.data = {p.data.data(), std::min(p.data.size(), max_payload_)};
    r.src = p.src;
    r.dst = p.dst.addr;
    r.tos = p.tos;
    r.ttl = 64;
    r.via_ring = false;
    r.icrc_omitted = false;
    // A train's packets are numbered as a GRO receive would number them.
    train_index_ = p.joined ? uint16_t(train_index_ + 1) : 0;
    r.ipv4_id_hint = train_index_;
    ++stats_.rx_packets;
    stats_.rx_bytes += p.data.size();
    if (r.truncated) ++stats_.rx_truncated;
  }
  return n;
}

}  // namespace uroce::net
