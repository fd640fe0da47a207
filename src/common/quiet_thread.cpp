#include "common/quiet_thread.hpp"

namespace uroce {

sigset_t quiet_signal_mask() noexcept {
  sigset_t s;
  sigfillset(&s);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&s, sig);
  return s;
}

bool signal_has_handler(int sig, bool* restarts) noexcept {
  struct sigaction sa;
  if (sigaction(sig, nullptr, &sa) != 0) return false;
  if (restarts) *restarts = (sa.sa_flags & SA_RESTART) != 0;
  return (sa.sa_flags & SA_SIGINFO) ? sa.sa_sigaction != nullptr : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
}

bool restart_after_signal() noexcept {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS) continue;
    bool restarts = false;
    if (signal_has_handler(sig, &restarts) && !restarts) return false;
  }
  return true;
}

}  // namespace uroce
