#include "common/fault_guard.hpp"

#include <signal.h>

#include <atomic>
#include <mutex>

namespace uroce::fault_guard {
namespace {

struct sigaction g_old_segv, g_old_bus;
std::atomic<uint64_t> g_recovered{0};

void pass_on(int sig, siginfo_t* si, void* uc) noexcept {
  struct sigaction& old = sig == SIGSEGV ? g_old_segv : g_old_bus;
  if (old.sa_flags & SA_SIGINFO) {
    old.sa_sigaction(sig, si, uc);
    return;
  }
  if (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN) {
    // Back to the default action; the faulting instruction runs again on
    // return and the process dies of this signal, as it would have.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    return;
  }
  old.sa_handler(sig);
}

void on_fault(int sig, siginfo_t* si, void* uc) {
  Guard* g = current();
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  for (; g; g = g->prev)
    if (a >= g->lo && a < g->hi) {
      g_recovered.fetch_add(1, std::memory_order_relaxed);
      siglongjmp(g->env, 1);
    }
  pass_on(sig, si, uc);
}

}  // namespace

thread_local Guard* t_current __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<bool> g_installed{false};

void install_slow() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &g_old_segv);
    ::sigaction(SIGBUS, &sa, &g_old_bus);
    g_installed.store(true, std::memory_order_release);
  });
}

uint64_t recovered() noexcept { return g_recovered.load(std::memory_order_relaxed); }

}  // namespace uroce::fault_guard
