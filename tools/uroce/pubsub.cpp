// `uroce pubsub`: seed 000's multicast publish-subscribe in one command.
//
//   uroce pubsub [--subscribers N] [--count C] [--size S] [--group G]
//                [--addr-base A.B.C] [--interval-us U] [--depth D]
//
// A publisher keeps a record it updates C times, posting each version to a
// UD multicast group; N subscribers, each a device of its own on
// A.B.C.(11..10+N) in this process, attach a UD QP to the group, keep D
// receives posted (when one completes they post another and read the
// version from the completed buffer, as the seed says), and report what
// arrived: versions received, lost (never seen), duplicated, out of order,
// and corrupted (a byte that is not the publisher's).  UD multicast is
// unreliable: with a short --interval-us and a small --depth, a subscriber
// that falls behind runs out of receives and the lost count shows it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "uroce/uroce.hpp"

namespace uroce::pubsub {
namespace {

constexpr uint32_t kQkey = 0x0badcafe;
constexpr uint32_t kGrh = 40;
constexpr uint64_t kEnd = ~uint64_t{0};  // the last message: no more versions

struct Options {
  uint32_t subscribers = 3;
  uint64_t count = 10000;
  uint32_t size = 256;
  std::string group = "239.77.0.1";
  std::string addr_base = "127.0.0";
  uint32_t interval_us = 5;
  uint32_t depth = 64;
};

// Byte i of version `v` of the record.
uint8_t byte_of(uint64_t v, size_t i) { return uint8_t(v * 131 + i * 7 + 1); }

// One device with a UD QP.
struct Endpoint {
  std::optional<Context> ctx;
  std::optional<CompletionQueue> cq;
  std::optional<ProtectionDomain> pd;
  std::vector<std::byte> buf;
  std::optional<MemoryRegion> mr;
  std::optional<QueuePair> qp;

  Status open(const IpAddr& addr, uint32_t depth, size_t slot) {
    DeviceInfo dev;
    dev.name = "pubsub-" + addr.to_string();
    dev.gids = {addr};
    auto c = Context::open(dev);
    if (!c.ok()) return c.status();
    ctx.emplace(std::move(*c));
    auto q = ctx->create_cq(depth * 2 + 16);
    if (!q.ok()) return q.status();
    cq.emplace(std::move(*q));
    auto p = ctx->alloc_pd();
    if (!p.ok()) return p.status();
    pd.emplace(std::move(*p));
    buf.assign(slot * (depth + 1), std::byte{0});
    auto m = pd->reg_mr(std::span<std::byte>(buf), access::kLocalWrite);
    if (!m.ok()) return m.status();
    mr.emplace(std::move(*m));
    QpConfig qc;
    qc.type = QpType::ud;
    qc.send_cq = qc.recv_cq = &*cq;
    qc.cap = QpCap{depth + 1, depth + 1, 1, 1, 0};
    auto qp_r = pd->create_qp(qc);
    if (!qp_r.ok()) return qp_r.status();
    qp.emplace(std::move(*qp_r));
    ConnectOptions co;
    co.qkey = kQkey;
    return qp->connect(qp->local_info(), co);
  }
};

struct Tally {
  uint64_t received = 0, lost = 0, duplicates = 0, reordered = 0, corrupted = 0;
  std::string error;
};

// A subscriber: keeps `depth` receives posted, each completed one re-posted
// after its version is read; stops at the end message or after a second of
// silence.
void subscribe(Endpoint& e, const Options& o, std::atomic<int>& ready, Tally& t) {
  const size_t slot = kGrh + o.size;
  auto post = [&](uint64_t i) {
    Sge s = e.mr->sge(size_t(i) * slot, uint32_t(slot));
    RecvWr r;
    r.wr_id = i;
    r.sg_list = {&s, 1};
    return e.qp->post_recv(r);
  };
  for (uint64_t i = 0; i < o.depth; ++i)
    if (Status s = post(i); !s.ok()) {
      t.error = s.to_string();
      ready.fetch_add(1);
      return;
    }
  ready.fetch_add(1);
  std::vector<uint8_t> seen(o.count, 0);
  uint64_t highest = 0;
  bool any = false;
  while (true) {
    Wc wc[16];
    auto n = e.cq->poll_for(wc, std::chrono::milliseconds(1000));
    if (!n.ok()) {
      t.error = n.status().to_string();
      break;
    }
    if (*n == 0) break;  // a second of silence: the publisher is gone
    bool end = false;
    for (int k = 0; k < *n; ++k) {
      const uint64_t i = wc[k].wr_id;
      if (wc[k].status != WcStatus::success || wc[k].byte_len != slot) {
        ++t.corrupted;
      } else {
        const auto* p = reinterpret_cast<const uint8_t*>(e.buf.data() + size_t(i) * slot + kGrh);
        uint64_t v;
        std::memcpy(&v, p, sizeof v);
        if (v == kEnd) {
          end = true;
        } else if (v >= o.count) {
          ++t.corrupted;
        } else {
          bool good = true;
          for (size_t b = sizeof v; b < o.size && good; ++b) good = p[b] == byte_of(v, b);
          if (!good) ++t.corrupted;
          if (seen[v]) {
            ++t.duplicates;
          } else {
            seen[v] = 1;
            ++t.received;
            if (any && v < highest) ++t.reordered;
            highest = std::max(highest, v);
            any = true;
          }
        }
      }
      if (Status s = post(i); !s.ok()) t.error = s.to_string();  // the seed: another receive at once
    }
    if (end) break;
  }
  t.lost = o.count - t.received;
}

int run(const Options& o) {
  auto group = IpAddr::parse(o.group);
  if (!group || !group->is_multicast()) {
    std::fprintf(stderr, "uroce pubsub: --group %s is not a multicast address\n", o.group.c_str());
    return 1;
  }
  if (o.size < 8 || o.subscribers < 1 || o.subscribers > 200 || o.depth < 2) {
    std::fprintf(stderr, "uroce pubsub: --size must be >= 8, --subscribers 1..200, --depth >= 2\n");
    return 1;
  }
  const size_t slot = kGrh + o.size;
  auto addr = [&](uint32_t i) { return IpAddr::parse(o.addr_base + "." + std::to_string(i)); };
  Endpoint pub;
  std::vector<Endpoint> subs(o.subscribers);
  auto pa = addr(10);
  if (!pa) {
    std::fprintf(stderr, "uroce pubsub: --addr-base %s is not the start of an IPv4 address\n", o.addr_base.c_str());
    return 1;
  }
  if (Status s = pub.open(*pa, 4, o.size); !s.ok()) {
    std::fprintf(stderr, "uroce pubsub: publisher on %s: %s\n", pa->to_string().c_str(), s.to_string().c_str());
    return 1;
  }
  for (uint32_t i = 0; i < o.subscribers; ++i) {
    auto a = addr(11 + i);
    Status s = a ? subs[i].open(*a, o.depth, slot) : err::inval("bad address");
    if (s.ok()) s = subs[i].qp->attach_mcast(*group);
    if (!s.ok()) {
      std::fprintf(stderr, "uroce pubsub: subscriber %u: %s\n", i, s.to_string().c_str());
      return 1;
    }
  }
  std::printf("uroce pubsub: %u subscribers joined %s; publishing %llu versions of a %u-byte record\n", o.subscribers,
              group->to_string().c_str(), static_cast<unsigned long long>(o.count), o.size);
  std::atomic<int> ready{0};
  std::vector<Tally> tally(o.subscribers);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < o.subscribers; ++i) threads.emplace_back([&, i] { subscribe(subs[i], o, ready, tally[i]); });
  while (ready.load() < int(o.subscribers)) std::this_thread::yield();

  AhAttr aa;
  aa.dgid = *group;
  aa.hop_limit = 1;
  auto ah = pub.pd->create_ah(aa);
  if (!ah.ok()) {
    std::fprintf(stderr, "uroce pubsub: address handle: %s\n", ah.status().to_string().c_str());
    return 1;
  }
  auto publish = [&](uint64_t v) -> Status {
    auto* p = reinterpret_cast<uint8_t*>(pub.buf.data());
    std::memcpy(p, &v, sizeof v);
    for (size_t b = sizeof v; b < o.size; ++b) p[b] = byte_of(v, b);
    Sge s = pub.mr->sge(0, o.size);
    SendWr wr;
    wr.wr_id = v;
    wr.opcode = WrOpcode::send;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    wr.ah = ah->get();
    wr.remote_qpn = 0xffffff;
    wr.remote_qkey = kQkey;
    UROCE_TRY(pub.qp->post_send(wr));
    Wc wc;
    auto n = pub.cq->poll_for(std::span<Wc>(&wc, 1), std::chrono::milliseconds(1000));
    if (!n.ok()) return n.status();
    if (*n != 1 || wc.status != WcStatus::success) return err::from_errno(EIO, "the send did not complete");
    return {};
  };
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  for (uint64_t v = 0; v < o.count && st.ok(); ++v) {
    st = publish(v);
    if (o.interval_us) {
      const auto until = t0 + std::chrono::microseconds(o.interval_us * (v + 1));
      while (std::chrono::steady_clock::now() < until) {
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int k = 0; k < 3 && st.ok(); ++k) st = publish(kEnd);
  for (auto& t : threads) t.join();
  if (!st.ok()) {
    std::fprintf(stderr, "uroce pubsub: publishing: %s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("published %llu versions in %.3f s (%.0f/s)\n\n", static_cast<unsigned long long>(o.count), secs,
              double(o.count) / std::max(secs, 1e-9));
  std::printf("%-12s %-16s %10s %10s %10s %10s %10s\n", "subscriber", "address", "received", "lost", "dup", "reordered",
              "corrupted");
  bool clean = true;
  for (uint32_t i = 0; i < o.subscribers; ++i) {
    const Tally& t = tally[i];
    std::printf("%-12u %-16s %10llu %10llu %10llu %10llu %10llu%s%s\n", i,
                subs[i].ctx->local_endpoint().addr.to_string().c_str(), static_cast<unsigned long long>(t.received),
                static_cast<unsigned long long>(t.lost), static_cast<unsigned long long>(t.duplicates),
                static_cast<unsigned long long>(t.reordered), static_cast<unsigned long long>(t.corrupted),
                t.error.empty() ? "" : "  error: ", t.error.c_str());
    clean &= t.duplicates == 0 && t.corrupted == 0 && t.error.empty();
  }
  std::printf(
      "\nUD multicast is unreliable: lost versions are the ones a subscriber had no receive posted for\n"
      "(or the kernel dropped); a subscriber that needs every version asks the publisher again.\n");
  return clean ? 0 : 2;
}

}  // namespace
}  // namespace uroce::pubsub

namespace uroce::cli {

Command add_pubsub(CLI::App& root) {
  auto o = std::make_shared<pubsub::Options>();
  Command c;
  c.app = root.add_subcommand("pubsub",
                              "Seed 000's publish-subscribe over UD multicast: a publisher, N subscribers, "
                              "versions received and lost per subscriber");
  c.app->add_option("--subscribers", o->subscribers, "subscribers (each a device of its own)")->capture_default_str();
  c.app->add_option("--count", o->count, "versions published")->capture_default_str();
  c.app->add_option("--size", o->size, "record size in bytes (>= 8)")->capture_default_str();
  c.app->add_option("--group", o->group, "multicast group (IPv4)")->capture_default_str();
  c.app
      ->add_option("--addr-base", o->addr_base,
                   "first three bytes of the devices' addresses: publisher .10, subscribers .11 ...")
      ->capture_default_str();
  c.app->add_option("--interval-us", o->interval_us, "time between versions (0: as fast as the sends complete)")
      ->capture_default_str();
  c.app->add_option("--depth", o->depth, "receives each subscriber keeps posted (>= 2)")->capture_default_str();
  c.run = [o] { return pubsub::run(*o); };
  return c;
}

}  // namespace uroce::cli
