// A deterministic world for Cm state-machine tests: a fake clock, fake
// devices (GsiPort) whose MADs go into one in-memory queue, a fake host
// directory shared by the Cms, and an event recorder per Cm.  Tests deliver
// the queued MADs by hand -- dropping, duplicating or holding some -- and
// move the clock to fire timers.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cm/cm.hpp"
#include "cm/mad.hpp"

namespace uroce::cm::test {

struct FakeClock {
  Clock::time_point t = Clock::time_point{} + std::chrono::hours(1);
  void advance(Clock::duration d) { t += d; }
};

struct Sent {
  Endpoint src, dst;
  MadBuf mad;
  AttrId attr() const { return AttrId(uint16_t(mad[16] << 8 | mad[17])); }
};

// The wire: every MAD any FakePort sends, in order.
struct Wire {
  std::deque<Sent> queue;
  std::vector<Sent> log;  // everything ever sent
  size_t count(AttrId a) const {
    size_t n = 0;
    for (const Sent& s : log) n += s.attr() == a;
    return n;
  }
};

class FakePort final : public GsiPort {
 public:
  FakePort(Wire& w, Endpoint local, uint32_t mtu = 4096) : wire_(w), local_(local), mtu_(mtu) {}
  IpAddr address() const noexcept override { return local_.addr; }
  Endpoint local() const noexcept override { return local_; }
  uint32_t mtu() const noexcept override { return mtu_; }
  uint64_t node_guid() const noexcept override { return 0x0200000000000000ull | local_.port; }
  uint8_t ack_delay() const noexcept override { return 8; }
  void set_receiver(GsiReceiver*) noexcept override {}
  void send(const Endpoint& dst, std::span<const uint8_t> mad) noexcept override {
    Sent s;
    s.src = local_;
    s.dst = dst;
    std::copy(mad.begin(), mad.end(), s.mad.begin());
    wire_.queue.push_back(s);
    wire_.log.push_back(s);
  }

 private:
  Wire& wire_;
  Endpoint local_;
  uint32_t mtu_;
};

// What the host registry knows: listeners and the ports of slots.
struct FakeHost {
  std::map<std::pair<IpAddr, uint64_t>, uint32_t> listeners;
  std::map<std::pair<uint32_t, IpAddr>, uint16_t> ports;
};

class FakeDirectory final : public Directory {
 public:
  FakeDirectory(FakeHost& h, uint32_t slot) : host_(h), slot_(slot) {}
  uint32_t slot() const noexcept override { return slot_; }
  std::optional<uint16_t> port_of(uint32_t slot, const IpAddr& addr) const noexcept override {
    auto it = host_.ports.find({slot, addr});
    if (it == host_.ports.end()) return std::nullopt;
    return it->second;
  }
  Status add_listener(const IpAddr& addr, uint64_t sid) noexcept override {
    auto it = host_.listeners.find({addr, sid});
    if (it != host_.listeners.end() && it->second != slot_) return err::from_errno(EADDRINUSE, "taken");
    host_.listeners[{addr, sid}] = slot_;
    return {};
  }
  void remove_listener(const IpAddr& addr, uint64_t sid) noexcept override { host_.listeners.erase({addr, sid}); }
  std::optional<uint32_t> find_listener(const IpAddr& addr, uint64_t sid) const noexcept override {
    if (auto it = host_.listeners.find({addr, sid}); it != host_.listeners.end()) return it->second;
    const IpAddr any = addr.is_v4() ? IpAddr::from_v4(0) : IpAddr{};
    if (auto it = host_.listeners.find({any, sid}); it != host_.listeners.end()) return it->second;
    return std::nullopt;
  }

 private:
  FakeHost& host_;
  uint32_t slot_;
};

struct Recorder final : EventSink {
  std::vector<Event> events;
  void deliver(Event&& ev) noexcept override { events.push_back(std::move(ev)); }
  std::vector<EventType> types() const {
    std::vector<EventType> t;
    for (const Event& e : events) t.push_back(e.type);
    return t;
  }
  // The events of one id.
  std::vector<EventType> of(const Id* id) const {
    std::vector<EventType> t;
    for (const Event& e : events)
      if (e.id == id) t.push_back(e.type);
    return t;
  }
  const Event* last(EventType t) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it)
      if (it->type == t) return &*it;
    return nullptr;
  }
};

// A QP as the Cm sees it: records its transitions.
struct FakeQp final : QpControl {
  uint32_t num;
  std::vector<QpAttrs> mods;
  std::optional<QpState> fail_at;
  explicit FakeQp(uint32_t n) : num(n) {}
  uint32_t qpn() const noexcept override { return num; }
  Status modify(const QpAttrs& a) noexcept override {
    if (fail_at && a.qp_state == *fail_at) return err::inval("injected failure");
    mods.push_back(a);
    return {};
  }
  std::vector<QpState> states() const {
    std::vector<QpState> s;
    for (const QpAttrs& a : mods) s.push_back(a.qp_state);
    return s;
  }
};

// One process of the fake host: a Cm with one device.
struct Node {
  Recorder rec;
  FakeDirectory dir;
  FakePort port;
  Cm cm;
  Node(FakeHost& host, Wire& wire, FakeClock& clock, uint32_t slot, Endpoint local, Config cfg)
      : dir(host, slot), port(wire, local), cm(dir, rec, cfg, [&clock] { return clock.t; }) {
    cm.add_port(port);
    host.ports[{slot, local.addr}] = local.port;
  }
};

inline Config test_config() {
  Config c;
  c.cm_response_timeout = 16;  // 268 ms (+ 2 * 16.8 ms packet lifetime)
  c.max_cm_retries = 3;
  c.timewait = std::chrono::milliseconds(500);
  return c;
}

class CmWorld : public ::testing::Test {
 protected:
  FakeClock clock;
  Wire wire;
  FakeHost host;
  // Two processes on one address, the second on an ephemeral port (as on a
  // host where the first owns 4791).
  Node a{host, wire, clock, 1, {*IpAddr::parse("10.0.0.1"), 4791}, test_config()};
  Node b{host, wire, clock, 2, {*IpAddr::parse("10.0.0.1"), 50000}, test_config()};
  std::vector<Node*> nodes{&a, &b};

  // Delivers queued MADs until none is left (answers included); `filter`
  // returns how many copies of each to deliver (0 drops it).
  size_t deliver(std::function<int(const Sent&)> filter = {}) {
    size_t n = 0;
    while (!wire.queue.empty()) {
      Sent s = wire.queue.front();
      wire.queue.pop_front();
      const int copies = filter ? filter(s) : 1;
      for (int i = 0; i < copies; ++i) {
        for (Node* node : nodes) {
          if (node->port.local() != s.dst) continue;
          GsiMad m;
          m.data = s.mad;
          m.src = s.src;
          m.dst = s.dst.addr;
          m.src_qp = 1;
          node->cm.on_mad(node->port, m);
          ++n;
        }
      }
    }
    return n;
  }
  // Moves the clock and runs every node's timers.
  void advance(Clock::duration d) {
    clock.advance(d);
    for (Node* node : nodes) node->cm.on_timer();
  }
  // Runs timers and delivery until `pred` or `limit` of simulated time.
  bool run_until(std::function<bool()> pred, Clock::duration limit, std::function<int(const Sent&)> filter = {}) {
    const auto step = std::chrono::milliseconds(10);
    for (Clock::duration t{}; t < limit; t += step) {
      deliver(filter);
      if (pred()) return true;
      advance(step);
    }
    deliver(filter);
    return pred();
  }

  // Server b listens on 10.0.0.1:port; client a resolves and connects.
  Id* listen_b(uint16_t port = 7000, QpType t = QpType::rc) {
    Id* l = b.cm.create_id(nullptr, t == QpType::ud ? kPsUdp : kPsTcp, t);
    EXPECT_TRUE(b.cm.bind(l, {*IpAddr::parse("10.0.0.1"), port}).ok());
    EXPECT_TRUE(b.cm.listen(l, 8).ok());
    return l;
  }
  Id* resolved_a(uint16_t port = 7000, QpType t = QpType::rc) {
    Id* c = a.cm.create_id(nullptr, t == QpType::ud ? kPsUdp : kPsTcp, t);
    EXPECT_TRUE(a.cm.resolve_addr(c, std::nullopt, {*IpAddr::parse("10.0.0.1"), port}).ok());
    EXPECT_TRUE(a.cm.resolve_route(c).ok());
    a.rec.events.clear();
    return c;
  }
  // The child id of b's last CONNECT_REQUEST.
  Id* request_of_b() {
    const Event* e = b.rec.last(EventType::connect_request);
    return e ? e->id : nullptr;
  }
};

}  // namespace uroce::cm::test
