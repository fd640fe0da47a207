// Counters published for `uroce stat` (uroce/stats.hpp), and fault
// injection through DeviceInfo::faults.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

// A private stats directory for this test process.
struct StatsDir {
  std::string path;
  StatsDir() {
    char tmpl[] = "/tmp/uroce-stats-test-XXXXXX";
    path = ::mkdtemp(tmpl);
    ::setenv("UROCE_STATS_DIR", path.c_str(), 1);
  }
  ~StatsDir() {
    ::unsetenv("UROCE_STATS_DIR");
    std::filesystem::remove_all(path);
  }
  size_t files() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) n += e.is_regular_file();
    return n;
  }
};

uint64_t value(const PublishedStats& s, std::string_view name) {
  for (const Counter& c : s.counters)
    if (c.name == name) return c.value;
  return ~0ull;
}

TEST(Stats, EveryOpenDeviceIsPublishedAndRemovedWhenClosed) {
  StatsDir dir;
  {
    Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
    const std::string path = ctx.publish_counters();
    EXPECT_EQ(path.rfind(dir.path + "/uroce-", 0), 0u) << path;
    EXPECT_NE(path.find("-stats-" + std::to_string(::getpid()) + "-api-127.0.0.1"), std::string::npos) << path;
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << "others must not read our counters";
    auto all = must(published_stats(::getpid()), "published_stats");
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].pid, ::getpid());
    EXPECT_EQ(all[0].device, "api-127.0.0.1");
    EXPECT_EQ(all[0].endpoint, ctx.local_endpoint().to_string());
    EXPECT_TRUE(all[0].faults.empty());
    EXPECT_GT(all[0].updated_unix_ns, 0u);
    // Same names, in the same order, as Context::counters().
    const auto mine = ctx.counters();
    ASSERT_EQ(all[0].counters.size(), mine.size());
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(all[0].counters[i].name, mine[i].name);
  }
  EXPECT_EQ(dir.files(), 0u) << "closing the device removes its file";
  EXPECT_TRUE(must(published_stats(), "published_stats").empty());
}

TEST(Stats, CountersReachTheFileWithinATenthOfASecond) {
  StatsDir dir;
  Pair p;  // two devices, connected RC QPs
  std::vector<std::byte> src(256 << 10);
  fill(src, 3);
  auto smr = must(p.a.pd->reg_mr(src.data(), src.size(), kAllAccess), "reg_mr");
  for (int i = 0; i < 8; ++i) {
    Sge sge = smr.sge(0, uint32_t(src.size()));
    must(p.a.qp->post_send({.wr_id = uint64_t(i),
                            .opcode = WrOpcode::rdma_write,
                            .send_flags = send_flags::kSignaled,
                            .sg_list = {&sge, 1},
                            .remote_addr = p.b.mr->addr(),
                            .rkey = p.b.mr->rkey()}),
         "post_send");
    Wc wc;
    ASSERT_EQ(must(p.a.scq->poll_for({&wc, 1}, 5s), "poll"), 1);
    ASSERT_EQ(wc.status, WcStatus::success);
  }
  const uint64_t want_tx = must(p.a.ctx->counter("tx_packets"), "counter");
  // Nobody asks for a publication: the NIC writes it by itself.
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    std::this_thread::sleep_for(10ms);
    for (const auto& s : must(published_stats(::getpid()), "published_stats"))
      if (s.device == p.a.ctx->name() && value(s, "tx_packets") >= want_tx) seen = true;
  }
  EXPECT_TRUE(seen) << "the published tx_packets never reached " << want_tx;
}

TEST(Stats, FilesOfDeadProcessesAreRemoved) {
  StatsDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ctx = Context::open(local_device("127.0.0.1"));
    if (!ctx.ok()) _exit(1);
    (void)ctx->publish_counters();
    _exit(0);  // no destructors: the file stays behind, as after a crash
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(dir.files(), 1u);
  EXPECT_TRUE(must(published_stats(), "published_stats").empty());
  EXPECT_EQ(dir.files(), 0u) << "the dead process's file was not cleaned up";
}

TEST(Stats, PublishingCanBeTurnedOff) {
  StatsDir dir;
  ::setenv("UROCE_STATS", "0", 1);
  {
    Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
    EXPECT_EQ(ctx.publish_counters(), "");
    EXPECT_EQ(dir.files(), 0u);
  }
  ::unsetenv("UROCE_STATS");
}

TEST(Faults, DeviceInfoFaultsAreInEffectAndCounted) {
  PairOptions o;
  o.faults_a = must(parse_faults("seed=5,drop=0.1,dup=0.1"), "parse_faults");
  Pair p(o);
  ASSERT_TRUE(p.a.ctx->faults().has_value());
  EXPECT_EQ(*p.a.ctx->faults(), *o.faults_a);
  EXPECT_FALSE(p.b.ctx->faults().has_value());
  std::vector<std::byte> src(64 << 10);
  fill(src, 4);
  auto smr = must(p.a.pd->reg_mr(src.data(), src.size(), kAllAccess), "reg_mr");
  for (int i = 0; i < 20; ++i) {
    Sge sge = smr.sge(0, uint32_t(src.size()));
    must(p.a.qp->post_send({.wr_id = uint64_t(i),
                            .opcode = WrOpcode::rdma_write,
                            .send_flags = send_flags::kSignaled,
                            .sg_list = {&sge, 1},
                            .remote_addr = p.b.mr->addr(),
                            .rkey = p.b.mr->rkey()}),
         "post_send");
    Wc wc;
    ASSERT_EQ(must(p.a.scq->poll_for({&wc, 1}, 10s), "poll"), 1);
    ASSERT_EQ(wc.status, WcStatus::success) << to_string(wc.status);
  }
  EXPECT_EQ(std::memcmp(src.data(), p.b.mr->data(), src.size()), 0);
  EXPECT_GT(must(p.a.ctx->counter("fault_tx_dropped"), "counter"), 0u);
  EXPECT_GT(must(p.a.ctx->counter("fault_tx_duplicated"), "counter"), 0u);
  EXPECT_GT(must(p.a.ctx->counter("req_retransmits"), "counter"), 0u);
  EXPECT_EQ(must(p.b.ctx->counter("fault_tx_dropped"), "counter"), 0u);
}

// Every packet held back (up to 20 ms) in both directions, and nobody
// polling: the waiting thread sleeps in the completion channel, so held
// packets must be released by time through the NIC's own wait (none stranded).
TEST(Faults, DelayedPacketsAreNotStrandedWhileTheApplicationSleeps) {
  PairOptions o;
  o.channel = true;
  o.faults_a = must(parse_faults("seed=9,delay=1:20ms,dir=both"), "parse_faults");
  o.faults_b = must(parse_faults("seed=10,delay=1:20ms,dir=both"), "parse_faults");
  Pair p(o);
  std::vector<std::byte> src(40 << 10);
  fill(src, 5);
  auto smr = must(p.a.pd->reg_mr(src.data(), src.size(), kAllAccess), "reg_mr");
  for (int i = 0; i < 3; ++i) {
    must(p.a.scq->req_notify(), "req_notify");
    Sge sge = smr.sge(0, uint32_t(src.size()));
    must(p.a.qp->post_send({.wr_id = uint64_t(i),
                            .opcode = WrOpcode::rdma_write,
                            .send_flags = send_flags::kSignaled,
                            .sg_list = {&sge, 1},
                            .remote_addr = p.b.mr->addr(),
                            .rkey = p.b.mr->rkey()}),
         "post_send");
    const auto t0 = std::chrono::steady_clock::now();
    CompletionQueue* cq = must(p.a.channel->get_event(5000), "get_event (stranded packets?)");
    EXPECT_EQ(cq, &*p.a.scq);
    p.a.scq->ack_events(1);
    Wc wc;
    ASSERT_EQ(must(p.a.scq->poll({&wc, 1}), "poll"), 1);
    EXPECT_EQ(wc.status, WcStatus::success);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  }
  EXPECT_GT(must(p.a.ctx->counter("fault_tx_delayed"), "counter"), 0u);
  EXPECT_GT(must(p.a.ctx->counter("fault_rx_delayed"), "counter"), 0u);
  EXPECT_EQ(std::memcmp(src.data(), p.b.mr->data(), src.size()), 0);
}

TEST(Faults, BadSpecsAndConflictingOpensAreRefused) {
  EXPECT_EQ(parse_faults("drop=lots").status().code(), EINVAL);
  DeviceInfo d = local_device("127.0.0.1");
  d.udp_port = 0;
  Context plain = must(Context::open(d), "open");
  // A second open of the same device shares the NIC: it cannot have other
  // faults.
  DeviceInfo again = d;
  again.faults = must(parse_faults("drop=0.1"), "parse_faults");
  auto r = Context::open(again);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EBUSY) << r.status().to_string();
  again.faults.reset();  // no opinion: shares the NIC as it is
  EXPECT_TRUE(Context::open(again).ok());
  // UROCE_FAULTS decides for devices that do not say.
  ::setenv("UROCE_FAULTS", "drop=7", 1);
  DeviceInfo other = local_device("127.0.0.3");
  auto bad = Context::open(other);
  ::unsetenv("UROCE_FAULTS");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), EINVAL);
  EXPECT_NE(bad.status().to_string().find("UROCE_FAULTS"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace uroce::apitest
