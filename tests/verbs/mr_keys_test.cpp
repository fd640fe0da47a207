// Memory keys across processes: a process that takes over the registry slot
// of one that exited hands out other keys.  A file of its own: each child
// must build its MR table afresh, which a fork of a process that already
// has one (another test of the same binary) would not.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "fake_context.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"

namespace uroce::verbs {
namespace {

constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;

// Processes that hold the same registry slot one after the other (a server
// restarted) hand out other keys: a peer that learnt the old rkey cannot
// use it on the new process.  Each child registers one MR and reports its
// slot and keys.
TEST(MrKeys, DifferAcrossRestartsInOneRegistrySlot) {
  char dir[] = "/tmp/uroce-mrkeys-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string registry = std::string(dir) + "/registry";
  ::setenv("UROCE_REGISTRY", registry.c_str(), 1);
  struct Seen {
    uint32_t slot, lkey, rkey;
  };
  std::vector<Seen> runs;
  for (int run = 0; run < 8; ++run) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      auto ctx = open_fake_context();
      if (!ctx.ok()) ::_exit(2);
      auto pd = Pd::create(**ctx);
      static uint8_t buf[4096];
      auto mr = Mr::reg(**pd, uint64_t(uintptr_t(buf)), sizeof buf, uint64_t(uintptr_t(buf)), kAll);
      if (!mr.ok()) ::_exit(3);
      const Seen s{MrTable::instance().slot(), (*mr)->lkey(), (*mr)->rkey()};
      ::_exit(::write(fds[1], &s, sizeof s) == ssize_t(sizeof s) ? 0 : 4);
    }
    ::close(fds[1]);
    Seen s{};
    const bool got = ::read(fds[0], &s, sizeof s) == ssize_t(sizeof s);
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    ASSERT_TRUE(got);
    runs.push_back(s);
  }
  ::unsetenv("UROCE_REGISTRY");
  ::unlink(registry.c_str());
  ::rmdir(dir);
  std::set<uint32_t> rkeys, lkeys;
  for (const Seen& s : runs) {
    EXPECT_EQ(s.slot, runs[0].slot) << "each run should reclaim the slot its predecessor left";
    rkeys.insert(s.rkey);
    lkeys.insert(s.lkey);
  }
  // 65535 start indices x 32 generations: a repeat among 8 runs is ~1e-5.
  EXPECT_GE(rkeys.size(), 7u);
  EXPECT_GE(lkeys.size(), 7u);
}

}  // namespace
}  // namespace uroce::verbs
