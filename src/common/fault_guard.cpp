#include "common/fault_guard.hpp"

#include <signal.h>
#include <ucontext.h>

#include <atomic>
#include <mutex>

#ifndef UROCE_FAULT_GUARD_PORTABLE_COPY
// uroce_fault_guard_copy(dst, src, n): rep movsb (fast for every size where
// the CPU has FSRM/ERMS, and never slower than a sigsetjmp plus memcpy
// here); a fault at the movsb resumes at `fault` (on_fault below).
asm(R"(
  .pushsection .text
  .p2align 4
  .globl uroce_fault_guard_copy, uroce_fault_guard_copy_at, uroce_fault_guard_copy_fault
  .hidden uroce_fault_guard_copy, uroce_fault_guard_copy_at, uroce_fault_guard_copy_fault
  .type uroce_fault_guard_copy, @function
uroce_fault_guard_copy:
  .cfi_startproc
  endbr64
  movq %rdx, %rcx
uroce_fault_guard_copy_at:
  rep movsb
  xorl %eax, %eax
  ret
uroce_fault_guard_copy_fault:
  movl $1, %eax
  ret
  .cfi_endproc
  .size uroce_fault_guard_copy, .-uroce_fault_guard_copy
  .popsection
)");
extern "C" const char uroce_fault_guard_copy_at[] __attribute__((visibility("hidden")));
extern "C" const char uroce_fault_guard_copy_fault[] __attribute__((visibility("hidden")));
#endif

namespace uroce::fault_guard {

#ifndef UROCE_FAULT_GUARD_PORTABLE_COPY
thread_local CopyRange t_copy __attribute__((tls_model("initial-exec"))) = {0, 0};
#endif

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
#ifndef UROCE_FAULT_GUARD_PORTABLE_COPY
  // The copy routine's movsb at an address of its range: its failure exit.
  auto& rip = static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP];
  if (uintptr_t(rip) == reinterpret_cast<uintptr_t>(uroce_fault_guard_copy_at) && a >= t_copy.lo && a < t_copy.hi) {
    g_recovered.fetch_add(1, std::memory_order_relaxed);
    rip = greg_t(reinterpret_cast<uintptr_t>(uroce_fault_guard_copy_fault));
    return;
  }
#endif
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
