// XRC across processes (issue 13): processes that open one file as their XRC
// domain share it, so an XRC_RECV QP of one delivers SENDs into an XRC SRQ
// of another, as ibv_xsrq_pingpong's clients do.  A forked child opens the
// device (a NIC of its own), the domain on the parent's file and an XRC SRQ;
// the parent's XRC_SEND QP sends to the child's SRQ through the parent's
// XRC_RECV QP.  What the child receives is checked byte for byte with the
// completion's fields; a message before any WQE waits (RNR) rather than
// failing; what cannot cross (RDMA, another domain) is refused at the sender.
//
// Each test forks before this process opens anything, so the child starts
// with one thread and no lock another thread held: GCC 12's ASan locks
// nothing around fork(), and a child forked while a progress thread was in
// its allocator waited for that lock forever (seen in CI; 2 of 200 children
// in a reproduction), and TSan ends a child of a multi-threaded fork that
// starts threads.  What fork() does to a process with a NIC open is
// verbs_fork_test's subject.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "verbs_xrc_fixture.hpp"

namespace compat_test {
namespace {

class XrcShared : public Xrc {
 protected:
  // Before any device is open: the domain's file and the pipes.  Each test
  // forks, then the parent calls set_up_on_file() and the child
  // become_child().
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(make_file());
    ASSERT_EQ(::pipe2(to_parent_, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(to_child_, O_CLOEXEC), 0);
  }
  // The child is remembered for TearDown to kill should the parent fail.
  // ctest runs each test in a process of its own, where this is the only
  // thread; after other tests, uroce's unmap watch (asleep) is there too.
  pid_t fork_child() {
    child_ = ::fork();
    return child_;
  }
  // The child's side: opens the device and the domain on `fd`, and makes
  // an XRC SRQ whose CQ has a completion channel.
  void become_child(int fd) {
    child_ = -1;
    file_ = -1;  // the parent's to close
    Verbs::SetUp();
    ibv_xrcd* x = open_xrcd(fd, O_CREAT);
    ASSERT_NE(x, nullptr) << std::strerror(errno);
    ch_ = ibv_create_comp_channel(ctx_);
    ASSERT_NE(ch_, nullptr);
    child_cq_ = ibv_create_cq(ctx_, 64, nullptr, ch_, 0);
    ASSERT_NE(child_cq_, nullptr);
    cqs_.push_back(child_cq_);
    child_srq_ = xrc_srq(x, child_cq_);
    ASSERT_NE(child_srq_, nullptr) << std::strerror(errno);
  }
  // The child's next completion, sleeping on the channel (bounded).
  ibv_wc child_wait() {
    ibv_wc wc{};
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < until) {
      if (ibv_poll_cq(child_cq_, 1, &wc) == 1) return wc;
      EXPECT_EQ(ibv_req_notify_cq(child_cq_, 0), 0);
      if (ibv_poll_cq(child_cq_, 1, &wc) == 1) return wc;
      pollfd p{ch_->fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) == 1) {
        ibv_cq* c = nullptr;
        void* cx = nullptr;
        EXPECT_EQ(ibv_get_cq_event(ch_, &c, &cx), 0);
        ibv_ack_cq_events(c, 1);
      }
    }
    ADD_FAILURE() << "no completion in 10 s";
    return wc;
  }
  void child_end() {
    for (ibv_srq* s : srqs_) EXPECT_EQ(ibv_destroy_srq(s), 0);
    srqs_.clear();
    for (ibv_cq* c : cqs_) EXPECT_EQ(ibv_destroy_cq(c), 0);
    cqs_.clear();
    EXPECT_EQ(ibv_destroy_comp_channel(ch_), 0);
    for (ibv_xrcd* x : xrcds_) EXPECT_EQ(ibv_close_xrcd(x), 0);
    xrcds_.clear();
    Verbs::TearDown();
    std::fflush(stdout);  // what failed, before _exit drops the buffer
    _exit(HasFailure() ? 1 : 0);
  }
  static void put_u32(int fd, uint32_t v) { ASSERT_EQ(::write(fd, &v, sizeof v), ssize_t(sizeof v)); }
  // Bounded: a process that never answers is a failure, not a hang.
  static uint32_t get_u32(int fd) {
    uint32_t v = 0;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 20000);
    EXPECT_EQ(ready, 1) << "the other process said nothing in 20 s";
    if (ready == 1) {
      EXPECT_EQ(::read(fd, &v, sizeof v), ssize_t(sizeof v));
    }
    return v;
  }
  bool child_ok(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 300; ++i) {  // 30 s
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        child_ = -1;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the child did not end in 30 s: killed";
    return false;
  }
  ibv_wc send_to(uint32_t srqn, ibv_wr_opcode opcode, size_t off, uint32_t len, uint32_t imm = 0) {
    ibv_sge g = sge(off, len);
    ibv_send_wr wr{};
    wr.wr_id = 77;
    wr.sg_list = &g;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.imm_data = htonl(imm);
    if (opcode == IBV_WR_RDMA_WRITE) {
      wr.wr.rdma.remote_addr = uintptr_t(buf_.data());
      wr.wr.rdma.rkey = mr_->rkey;
    }
    return post_one(wr, srqn);
  }

  // A child not reaped (the parent failed on the way) is killed.
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    for (int fd : {to_parent_[0], to_parent_[1], to_child_[0], to_child_[1]})
      if (fd >= 0) ::close(fd);
    Xrc::TearDown();
  }

  ibv_comp_channel* ch_ = nullptr;
  ibv_cq* child_cq_ = nullptr;
  ibv_srq* child_srq_ = nullptr;
  // The parent's and the child's ends of two pipes (closed by the fixture).
  int to_parent_[2] = {-1, -1}, to_child_[2] = {-1, -1};
  pid_t child_ = -1;
};

void fill(std::vector<uint8_t>& b, size_t off, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; ++i) b[off + i] = uint8_t(seed + i * 7);
}

TEST_F(XrcShared, SendsReachAnotherProcesssSrq) {
  const pid_t pid = fork_child();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    become_child(file_);
    const uint32_t parent_recv = get_u32(to_child_[0]), parent_send = get_u32(to_child_[0]);
    uint32_t n = 0;
    EXPECT_EQ(ibv_get_srq_num(child_srq_, &n), 0);
    put_u32(to_parent_[1], n);
    // The parent sends before we post: its message waits (RNR) until we do.
    EXPECT_EQ(get_u32(to_child_[0]), 1u);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(post_srq(child_srq_, 1, 0, 4096), 0);
    EXPECT_EQ(post_srq(child_srq_, 2, 8192, 4096), 0);
    EXPECT_EQ(post_srq(child_srq_, 3, 16384, 16), 0);
    std::vector<uint8_t> want(buf_.size(), 0);
    fill(want, 0, 3000, 11);
    fill(want, 8192, 100, 22);
    ibv_wc wc = child_wait();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 3000u);
    EXPECT_EQ(wc.qp_num, parent_recv) << "the XRC_RECV QP that received it";
    EXPECT_EQ(wc.src_qp, parent_send);
    EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0u);
    wc = child_wait();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.byte_len, 100u);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 0x12345678u);
    // Longer than the WQE: the error is ours (the sender was acknowledged).
    wc = child_wait();
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_TRUE(std::equal(want.begin(), want.begin() + 16384, buf_.begin())) << "bytes outside the messages moved";
    EXPECT_TRUE(std::all_of(buf_.begin() + 16384 + 16, buf_.end(), [](uint8_t b) { return b == 0; }));
    put_u32(to_parent_[1], 2);
    EXPECT_EQ(get_u32(to_child_[0]), 3u);  // the parent is done with our SRQ
    child_end();
  }
  ASSERT_NO_FATAL_FAILURE(set_up_on_file());
  put_u32(to_child_[1], recv_->qp_num);
  put_u32(to_child_[1], send_->qp_num);
  const uint32_t child_srqn = get_u32(to_parent_[0]);
  ASSERT_NE(child_srqn, 0u);
  ASSERT_NE(child_srqn, srqn_);
  fill(buf_, 0, 3000, 11);
  fill(buf_, 8192, 100, 22);
  put_u32(to_child_[1], 1);
  ibv_wc wc = send_to(child_srqn, IBV_WR_SEND, 0, 3000);  // 3 packets at MTU 1024
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  wc = send_to(child_srqn, IBV_WR_SEND_WITH_IMM, 8192, 100, 0x12345678);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  wc = send_to(child_srqn, IBV_WR_SEND, 0, 100);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(get_u32(to_parent_[0]), 2u);
  // Our own SRQ still takes messages through the same XRC_RECV QP.
  ASSERT_EQ(post_srq(srq_, 9, 65536, 64), 0);
  wc = send_to(srqn_, IBV_WR_SEND, 8192, 50);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  auto rc = poll(rcq_, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 9u);
  EXPECT_EQ(rc[0].byte_len, 50u);
  EXPECT_EQ(0, std::memcmp(buf_.data() + 65536, buf_.data() + 8192, 50));
  // RDMA cannot reach another process's PD through its SRQ.
  wc = send_to(child_srqn, IBV_WR_RDMA_WRITE, 0, 8);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wc.status);
  put_u32(to_child_[1], 3);
  EXPECT_TRUE(child_ok(pid));
}

// An SRQ of a process whose domain is another file is not ours to reach.
TEST_F(XrcShared, AnotherProcesssSrqOfAnotherDomainIsRefused) {
  const pid_t pid = fork_child();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char path[] = "/tmp/uroce-xrc-XXXXXX";
    const int other = mkstemp(path);
    ::unlink(path);
    become_child(other);
    EXPECT_EQ(post_srq(child_srq_, 1, 0, 4096), 0);
    uint32_t n = 0;
    EXPECT_EQ(ibv_get_srq_num(child_srq_, &n), 0);
    put_u32(to_parent_[1], n);
    EXPECT_EQ(get_u32(to_child_[0]), 1u);
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(child_cq_, 1, &wc), 0) << "nothing may arrive";
    EXPECT_TRUE(std::all_of(buf_.begin(), buf_.end(), [](uint8_t b) { return b == 0; }));
    ::close(other);
    child_end();
  }
  ASSERT_NO_FATAL_FAILURE(set_up_on_file());
  const uint32_t child_srqn = get_u32(to_parent_[0]);
  fill(buf_, 0, 64, 5);
  const ibv_wc wc = send_to(child_srqn, IBV_WR_SEND, 0, 64);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wc.status);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  put_u32(to_child_[1], 1);
  EXPECT_TRUE(child_ok(pid));
}

// The inbox of a process killed with its SRQ is removed by the next process
// that makes one, and the killed process's SRQ is refused, not waited for.
TEST_F(XrcShared, TheInboxOfAKilledProcessGoesAway) {
  char dir[] = "/tmp/uroce-xrc-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  auto inboxes = [&dir] {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(dir)) {
      while (dirent* e = ::readdir(d))
        if (std::strstr(e->d_name, "-xsrq-")) names.push_back(e->d_name);
      ::closedir(d);
    }
    return names;
  };
  const pid_t pid = fork_child();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ASSERT_EQ(::setenv("UROCE_SHM_DIR", dir, 1), 0);
    become_child(file_);
    uint32_t n = 0;
    EXPECT_EQ(ibv_get_srq_num(child_srq_, &n), 0);
    put_u32(to_parent_[1], n);
    std::this_thread::sleep_for(std::chrono::seconds(30));  // killed long before
    _exit(3);
  }
  ASSERT_NO_FATAL_FAILURE(set_up_on_file());  // its SRQ's inbox is elsewhere
  ASSERT_EQ(::setenv("UROCE_SHM_DIR", dir, 1), 0);
  const uint32_t child_srqn = get_u32(to_parent_[0]);
  const std::string child_inbox = "-xsrq-" + std::to_string(child_srqn) + ".ring";
  auto names = inboxes();
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(names[0].ends_with(child_inbox)) << names[0];
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  child_ = -1;
  ibv_srq* mine = xrc_srq(xrcd_, rcq_);
  ASSERT_NE(mine, nullptr);
  uint32_t my_srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(mine, &my_srqn), 0);
  names = inboxes();
  ASSERT_EQ(names.size(), 1u) << "the killed process's inbox is gone, ours is there";
  EXPECT_TRUE(names[0].ends_with("-xsrq-" + std::to_string(my_srqn) + ".ring")) << names[0];
  fill(buf_, 0, 64, 5);
  const ibv_wc wc = send_to(child_srqn, IBV_WR_SEND, 0, 64);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(ibv_destroy_srq(mine), 0);
  srqs_.erase(std::find(srqs_.begin(), srqs_.end(), mine));
  EXPECT_TRUE(inboxes().empty()) << "an SRQ's inbox goes with it";
  ::unsetenv("UROCE_SHM_DIR");
  EXPECT_EQ(::rmdir(dir), 0);
}

}  // namespace
}  // namespace compat_test
