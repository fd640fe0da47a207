#include "common/quiet_thread.hpp"

namespace uroce {

sigset_t quiet_signal_mask() noexcept {
  sigset_t s;
  sigfillset(&s);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&s, sig);
  return s;
}

}  // namespace uroce
