// uroce is a guest in the application's process (issue 18): the threads it
// starts take none of the application's asynchronous signals.  A daemon
// that blocks a signal in its threads and reads it with signalfd or
// sigwait must get every one, even when uroce's threads were started while
// the signal was still unblocked (the default action of SIGUSR1 would kill
// the process if the kernel chose a uroce thread).
#include <dirent.h>
#include <sys/signalfd.h>

#include <fstream>

#include "verbs_fixture.hpp"

namespace compat_test {
namespace {

struct Thread {
  std::string name;
  uint64_t blocked = 0;  // SigBlk of /proc/self/task/<tid>/status
};

std::vector<Thread> threads() {
  std::vector<Thread> out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    Thread t;
    std::ifstream(dir + "/comm") >> t.name;
    std::ifstream st(dir + "/status");
    for (std::string line; std::getline(st, line);)
      if (line.rfind("SigBlk:", 0) == 0) t.blocked = std::stoull(line.substr(7), nullptr, 16);
    out.push_back(t);
  }
  closedir(d);
  return out;
}

bool has(uint64_t mask, int sig) { return mask >> (sig - 1) & 1; }

}  // namespace

class Signals : public Verbs {
 protected:
  // A connected RC pair in pd_; run() ping-pongs byte-checked SENDs on it.
  void SetUp() override {
    Verbs::SetUp();
    ca_ = cq();
    cb_ = cq();
    a_ = qp(IBV_QPT_RC, ca_, ca_);
    b_ = qp(IBV_QPT_RC, cb_, cb_);
    connect(a_, b_->qp_num);
    connect(b_, a_->qp_num);
  }

  // `n` SENDs a -> b, each of its own bytes, checked at the receiver.
  void traffic(int n) {
    for (int i = 0; i < n && !HasFatalFailure(); ++i) send_checked(a_, ca_, b_, cb_, 1000, i);
  }

  ibv_cq *ca_ = nullptr, *cb_ = nullptr;
  ibv_qp *a_ = nullptr, *b_ = nullptr;
};

// Every thread uroce started blocks every asynchronous signal and none of
// the synchronous ones (a fault there must still reach the fault guard).
TEST_F(Signals, UroceThreadsBlockAsynchronousSignalsOnly) {
  traffic(1);
  // A thread that has not run yet still has the mask glibc gives it while
  // it starts (every signal blocked): wait until each has run.
  std::vector<Thread> ts;
  for (auto until = Clock::now() + std::chrono::seconds(5); Clock::now() < until;) {
    ts = threads();
    bool starting = false;
    for (const Thread& t : ts) starting |= t.name.rfind("uroce-", 0) == 0 && has(t.blocked, SIGSEGV);
    if (!starting) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int uroce_threads = 0;
  for (const Thread& t : ts) {
    if (t.name.rfind("uroce-", 0) != 0) continue;
    ++uroce_threads;
    SCOPED_TRACE(t.name);
    for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGALRM, SIGPIPE, SIGIO, SIGRTMIN, SIGRTMAX})
      EXPECT_TRUE(has(t.blocked, sig)) << strsignal(sig);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) EXPECT_FALSE(has(t.blocked, sig)) << strsignal(sig);
  }
  EXPECT_GE(uroce_threads, 1) << "the progress thread runs";
}

// The daemon's pattern: uroce's threads start first (SIGUSR1 unblocked
// then), the application blocks SIGUSR1 afterwards and reads it with
// signalfd while one of its threads signals the process, one at a time,
// during traffic.  Every signal reaches the signalfd.
TEST_F(Signals, EverySignalReachesTheApplicationsSignalfd) {
  traffic(1);  // uroce's threads run
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, nullptr), 0);
  const int sfd = signalfd(-1, &usr1, SFD_CLOEXEC);
  ASSERT_GE(sfd, 0);
  constexpr int kSignals = 3000;
  std::atomic<int> taken{0};
  std::atomic<bool> stop{false};
  std::thread sender([&] {  // inherits the blocked SIGUSR1
    for (int i = 0; i < kSignals && !stop; ++i) {
      ::kill(::getpid(), SIGUSR1);
      while (taken.load() <= i && !stop) std::this_thread::yield();  // one pending at a time: none merges
    }
  });
  std::thread app([&] { traffic(300); });
  int got = 0;
  while (got < kSignals) {
    pollfd p{sfd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) break;
    signalfd_siginfo si{};
    ASSERT_EQ(::read(sfd, &si, sizeof si), ssize_t(sizeof si));
    ASSERT_EQ(si.ssi_signo, uint32_t(SIGUSR1));
    taken = ++got;
  }
  stop = true;
  sender.join();
  app.join();
  EXPECT_EQ(got, kSignals);
  ::close(sfd);
  ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr), 0);
}

// The same with sigwait (bounded: sigtimedwait).
TEST_F(Signals, EverySignalReachesTheApplicationsSigwait) {
  traffic(1);
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr2, nullptr), 0);
  constexpr int kSignals = 3000;
  std::atomic<int> taken{0};
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    for (int i = 0; i < kSignals && !stop; ++i) {
      ::kill(::getpid(), SIGUSR2);
      while (taken.load() <= i && !stop) std::this_thread::yield();
    }
  });
  std::thread app([&] { traffic(300); });
  int got = 0;
  const timespec five{5, 0};
  while (got < kSignals) {
    siginfo_t si{};
    if (sigtimedwait(&usr2, &si, &five) != SIGUSR2) break;
    taken = ++got;
  }
  stop = true;
  sender.join();
  app.join();
  EXPECT_EQ(got, kSignals);
  ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr), 0);
}

}  // namespace compat_test
