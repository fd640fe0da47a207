#include "net/fault_io.hpp"

#include <sys/epoll.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/fault_guard.hpp"
#include "common/log.hpp"
#include "wire/opcode.hpp"

namespace uroce::net {

uint32_t fault_class(uint8_t first_byte, size_t size) noexcept {
  if (size < wire::kBthLen) return fault_ops::kOther;
  const wire::OpcodeInfo& i = wire::info(first_byte);
  if (!i.valid() || i.service == wire::Service::cnp) return fault_ops::kOther;
  if (i.service == wire::Service::ud) return fault_ops::kUd;
  if (i.flags & wire::op::kAck) return fault_ops::kAck;
  if (i.flags & wire::op::kRead) return fault_ops::kRead;
  if (i.flags & wire::op::kAtomic) return fault_ops::kAtomic;
  if (i.flags & (wire::op::kSend | wire::op::kWrite)) return fault_ops::kData;
  return fault_ops::kOther;
}

namespace {

uint64_t splitmix64(uint64_t& x) noexcept {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double unit(uint64_t x) noexcept { return double(x >> 11) * 0x1.0p-53; }

uint8_t first_byte(const TxPacket& p) noexcept {
  if (!p.head.empty()) return p.head[0];
  if (!p.body.empty()) return p.body[0];
  return p.tail.empty() ? 0 : p.tail[0];
}

// False if the body (application memory) is gone: the packet is lost.
bool flatten(const TxPacket& p, std::vector<uint8_t>& out) {
  out.resize(p.size());
  uint8_t* d = out.data();
  if (!p.head.empty()) std::memcpy(d, p.head.data(), p.head.size());
  d += p.head.size();
  if (!p.body.empty() && !fault_guard::copy(d, p.body.data(), p.body.size(), p.body.data())) return false;
  d += p.body.size();
  if (!p.tail.empty()) std::memcpy(d, p.tail.data(), p.tail.size());
  return true;
}

}  // namespace

void FaultIo::Rng::seed(uint64_t seed) noexcept {
  for (uint64_t& w : s) w = splitmix64(seed);
}

uint64_t FaultIo::Rng::next() noexcept {  // xoshiro256**
  const uint64_t result = std::rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = std::rotl(s[3], 45);
  return result;
}

Result<std::optional<FaultConfig>> FaultIo::from_env() {
  const char* v = std::getenv("UROCE_FAULTS");
  if (!v || !*v) return std::optional<FaultConfig>{};
  auto cfg = parse_faults(v);
  if (!cfg.ok()) return cfg.status();
  if (!cfg->any()) return std::optional<FaultConfig>{};
  return std::optional<FaultConfig>(*cfg);
}

Result<std::unique_ptr<FaultIo>> FaultIo::wrap(std::unique_ptr<PacketIo> inner, const FaultConfig& cfg) {
  if (!inner) return err::inval("FaultIo needs a packet I/O to wrap");
  std::unique_ptr<FaultIo> io(new FaultIo(std::move(inner), cfg));
  io->epfd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!io->epfd_.valid()) return err::from_errno(errno, "epoll_create1 for fault injection");
  io->timerfd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!io->timerfd_.valid()) return err::from_errno(errno, "timerfd_create for fault injection");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = 0;
  if (::epoll_ctl(io->epfd_.get(), EPOLL_CTL_ADD, io->inner_->wait_fd(), &ev) != 0)
    return err::from_errno(errno, "epoll_ctl(inner wait fd) for fault injection");
  ev.data.u32 = 1;
  if (::epoll_ctl(io->epfd_.get(), EPOLL_CTL_ADD, io->timerfd_.get(), &ev) != 0)
    return err::from_errno(errno, "epoll_ctl(timerfd) for fault injection");
  UROCE_LOG(info, "fault injection on %s: %s", io->local().to_string().c_str(), to_string(cfg).c_str());
  return io;
}

FaultIo::FaultIo(std::unique_ptr<PacketIo> inner, const FaultConfig& cfg) : inner_(std::move(inner)), cfg_(cfg) {
  tx_rng_.seed(cfg.seed ^ 0x7478000000000000ull);  // "tx"
  rx_rng_.seed(cfg.seed ^ 0x7278000000000000ull);  // "rx"
  cfg_.tx.reorder_max = std::max<uint32_t>(1, cfg_.tx.reorder_max);
  cfg_.rx.reorder_max = std::max<uint32_t>(1, cfg_.rx.reorder_max);
}

FaultIo::~FaultIo() = default;

IoStats FaultIo::stats() const noexcept {
  IoStats s = inner_->stats();
  s.tx_faults = tx_counts_;
  s.rx_faults = rx_counts_;
  return s;
}

FaultIo::Clock::time_point FaultIo::next_due() const noexcept {
  Clock::time_point t = Clock::time_point::max();
  for (const HeldTx& h : held_tx_) t = std::min(t, h.due);
  for (const HeldRx& h : held_rx_) t = std::min(t, h.due);
  return t;
}

FaultIo::Fate FaultIo::decide(Rng& rng, const FaultRates& r, size_t size, FaultCounts& c) noexcept {
  uint64_t x[8];
  for (uint64_t& v : x) v = rng.next();  // always 8 draws: the n-th packet's fate is fixed
  Fate f;
  if (unit(x[0]) < r.drop) {
    f.drop = true;
    ++c.dropped;
    return f;
  }
  if (size > 0 && unit(x[1]) < r.corrupt) {
    f.corrupt = true;
    f.corrupt_pos = size_t(x[2] % size);
    f.corrupt_xor = uint8_t(1 + (x[2] >> 40) % 255);
    ++c.corrupted;
  }
  // CE marking draws from bits no other decision reads, so that adding it
  // changes no other fault of a seed's sequence.
  if (r.ce > 0 && unit(std::rotl(x[5], 29) ^ x[7]) < r.ce) f.ce = true;
  if (unit(x[3]) < r.dup) {
    f.dup = true;
    ++c.duplicated;
  }
  if (unit(x[4]) < r.reorder) {
    f.reorder = true;
    f.reorder_by = uint32_t(1 + x[5] % r.reorder_max);
    ++c.reordered;
  } else if (unit(x[6]) < r.delay) {
    f.delay = true;
    f.delay_for = std::chrono::microseconds(x[7] % (uint64_t(r.delay_max_us) + 1));
    ++c.delayed;
  }
  return f;
}

std::vector<uint8_t> FaultIo::take_buf() noexcept {
  if (spare_.empty()) return {};
  std::vector<uint8_t> b = std::move(spare_.back());
  spare_.pop_back();
  return b;
}

void FaultIo::recycle(std::vector<uint8_t>&& b) noexcept {
  if (b.capacity() == 0 || spare_.size() >= 256) return;
  spare_.push_back(std::move(b));
}

std::vector<uint8_t>& FaultIo::tx_buf() noexcept {
  if (tx_bufs_used_ == tx_bufs_.size()) tx_bufs_.emplace_back();
  return tx_bufs_[tx_bufs_used_++];
}

std::vector<uint8_t>& FaultIo::rx_buf() noexcept {
  if (rx_bufs_used_ == rx_bufs_.size()) rx_bufs_.emplace_back();
  return rx_bufs_[rx_bufs_used_++];
}

void FaultIo::arm_timer() noexcept {
  const Clock::time_point due = next_due();
  if (due == armed_for_) return;
  armed_for_ = due;
  itimerspec its{};
  if (due != Clock::time_point::max()) {
    int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count();
    if (ns <= 0) ns = 1;  // already due: expires at once (an absolute time in the past)
    its.it_value.tv_sec = time_t(ns / 1'000'000'000);
    its.it_value.tv_nsec = long(ns % 1'000'000'000);
  }
  ::timerfd_settime(timerfd_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

// ------------------------------------------------------------------- send

void FaultIo::tx_passed() noexcept {
  for (size_t i = 0; i < held_tx_.size();) {
    HeldTx& h = held_tx_[i];
    if (h.countdown > 0 && --h.countdown == 0) {
      std::vector<uint8_t>& b = tx_buf();
      b.swap(h.data);
      recycle(std::move(h.data));
      TxPacket p;
      p.dst = h.dst;
      p.tos = h.tos;
      p.head = b;
      tx_out_.push_back(p);
      held_tx_.erase(held_tx_.begin() + ptrdiff_t(i));
    } else {
      ++i;
    }
  }
}

void FaultIo::tx_one(const TxPacket& in, Clock::time_point now) noexcept {
  TxPacket p = in;
  p.gso_segments = 0;  // each packet of a train on its own
  if (!cfg_.tx.any() || !(cfg_.ops & fault_class(first_byte(in), in.size()))) {
    tx_out_.push_back(p);
    tx_passed();
    return;
  }
  const Fate f = decide(tx_rng_, cfg_.tx, in.size(), tx_counts_);
  if (f.drop) return;
  // What leaves from here on carries its ICRC, computed before any byte
  // is flipped: a corrupted packet must fail the receiver's check.
  finish_icrc(in);
  p.icrc = nullptr;
  if (f.ce && (p.tos & 3) != 0) {
    p.tos |= 3;
    ++tx_counts_.ce_marked;
  }
  if (f.corrupt) {  // a copy: never the application's memory
    std::vector<uint8_t>& b = tx_buf();
    if (!flatten(in, b)) return;
    b[f.corrupt_pos] ^= f.corrupt_xor;
    p.head = b;
    p.body = {};
    p.tail = {};
  }
  if (f.dup) {
    tx_out_.push_back(p);
    tx_passed();
  }
  if (f.reorder || f.delay) {
    HeldTx h;
    h.data = take_buf();
    if (!flatten(p, h.data)) return;
    h.dst = p.dst;
    h.tos = p.tos;
    if (f.reorder) {
      h.countdown = f.reorder_by;
      h.due = now + kReorderHoldMax;
    } else {
      h.due = now + f.delay_for;
    }
    held_tx_.push_back(std::move(h));
    return;
  }
  tx_out_.push_back(p);
  tx_passed();
}

void FaultIo::release_due_tx(Clock::time_point now) noexcept {
  for (size_t i = 0; i < held_tx_.size();) {
    HeldTx& h = held_tx_[i];
    if (h.due <= now) {
      std::vector<uint8_t>& b = tx_buf();
      b.swap(h.data);
      recycle(std::move(h.data));
      TxPacket p;
      p.dst = h.dst;
      p.tos = h.tos;
      p.head = b;
      tx_out_.push_back(p);
      held_tx_.erase(held_tx_.begin() + ptrdiff_t(i));
    } else {
      ++i;
    }
  }
}

size_t FaultIo::send_batch(std::span<const TxPacket> pkts) noexcept {
  if (!cfg_.tx.any() && held_tx_.empty()) return inner_->send_batch(pkts);
  const Clock::time_point now = Clock::now();
  tx_out_.clear();
  tx_bufs_used_ = 0;
  release_due_tx(now);
  for (const TxPacket& p : pkts) tx_one(p, now);
  const size_t sent = tx_out_.empty() ? 0 : inner_->send_batch(tx_out_);
  const size_t refused = tx_out_.size() - sent;
  tx_out_.clear();
  arm_timer();
  // Dropped and held packets were handed to the (bad) network.
  return pkts.size() - std::min(pkts.size(), refused);
}

// ---------------------------------------------------------------- receive

void FaultIo::rx_emit_copy(std::vector<uint8_t>&& data, const RxPacket& meta, std::span<RxPacket> out,
                           size_t& n) noexcept {
  if (n < out.size()) {
    std::vector<uint8_t>& b = rx_buf();
    b.swap(data);
    recycle(std::move(data));
    out[n] = meta;
    out[n].data = std::span<uint8_t>(b.data(), b.size());
    ++n;
    return;
  }
  HeldRx h;  // no room in this batch: first in the next one
  h.data = std::move(data);
  h.meta = meta;
  h.due = Clock::time_point::min();
  held_rx_.push_back(std::move(h));
}

void FaultIo::rx_emit(const RxPacket& p, std::span<RxPacket> out, size_t& n) noexcept {
  if (n < out.size()) {
    out[n++] = p;  // points into the inner I/O's buffer: valid until our next call
    return;
  }
  std::vector<uint8_t> copy = take_buf();
  copy.assign(p.data.begin(), p.data.end());
  rx_emit_copy(std::move(copy), p, out, n);
}

void FaultIo::rx_passed(std::span<RxPacket> out, size_t& n) noexcept {
  for (size_t i = 0; i < held_rx_.size();) {
    HeldRx& h = held_rx_[i];
    if (h.countdown > 0 && --h.countdown == 0) {
      HeldRx x = std::move(h);
      held_rx_.erase(held_rx_.begin() + ptrdiff_t(i));
      rx_emit_copy(std::move(x.data), x.meta, out, n);  // may append (countdown 0) behind i
    } else {
      ++i;
    }
  }
}

size_t FaultIo::recv_batch(std::span<RxPacket> out) noexcept {
  rx_bufs_used_ = 0;  // what the last call handed out is free again
  const Clock::time_point now = Clock::now();
  uint64_t ticks;
  if (::read(timerfd_.get(), &ticks, sizeof ticks) == ssize_t(sizeof ticks))
    armed_for_ = Clock::time_point::max();  // consumed: arm_timer() must set it again
  if (!held_tx_.empty()) {
    tx_out_.clear();
    tx_bufs_used_ = 0;
    release_due_tx(now);
    if (!tx_out_.empty()) inner_->send_batch(tx_out_);
    tx_out_.clear();
  }
  size_t n = 0;
  // Held packets whose time has come go first: they arrived earlier.
  for (size_t i = 0; i < held_rx_.size() && n < out.size();) {
    if (held_rx_[i].due <= now) {
      HeldRx x = std::move(held_rx_[i]);
      held_rx_.erase(held_rx_.begin() + ptrdiff_t(i));
      rx_emit_copy(std::move(x.data), x.meta, out, n);
    } else {
      ++i;
    }
  }
  if (n < out.size()) {
    const size_t want = out.size() - n;
    if (rx_in_.size() < want) rx_in_.resize(want);
    const size_t m = inner_->recv_batch(std::span<RxPacket>(rx_in_.data(), want));
    for (size_t i = 0; i < m; ++i) {
      const RxPacket& p = rx_in_[i];
      if (!cfg_.rx.any() || p.truncated || !(cfg_.ops & fault_class(p.data.empty() ? 0 : p.data[0], p.data.size()))) {
        rx_emit(p, out, n);
        rx_passed(out, n);
        continue;
      }
      const Fate f = decide(rx_rng_, cfg_.rx, p.data.size(), rx_counts_);
      if (f.drop) continue;
      if (f.ce && (p.tos & 3) != 0) {
        rx_in_[i].tos |= 3;
        ++rx_counts_.ce_marked;
      }
      std::vector<uint8_t> corrupted;
      if (f.corrupt) {
        rx_in_[i].icrc_omitted = false;  // (so that the ICRC check catches it)
        corrupted = take_buf();
        corrupted.assign(p.data.begin(), p.data.end());
        corrupted[f.corrupt_pos] ^= f.corrupt_xor;
      }
      auto copy = [&] {
        std::vector<uint8_t> c = take_buf();
        if (f.corrupt)
          c.assign(corrupted.begin(), corrupted.end());
        else
          c.assign(p.data.begin(), p.data.end());
        return c;
      };
      if (f.dup) {
        rx_emit_copy(copy(), p, out, n);
        rx_passed(out, n);
      }
      if (f.reorder || f.delay) {
        HeldRx h;
        h.data = f.corrupt ? std::move(corrupted) : copy();
        h.meta = p;
        h.meta.data = {};
        if (f.reorder) {
          h.countdown = f.reorder_by;
          h.due = now + kReorderHoldMax;
        } else {
          h.due = now + f.delay_for;
        }
        held_rx_.push_back(std::move(h));
        continue;
      }
      if (f.corrupt)
        rx_emit_copy(std::move(corrupted), p, out, n);
      else
        rx_emit(p, out, n);
      rx_passed(out, n);
    }
  }
  arm_timer();
  return n;
}

// The inner I/O's wait fd may change on its first join: follow it.
Status FaultIo::join_group(const IpAddr& group) {
  const int old = inner_->wait_fd();
  UROCE_TRY(inner_->join_group(group));
  if (const int now = inner_->wait_fd(); now != old) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = 0;
    (void)::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, old, nullptr);
    if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, now, &ev) != 0)
      return err::from_errno(errno, "epoll_ctl(inner wait fd) for fault injection");
  }
  return {};
}

}  // namespace uroce::net
