// HostRegistry across real processes (fork): unique slots, a shared secret,
// reclaiming dead owners' slots, published ports, network namespaces.  Every
// test uses its own temporary registry file.
#include "net/registry.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "net/proc_info.hpp"
#include "net/registry_layout.hpp"
#include "net/runtime_dir.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace {

using namespace std::chrono_literals;

const IpAddr kLo4 = *IpAddr::parse("127.0.0.1");
const IpAddr kLo6 = *IpAddr::parse("::1");

// A pipe for a child to report small values to the parent, bounded in time.
struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) == 0) r.reset(fds[0]), w.reset(fds[1]);
  }
  template <class T>
  void put(const T& v) {
    (void)!::write(w.get(), &v, sizeof v);
  }
  template <class T>
  bool get(T& v, int timeout_ms = 10000) {
    size_t got = 0;
    auto* p = reinterpret_cast<uint8_t*>(&v);
    while (got < sizeof v) {
      pollfd pf{r.get(), POLLIN, 0};
      if (::poll(&pf, 1, timeout_ms) != 1) return false;
      ssize_t n = ::read(r.get(), p + got, sizeof v - got);
      if (n <= 0) return false;
      got += size_t(n);
    }
    return true;
  }
  // In a child: blocks until the parent closes (or writes to) its end.
  void wait_closed() {
    w.reset();  // our own copy of the write end
    char c;
    (void)!::read(r.get(), &c, 1);
  }
};

// Runs fn in a forked child, whose exit status is fn's result.
pid_t spawn(const std::function<int()>& fn) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(fn());
  return pid;
}

// Exit status of a child, killing it if it outlives `limit`.
int reap(pid_t pid, std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(2ms);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The owner word of a slot as stored in the file (0: free).
uint64_t raw_owner(const std::string& path, uint32_t slot) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  void* m = ::mmap(nullptr, registry::kFileSize, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return ~uint64_t{0};
  uint64_t v = static_cast<registry::File*>(m)->slots[slot].owner.load();
  ::munmap(m, registry::kFileSize);
  return v;
}

class Registry : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    path_ = ::testing::TempDir() + "uroce-registry-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
    ::unlink(path_.c_str());
  }
  void TearDown() override { ::unlink(path_.c_str()); }

  std::shared_ptr<HostRegistry> open() {
    auto r = HostRegistry::open(path_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : nullptr;
  }
  std::string path_;
};

struct Report {
  uint32_t slot;
  uint8_t secret[16];
};

TEST_F(Registry, SlotsUniqueAndSecretSharedAcrossProcesses) {
  constexpr int kChildren = 8;
  Pipe start, out, done;
  std::vector<pid_t> kids;
  for (int i = 0; i < kChildren; ++i) {
    kids.push_back(spawn([&] {
      start.wait_closed();  // all open the new file at once
      Report rep{};
      auto r = HostRegistry::open(path_);
      if (r.ok()) {
        rep.slot = (*r)->slot();
        std::memcpy(rep.secret, (*r)->secret().data(), 16);
      }
      out.put(rep);
      done.wait_closed();
      return r.ok() ? 0 : 1;
    }));
  }
  start.w.reset();
  std::vector<Report> reps(kChildren);
  for (auto& rep : reps) ASSERT_TRUE(out.get(rep));
  auto me = open();
  ASSERT_TRUE(me);
  std::set<uint32_t> slots{me->slot()};
  for (auto& rep : reps) {
    EXPECT_GE(rep.slot, 1u);
    EXPECT_LE(rep.slot, 1023u);
    slots.insert(rep.slot);
    EXPECT_EQ(std::memcmp(rep.secret, me->secret().data(), 16), 0);
    EXPECT_TRUE(me->alive(rep.slot));
  }
  EXPECT_EQ(slots.size(), size_t(kChildren + 1));
  EXPECT_FALSE(std::all_of(me->secret().begin(), me->secret().end(), [](uint8_t b) { return b == 0; }));

  done.w.reset();
  for (pid_t k : kids) EXPECT_EQ(reap(k), 0);
  for (auto& rep : reps) {
    EXPECT_FALSE(me->alive(rep.slot)) << rep.slot;
    EXPECT_EQ(raw_owner(path_, rep.slot), 0u) << rep.slot;  // released by the destructor
  }

  struct stat st;
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(Registry, DifferentFilesHaveDifferentSecrets) {
  auto a = open();
  std::string other = path_ + ".other";
  ::unlink(other.c_str());
  auto b = HostRegistry::open(other);
  ::unlink(other.c_str());
  ASSERT_TRUE(a && b.ok());
  EXPECT_FALSE(std::equal(a->secret().begin(), a->secret().end(), (*b)->secret().begin()));
}

TEST_F(Registry, DeadProcessSlotIsReclaimedLiveOneIsNot) {
  Pipe out, hold;
  pid_t live = spawn([&] {
    auto r = HostRegistry::open(path_);
    out.put(r.ok() ? (*r)->slot() : 0u);
    hold.wait_closed();
    return 0;
  });
  uint32_t live_slot = 0, dead_slot = 0;
  ASSERT_TRUE(out.get(live_slot));
  pid_t dead = spawn([&] {
    auto r = HostRegistry::open(path_);
    out.put(r.ok() ? (*r)->slot() : 0u);
    ::pause();  // until SIGKILL: never releases
    return 0;
  });
  ASSERT_TRUE(out.get(dead_slot));
  ASSERT_NE(live_slot, 0u);
  ASSERT_NE(dead_slot, 0u);
  ::kill(dead, SIGKILL);
  siginfo_t si{};
  ASSERT_EQ(::waitid(P_PID, id_t(dead), &si, WEXITED | WNOWAIT), 0);  // a zombie now

  // A zombie counts as dead even before it is reaped.
  EXPECT_NE(raw_owner(path_, dead_slot), 0u);  // it never released its slot
  auto probe = open();
  ASSERT_TRUE(probe);
  EXPECT_EQ(probe->slot(), dead_slot);  // the lowest free-or-dead slot
  EXPECT_NE(probe->slot(), live_slot);
  EXPECT_TRUE(probe->alive(live_slot));
  EXPECT_EQ(reap(dead), 128 + SIGKILL);
  hold.w.reset();
  EXPECT_EQ(reap(live), 0);
}

TEST(ProcInfo, StateAndStartTime) {
  auto self = proc_stat(0);
  ASSERT_TRUE(self);
  EXPECT_EQ(self->state, 'R');
  EXPECT_GT(self->start, 0u);
  EXPECT_EQ(proc_stat(::getpid())->start, self->start);
  pid_t kid = spawn([] { return 0; });
  siginfo_t si{};
  ASSERT_EQ(::waitid(P_PID, id_t(kid), &si, WEXITED | WNOWAIT), 0);
  auto zombie = proc_stat(kid);
  ASSERT_TRUE(zombie);
  EXPECT_EQ(zombie->state, 'Z');
  EXPECT_GE(zombie->start, self->start);
  EXPECT_EQ(reap(kid), 0);
  EXPECT_FALSE(proc_stat(kid));
  EXPECT_NE(ns_inode("net"), 0u);
  EXPECT_NE(ns_inode("net"), ns_inode("pid"));
}

TEST_F(Registry, ReusedPidWithOtherStartTimeIsDead) {
  auto first = open();  // creates the file, takes slot 1
  ASSERT_TRUE(first);
  ASSERT_EQ(first->slot(), 1u);
  // Forge two owners with our pid: slot 2 with another start time (the pid
  // was reused since), slot 3 with ours (looks alive).
  UniqueFd fd(::open(path_.c_str(), O_RDWR | O_CLOEXEC));
  void* m = ::mmap(nullptr, registry::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* file = static_cast<registry::File*>(m);
  struct stat ns;
  ASSERT_EQ(::stat("/proc/self/ns/pid", &ns), 0);
  const uint64_t start = proc_stat(0)->start;
  file->slots[2].owner = registry::owner_word(uint32_t(::getpid()), start + 1);
  file->slots[2].pidns = ns.st_ino;
  file->slots[3].owner = registry::owner_word(uint32_t(::getpid()), start);
  file->slots[3].pidns = ns.st_ino;
  // A pid of another pid namespace cannot be judged: taken as alive.
  file->slots[4].owner = registry::owner_word(999999, 1);
  file->slots[4].pidns = ns.st_ino + 1;

  EXPECT_FALSE(first->alive(2));
  EXPECT_TRUE(first->alive(3));
  EXPECT_TRUE(first->alive(4));
  auto second = open();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->slot(), 2u);
  auto third = open();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->slot(), 5u);
  ::munmap(m, registry::kFileSize);
}

TEST_F(Registry, PublishAndLookupInOneProcess) {
  auto a = open(), b = open();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(b->lookup_port(a->slot(), kLo4));
  ASSERT_TRUE(a->publish(kLo4, 50000).ok());
  EXPECT_EQ(b->lookup_port(a->slot(), kLo4), 50000);
  ASSERT_TRUE(a->publish(kLo4, 50001).ok());  // replaces
  EXPECT_EQ(b->lookup_port(a->slot(), kLo4), 50001);
  EXPECT_FALSE(b->lookup_port(a->slot(), kLo6));
  EXPECT_FALSE(b->lookup_port(b->slot(), kLo4));
  EXPECT_FALSE(b->lookup_port(0, kLo4));
  EXPECT_FALSE(b->lookup_port(1024, kLo4));

  EXPECT_EQ(a->unpublish(kLo4, 4791).code(), ENOENT);
  EXPECT_EQ(a->publish(kLo4, 0).code(), EINVAL);
  ASSERT_TRUE(a->unpublish(kLo4, 50001).ok());
  EXPECT_FALSE(b->lookup_port(a->slot(), kLo4));

  for (uint32_t i = 0; i < HostRegistry::kMaxBindings; ++i)
    ASSERT_TRUE(a->publish(IpAddr::from_v4(0x0a000001 + i), uint16_t(1000 + i)).ok());
  EXPECT_EQ(a->publish(IpAddr::from_v4(0x0a0000ff), 999).code(), ENOSPC);
  EXPECT_EQ(b->lookup_port(a->slot(), IpAddr::from_v4(0x0a000003)), 1002);

  const uint32_t gone = a->slot();
  a.reset();  // release withdraws everything
  EXPECT_FALSE(b->alive(gone));
  EXPECT_FALSE(b->lookup_port(gone, IpAddr::from_v4(0x0a000003)));
}

TEST_F(Registry, PublishLookupAcrossProcesses) {
  Pipe out, cmd;
  pid_t kid = spawn([&] {
    auto r = HostRegistry::open(path_);
    if (!r.ok()) return 1;
    auto& reg = **r;
    if (!reg.publish(kLo4, 5555).ok() || !reg.publish(kLo6, 6666).ok() || !reg.publish(IpAddr::from_v4(0), 7777).ok())
      return 2;
    out.put(reg.slot());
    char c;
    if (::read(cmd.r.get(), &c, 1) != 1) return 3;
    if (!reg.unpublish(kLo4, 5555).ok()) return 4;
    out.put(reg.slot());
    cmd.wait_closed();
    return 0;
  });
  auto me = open();
  ASSERT_TRUE(me);
  uint32_t slot = 0;
  ASSERT_TRUE(out.get(slot));
  EXPECT_EQ(me->lookup_port(slot, kLo4), 5555);
  EXPECT_EQ(me->lookup_port(slot, kLo6), 6666);
  EXPECT_EQ(me->lookup_port(slot, *IpAddr::parse("127.0.0.2")), 7777);  // via 0.0.0.0
  EXPECT_FALSE(me->lookup_port(slot, *IpAddr::parse("::2")));
  cmd.put('u');
  ASSERT_TRUE(out.get(slot));
  EXPECT_EQ(me->lookup_port(slot, kLo4), 7777);
  cmd.w.reset();
  EXPECT_EQ(reap(kid), 0);
  EXPECT_FALSE(me->lookup_port(slot, kLo6));

  // A killed process's bindings vanish with it, though nobody cleaned up.
  pid_t doomed = spawn([&] {
    auto r = HostRegistry::open(path_);
    if (!r.ok() || !(*r)->publish(kLo4, 4444).ok()) return 1;
    out.put((*r)->slot());
    ::pause();
    return 0;
  });
  ASSERT_TRUE(out.get(slot));
  EXPECT_EQ(me->lookup_port(slot, kLo4), 4444);
  ::kill(doomed, SIGKILL);
  EXPECT_EQ(reap(doomed), 128 + SIGKILL);
  EXPECT_FALSE(me->lookup_port(slot, kLo4));
}

TEST_F(Registry, NetworkNamespacesAreSeparate) {
  if (::geteuid() != 0) GTEST_SKIP() << "unshare(CLONE_NEWNET) needs root";
  auto me = open();
  ASSERT_TRUE(me);
  ASSERT_TRUE(me->publish(kLo4, 4000).ok());
  struct Seen {
    uint32_t slot;
    uint16_t own, parents;
  };
  auto run_child = [&](bool new_netns, Seen& seen, Pipe& hold) -> pid_t {
    Pipe out;
    pid_t kid = spawn([&] {
      if (new_netns && ::unshare(CLONE_NEWNET) != 0) return 77;
      auto r = HostRegistry::open(path_);
      if (!r.ok() || !(*r)->publish(kLo4, 5000).ok()) return 1;
      Seen s{(*r)->slot(), (*r)->lookup_port((*r)->slot(), kLo4).value_or(0),
             (*r)->lookup_port(me->slot(), kLo4).value_or(0)};
      out.put(s);
      hold.wait_closed();
      return 0;
    });
    EXPECT_TRUE(out.get(seen));
    return kid;
  };
  Pipe hold;
  Seen inside{}, same{};
  pid_t k1 = run_child(true, inside, hold);
  pid_t k2 = run_child(false, same, hold);
  EXPECT_EQ(inside.own, 5000);   // visible within its own namespace
  EXPECT_EQ(inside.parents, 0);  // ours is not visible there
  EXPECT_TRUE(me->alive(inside.slot));
  EXPECT_FALSE(me->lookup_port(inside.slot, kLo4));  // nor its binding here
  EXPECT_EQ(same.parents, 4000);                     // control: same namespace sees each other
  EXPECT_EQ(me->lookup_port(same.slot, kLo4), 5000);
  hold.w.reset();
  EXPECT_EQ(reap(k1), 0);
  EXPECT_EQ(reap(k2), 0);
}

// A stress smoke test: the window for a torn read is a few nanoseconds, so
// this rarely catches a broken seqlock; BindingBeingWrittenIsInvisible
// checks the reader's side deterministically.
TEST_F(Registry, ReadersNeverSeeTornBindings) {
  auto writer = open(), reader = open();
  ASSERT_TRUE(writer && reader);
  const IpAddr a1 = kLo4, a2 = *IpAddr::parse("127.0.0.2");
  std::atomic<bool> stop{false};
  std::thread w([&] {
    while (!stop) {  // the same binding entry alternates between two values
      (void)writer->publish(a1, 1111);
      (void)writer->unpublish(a1, 1111);
      (void)writer->publish(a2, 2222);
      (void)writer->unpublish(a2, 2222);
    }
  });
  int bad = 0, seen1 = 0, seen2 = 0;
  auto until = std::chrono::steady_clock::now() + 300ms;
  while (std::chrono::steady_clock::now() < until) {
    auto p1 = reader->lookup_port(writer->slot(), a1);
    auto p2 = reader->lookup_port(writer->slot(), a2);
    if (p1) (*p1 == 1111 ? seen1 : bad)++;
    if (p2) (*p2 == 2222 ? seen2 : bad)++;
    // Never published; an entry half-way from (::, 0) to (a1, 1111) would
    // look like a binding to the IPv6 wildcard.
    if (reader->lookup_port(writer->slot(), kLo6)) bad++;
  }
  stop = true;
  w.join();
  EXPECT_EQ(bad, 0);
  EXPECT_GT(seen1 + seen2, 0);
}

TEST_F(Registry, BindingBeingWrittenIsInvisible) {
  auto a = open(), b = open();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->publish(kLo4, 1234).ok());
  UniqueFd fd(::open(path_.c_str(), O_RDWR | O_CLOEXEC));
  void* m = ::mmap(nullptr, registry::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  registry::Binding* entry = nullptr;
  for (auto& e : static_cast<registry::File*>(m)->slots[a->slot()].bindings)
    if (e.port == 1234) entry = &e;
  ASSERT_NE(entry, nullptr);
  ASSERT_EQ(entry->seq % 2, 0u);
  entry->seq += 1;  // as if its writer were between the two seq updates
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(b->lookup_port(a->slot(), kLo4));  // gives up, does not hang
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  entry->seq += 1;
  EXPECT_EQ(b->lookup_port(a->slot(), kLo4), 1234);
  entry->seq += 1;  // a writer that died mid-update: the next write repairs it
  ASSERT_TRUE(a->publish(kLo4, 1235).ok());
  EXPECT_EQ(entry->seq % 2, 0u);
  EXPECT_EQ(b->lookup_port(a->slot(), kLo4), 1235);
  ::munmap(m, registry::kFileSize);
}

TEST_F(Registry, FileMustBeOursAndPrivate) {
  UniqueFd f(::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  ASSERT_EQ(::fchmod(f.get(), 0644), 0);
  auto r = HostRegistry::open(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EACCES);
  EXPECT_NE(r.status().message().find("mode 0644"), std::string_view::npos) << r.status().message();
  ASSERT_EQ(::fchmod(f.get(), 0600), 0);
  ASSERT_EQ(::ftruncate(f.get(), 100), 0);  // not a registry
  EXPECT_EQ(HostRegistry::open(path_).status().code(), EPROTO);

  std::string link = path_ + ".link";
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(path_.c_str(), link.c_str()), 0);
  EXPECT_EQ(HostRegistry::open(link).status().code(), ELOOP);
  ::unlink(link.c_str());
  if (::geteuid() == 0) {
    ASSERT_EQ(::fchown(f.get(), 4242, 4242), 0);
    ASSERT_EQ(::ftruncate(f.get(), 0), 0);
    EXPECT_EQ(HostRegistry::open(path_).status().code(), EACCES);
  }
}

TEST_F(Registry, InstanceIsPerProcess) {
  ::setenv("UROCE_REGISTRY", path_.c_str(), 1);
  EXPECT_EQ(HostRegistry::default_path().value(), path_);
  auto a = HostRegistry::instance(), b = HostRegistry::instance();
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  EXPECT_EQ(a->get(), b->get());
  EXPECT_NE((*a)->slot(), 0u);
  Pipe out;
  pid_t kid = spawn([&] {
    auto r = HostRegistry::instance();  // a new one for the child
    out.put(r.ok() && r->get() != a->get() ? (*r)->slot() : 0u);
    std::exit(0);  // the exit handler releases the child's slot (_exit would not)
    return 0;
  });
  uint32_t kid_slot = 0;
  ASSERT_TRUE(out.get(kid_slot));
  EXPECT_EQ(reap(kid), 0);
  EXPECT_NE(kid_slot, 0u);
  EXPECT_NE(kid_slot, (*a)->slot());
  EXPECT_FALSE((*a)->alive(kid_slot));
  EXPECT_EQ(raw_owner(path_, kid_slot), 0u);
  EXPECT_TRUE((*a)->alive((*a)->slot()));  // the parent's slot survived the child's exit
  ::unsetenv("UROCE_REGISTRY");
  EXPECT_EQ(HostRegistry::default_path().value(), runtime_dir().value() + "/registry");
}

}  // namespace
}  // namespace uroce::net
