#include "pingpong_common.hpp"

#include <poll.h>

#include <cerrno>
#include <cstdlib>

namespace uroce::pingpong {

const char* name(Mode m) noexcept {
  switch (m) {
    case Mode::send_busy: return "send-busy";
    case Mode::send_notify: return "send-notify";
    case Mode::write_read_signaled: return "write-read-signaled";
    case Mode::write_read_unsignaled: return "write-read-unsignaled";
    case Mode::tcp: return "tcp";
    case Mode::tcp_busy: return "tcp-busy";
  }
  return "?";
}

std::optional<Mode> parse_mode(std::string_view s) noexcept {
  for (Mode m : kAllModes)
    if (s == name(m)) return m;
  return std::nullopt;
}

const char* describe(Mode m) noexcept {
  switch (m) {
    case Mode::send_busy: return "signaled SEND/RECV, both sides busy-poll";
    case Mode::send_notify: return "signaled SEND/RECV, both sides wait for notify";
    case Mode::write_read_signaled: return "signaled RDMA WRITE then READ, wait for notify; agent passive";
    case Mode::write_read_unsignaled: return "unsignaled WRITE, signaled READ, wait for notify; agent passive";
    case Mode::tcp: return "send()/recv() on blocking TCP sockets";
    case Mode::tcp_busy: return "send()/recv() on non-blocking TCP sockets, spinning";
  }
  return "?";
}

namespace {

std::string num(double v) { return bench::fmt(v, 3); }

double dnum(const demo::Msg& m, const std::string& k) {
  const std::string v = m.str(k);
  if (v.empty() || v == "-") return std::nan("");
  return std::strtod(v.c_str(), nullptr);
}

}  // namespace

std::map<std::string, std::string> to_kv(const Figures& f) {
  return {{"iters", std::to_string(f.iters)},
          {"rtt_median", num(f.rtt_median)},
          {"rtt_p99", num(f.rtt_p99)},
          {"rtt_mean", num(f.rtt_mean)},
          {"rtt_from_elapsed", f.rtt_from_elapsed ? "1" : "0"},
          {"elapsed_us", num(f.cpu.elapsed_us)},
          {"app_user", num(f.cpu.app_user)},
          {"app_sys", num(f.cpu.app_sys)},
          {"prog_user", num(f.cpu.prog_user)},
          {"prog_sys", num(f.cpu.prog_sys)},
          {"pid", std::to_string(f.pid)},
          {"cpu", std::to_string(f.cpu_pinned)}};
}

Figures figures_from(const demo::Msg& m) {
  Figures f;
  f.iters = m.num("iters");
  f.rtt_median = dnum(m, "rtt_median");
  f.rtt_p99 = dnum(m, "rtt_p99");
  f.rtt_mean = dnum(m, "rtt_mean");
  f.rtt_from_elapsed = m.str("rtt_from_elapsed") == "1";
  f.cpu.elapsed_us = dnum(m, "elapsed_us");
  f.cpu.app_user = dnum(m, "app_user");
  f.cpu.app_sys = dnum(m, "app_sys");
  f.cpu.prog_user = dnum(m, "prog_user");
  f.cpu.prog_sys = dnum(m, "prog_sys");
  f.pid = int(m.num("pid"));
  f.cpu_pinned = std::atoi(m.str("cpu").c_str());
  return f;
}

// ---------------------------------------------------------------- Waiter

Status Waiter::refill() {
  at_ = have_ = 0;
  auto n = cq_.poll(buf_);
  if (!n.ok()) return n.status();
  have_ = *n;
  return {};
}

Result<Wc> Waiter::next() {
  if (at_ < have_) return buf_[at_++];
  const double deadline = bench::now_us() + timeout_ms_ * 1000.0;
  for (unsigned spins = 0;; ++spins) {
    // 1.-3. poll the CQ; done if a completion is there.
    UROCE_TRY(refill());
    if (have_ > 0) return buf_[at_++];
    if (how_ == How::busy) {
      if ((spins & 255) == 255 && bench::now_us() > deadline)
        return err::from_errno(ETIMEDOUT, "no completion within " + std::to_string(timeout_ms_) + " ms");
      continue;
    }
    // 4. arm the CQ: its next completion raises an event on the channel;
    // 5.-6. poll again for what came between 2 and 4.
    UROCE_TRY(cq_.req_notify());
    UROCE_TRY(refill());
    if (have_ > 0) return buf_[at_++];
    // 7. block until the event (8. acknowledge it).
    const int left = int((deadline - bench::now_us()) / 1000);
    if (left <= 0) return err::from_errno(ETIMEDOUT, "no completion within " + std::to_string(timeout_ms_) + " ms");
    if (how_ == How::sleep) {
      // Sleep on the channel's fd alone: the NIC's progress thread serves
      // the socket meanwhile; the event is then taken without waiting.
      pollfd p{channel_->fd(), POLLIN, 0};
      const int r = ::poll(&p, 1, left);
      if (r < 0 && errno != EINTR) return err::from_errno(errno, "poll on the completion channel");
      if (r <= 0) continue;
    }
    auto ev = channel_->get_event(how_ == How::sleep ? 0 : left);
    if (!ev.ok()) {
      if (ev.status().code() == ETIMEDOUT) continue;
      return ev.status();
    }
    (*ev)->ack_events(1);
  }
}

}  // namespace uroce::pingpong
