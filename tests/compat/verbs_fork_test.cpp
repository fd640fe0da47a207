// fork() (issue 18 item 3): a NIC lives in the process that opened it.  A
// child that exits, with or without exec of a program that opens uroce
// itself, leaves the parent's NIC, registry slot, files and connections
// intact; a child that opens the device gets a NIC of its own and runs
// beside its parent.  Each test uses a runtime directory of its own, so the
// files compared are only this test's.
#include <dirent.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "support/fork_guard.hpp"
#include "verbs_fixture.hpp"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

namespace compat_test {
namespace {

// (name -> inode) of the files in `dir`.
std::map<std::string, ino_t> files_in(const std::string& dir) {
  std::map<std::string, ino_t> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      struct stat st {};
      if (::stat((dir + "/" + e->d_name).c_str(), &st) == 0) out[e->d_name] = st.st_ino;
    }
    closedir(d);
  }
  return out;
}

// The descriptors open in this process.
std::vector<int> open_fds() {
  std::vector<int> out;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(std::atoi(e->d_name));
    closedir(d);
  }
  return out;
}

const pid_t g_test_pid = ::getpid();

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// A child of a multi-threaded fork that exit()s still holds what its
// parent's threads held, with no thread left to hold it: LeakSanitizer
// would call that the child's leak.  It checks the test process only.
extern "C" int __lsan_is_turned_off() { return ::getpid() != g_test_pid; }
#endif

namespace {

// The registry slot a QP number carries (transport: slot << 14 | index).
uint32_t slot_of(uint32_t qpn) { return qpn >> 14; }

}  // namespace

// The runtime directory of this test process (the registry is opened once
// per process, so the tests of one process share it), removed when the
// process that made it exits.
const std::string& runtime_dir() {
  static const pid_t maker = ::getpid();
  static const std::string& dir = *[] {
    char tmpl[] = "/tmp/uroce-fork-test-XXXXXX";
    const char* d = mkdtemp(tmpl);
    auto* s = new std::string(d ? d : "");  // outlives the exit handler below
    std::atexit([] {
      if (::getpid() == maker) std::system(("rm -rf '" + runtime_dir() + "'").c_str());
    });
    return s;
  }();
  return dir;
}

class Fork : public Verbs {
 protected:
  void SetUp() override {
    dir_ = runtime_dir();
    ASSERT_FALSE(dir_.empty());
    ::setenv("UROCE_RUNTIME_DIR", dir_.c_str(), 1);  // before the first open
    ::unsetenv("UROCE_REGISTRY");
    fds_before_ = open_fds();  // the test harness's and sanitizers' own
    Verbs::SetUp();
  }

  // A connected RC pair in this process.
  void pair(ibv_cq*& ca, ibv_cq*& cb, ibv_qp*& a, ibv_qp*& b) {
    ca = cq();
    cb = cq();
    a = qp(IBV_QPT_RC, ca, ca);
    b = qp(IBV_QPT_RC, cb, cb);
    connect(a, b->qp_num);
    connect(b, a->qp_num);
  }

  // In a forked child: everything the parent had stays the parent's; the
  // child opens the device anew and makes a connected pair of its own.
  void start_over_in_child(ibv_cq*& cc, ibv_cq*& cd, ibv_qp*& c, ibv_qp*& d) {
    qps_.clear();
    cqs_.clear();
    mr_ = nullptr;
    pd_ = nullptr;
    ctx_ = nullptr;
    Verbs::SetUp();
    pair(cc, cd, c, d);
  }

  // `n` SENDs a -> b, each of its own bytes, checked at the receiver.
  void traffic(ibv_qp* a, ibv_qp* b, ibv_cq* ca, ibv_cq* cb, int n, int seed) {
    for (int i = 0; i < n && !HasFatalFailure(); ++i) send_checked(a, ca, b, cb, 2000, seed * 1000 + i);
  }

  std::string dir_;
  std::vector<int> fds_before_;
};

// 100 children exit while the parent has live connections: half return
// from their function and exit() (running the exit handlers and static
// destructors they inherited), half exec a program that opens uroce
// itself.  The parent's traffic runs on byte-exact, it keeps its registry
// slot, and its files are the same files.
TEST_F(Fork, ChildrenThatExitLeaveTheParentIntact) {
  ibv_cq *ca, *cb;
  ibv_qp *a, *b;
  pair(ca, cb, a, b);
  traffic(a, b, ca, cb, 5, 0);
  const auto before = files_in(dir_);
  ASSERT_FALSE(before.empty()) << "the registry and the NIC's files live in " << dir_;
  const uint32_t slot = slot_of(a->qp_num);
#if defined(__SANITIZE_THREAD__)
  constexpr int kChildren = 10;  // a fork costs about a second under ThreadSanitizer
#else
  constexpr int kChildren = 100;
#endif
  for (int child = 0; child < kChildren; ++child) {
    SCOPED_TRACE(child);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (child % 2) {
        const char* argv[] = {UROCE_OPEN_DEVICE_HELPER, nullptr};
        ::execv(argv[0], const_cast<char**>(argv));
        _exit(127);
      }
      std::exit(0);  // exit handlers and static destructors run in the child
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    traffic(a, b, ca, cb, 2, child + 1);
    if (HasFatalFailure()) return;
  }
  ibv_qp* later = qp(IBV_QPT_RC, ca, ca);
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(slot_of(later->qp_num), slot) << "the parent keeps its registry slot";
  const auto after = files_in(dir_);
  for (const auto& [name, ino] : before) {
    auto it = after.find(name);
    ASSERT_NE(it, after.end()) << name << " is gone";
    EXPECT_EQ(it->second, ino) << name << " was replaced";
  }
  traffic(a, b, ca, cb, 5, 200);
}

// A forked child that opens the device gets a NIC of its own and runs
// 1,000 byte-checked ping-pongs of its own while the parent runs 1,000 of
// its own: neither takes the other's packets.
TEST_F(Fork, ChildWithADeviceOfItsOwnRunsBesideTheParent) {
  UROCE_SKIP_WORKING_CHILD_OF_THREADED_FORK();
  ibv_cq *ca, *cb;
  ibv_qp *a, *b;
  pair(ca, cb, a, b);
  traffic(a, b, ca, cb, 3, 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ibv_cq *cc, *cd;
    ibv_qp *c, *d;
    start_over_in_child(cc, cd, c, d);
    traffic(c, d, cc, cd, 1000, 7);
    _exit(HasFailure() ? 1 : 0);
  }
  traffic(a, b, ca, cb, 1000, 3);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  traffic(a, b, ca, cb, 3, 9);
}

namespace {

// Whether this kernel lets us watch for unmapping (userfaultfd with its
// UNMAP event; not under Docker's default seccomp profile, say).
bool unmap_events_available() {
  int fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0 && errno == EINVAL) fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0) return false;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMAP;
  const bool ok = ::ioctl(fd, UFFDIO_API, &api) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// A forked child's regions are watched for unmapping as its parent's are
// (the parent's userfaultfd acts on the parent's memory, and its thread is
// not in the child): a region the child unmaps, with new memory mapped at
// its address, is gone for a peer's WRITE, which never lands there.
TEST_F(Fork, AChildsUnmappedRegionIsGoneForItsPeers) {
  UROCE_SKIP_WORKING_CHILD_OF_THREADED_FORK();
  if (!unmap_events_available()) GTEST_SKIP() << "no userfaultfd here: unmapped regions are only fault-guarded";
  ibv_cq *ca, *cb;
  ibv_qp *a, *b;
  pair(ca, cb, a, b);
  traffic(a, b, ca, cb, 1, 0);  // the parent's region is watched: its watch runs
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ibv_cq *cc, *cd;
    ibv_qp *c, *d;
    start_over_in_child(cc, cd, c, d);
    // A region goes away and new memory takes its address (another thread
    // may take the address first: then again, with a new region).
    constexpr size_t kLen = 1 << 16;
    ibv_mr* gone = nullptr;
    uint8_t* now = nullptr;
    for (int attempt = 0; attempt < 20 && !now; ++attempt) {
      void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(m, MAP_FAILED);
      std::memset(m, 1, kLen);
      gone = ibv_reg_mr(pd_, m, kLen, kAllAccess);
      ASSERT_NE(gone, nullptr) << std::strerror(errno);
      ASSERT_EQ(::munmap(m, kLen), 0);
      void* again = ::mmap(m, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (again == m) {
        now = static_cast<uint8_t*>(again);
        break;
      }
      if (again != MAP_FAILED) ::munmap(again, kLen);
      EXPECT_EQ(ibv_dereg_mr(gone), 0);
    }
    ASSERT_NE(now, nullptr) << "the address was taken each time";
    std::memset(now, 0xaa, kLen);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the watch's thread marks it at once
    ibv_sge s = sge(0, 512);
    ibv_send_wr wr{};
    wr.wr_id = 5;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = uintptr_t(now) + 64;
    wr.wr.rdma.rkey = gone->rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(c, &wr, &bad), 0);
    auto wc = poll(cc, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc[0].status);
    EXPECT_TRUE(std::all_of(now, now + kLen, [](uint8_t v) { return v == 0xaa; })) << "the WRITE landed";
    EXPECT_EQ(ibv_dereg_mr(gone), 0);
    ::munmap(now, kLen);
    std::fflush(stdout);
    _exit(HasFailure() ? 1 : 0);
  }
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 300 && !ended; ++i) {  // 30 s
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(ended) << "the child did not end in 30 s: killed";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  traffic(a, b, ca, cb, 3, 9);
}

// Every descriptor uroce opens (sockets, eventfds, epoll, userfaultfd,
// shared files, completion channels) is close-on-exec: an exec'd program
// inherits none of the NIC.
TEST_F(Fork, EveryDescriptorIsCloseOnExec) {
  // SetUp opened the device already; what was not open before is uroce's.
  // Open more: a channel, a second context, QPs.
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c = cq(16, ch);
  ibv_cq *ca, *cb;
  ibv_qp *a, *b;
  pair(ca, cb, a, b);
  traffic(a, b, ca, cb, 2, 1);
  ibv_context* other = ibv_open_device(list_[0]);
  ASSERT_NE(other, nullptr);
  int checked = 0;
  for (int fd : open_fds()) {
    if (std::find(fds_before_.begin(), fds_before_.end(), fd) != fds_before_.end()) continue;
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0) continue;  // the directory stream's own descriptor, closed since
    char path[64], target[256] = {};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    (void)!readlink(path, target, sizeof target - 1);
    EXPECT_TRUE(flags & FD_CLOEXEC) << "fd " << fd << " -> " << target;
    ++checked;
  }
  EXPECT_GE(checked, 5) << "socket, eventfds, epoll, channel, registry";
  EXPECT_EQ(ibv_close_device(other), 0);
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  for (ibv_cq* q : cqs_) ASSERT_EQ(ibv_destroy_cq(q), 0);
  cqs_.clear();
  (void)c;
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

}  // namespace compat_test
