// Threads uroce starts inside the application's process (the progress
// thread, the CM service, the unmap watch) take none of its asynchronous
// signals, as rdma-core, which starts no thread, takes none: they are
// created with those signals blocked (a thread inherits its creator's mask),
// so a signal sent to the process (kill, SIGCHLD, timers, a daemon's
// signalfd or sigwait on a signal its own threads block) reaches one of the
// application's threads as it would without uroce.  The synchronous signals
// of a fault in the thread itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
// SIGSYS) stay unblocked: the kernel would kill the process instead of
// delivering a blocked one, and the fault guard (fault_guard.hpp) lives on
// SIGSEGV and SIGBUS.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace uroce {

// The signal mask of uroce's threads: every signal but the synchronous ones.
sigset_t quiet_signal_mask() noexcept;

// Whether the application has installed a handler for `sig` (neither SIG_DFL
// nor SIG_IGN), and, in *restarts, whether it asked for SA_RESTART: what
// decides if a wait it interrupts ends with EINTR.
bool signal_has_handler(int sig, bool* restarts = nullptr) noexcept;

// After a poll() standing in for a blocking read() was interrupted: whether
// the read would have been restarted.  A read() fails with EINTR when a
// handler installed without SA_RESTART runs, and is restarted otherwise;
// programs rely on both (qperf ends its tests with SIGALRM and expects
// EINTR; a SIGCHLD handler with SA_RESTART must not break a wait).  The
// delivered signal cannot be told apart, so: false if some handler lacks
// SA_RESTART.  Handlers of the synchronous fault signals (sanitizers
// install some) do not count: a fault cannot interrupt a sleep.
bool restart_after_signal() noexcept;

// Starts `f` on a std::thread named `name` (at most 15 characters, shown by
// ps and gdb) with quiet_signal_mask(); the caller's mask is unchanged
// afterwards (also if the thread cannot be created: the std::system_error
// propagates).
template <class F>
std::thread start_quiet_thread(const char* name, F&& f) {
  const sigset_t quiet = quiet_signal_mask();
  sigset_t old;
  pthread_sigmask(SIG_SETMASK, &quiet, &old);
  struct Restore {
    sigset_t mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{old};
  std::thread t(std::forward<F>(f));
  pthread_setname_np(t.native_handle(), name);
  return t;
}

// Ends the wait for a thread of ours that was told to stop: joins it, unless
// the caller is that thread.  That happens when the process exits from it:
// a handler of a fault signal (which our threads do not block) that calls
// exit() runs the atexit handlers and static destructors there, and a
// thread cannot join itself (std::system_error, then std::terminate).  It is
// detached then; exit() never returns to its loop.
inline void join_quiet_thread(std::thread& t) {
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id())
    t.detach();
  else
    t.join();
}

}  // namespace uroce
