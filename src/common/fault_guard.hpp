// Memory access that cannot crash the process.
//
// The application may unmap or re-protect memory it registered while a peer
// or the NIC still uses it.  A NIC keeps such pages pinned; uroce pins
// nothing, so every copy into or out of application memory runs under a
// guard: a SIGSEGV or SIGBUS raised at an address of the guarded range, in
// the thread that armed the guard, ends the guarded call (it returns false)
// instead of the process, and the caller turns it into the error
// completion or NAK the verbs prescribe.  Any other fault goes to the
// handler that was installed before ours (the default one: the process
// dies as it would have), so the application's own crashes are untouched.
//
// The cost is one sigsetjmp without the signal mask (a few ns) per guarded
// call; the handler is installed once, at the first guarded call, with
// SA_NODEFER so that leaving it by siglongjmp needs no mask restore.
#pragma once

#include <setjmp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace uroce::fault_guard {

struct Guard {
  sigjmp_buf env;
  uintptr_t lo, hi;  // the guarded application range
  Guard* prev;
};

// The guards armed in this thread (innermost first).
Guard*& current() noexcept;
// Installs the handler (idempotent, thread-safe).
void install() noexcept;
// Faults recovered from, process-wide.
uint64_t recovered() noexcept;

// Runs f() with faults at [app, app + len) recoverable: false if one
// happened (f was cut short).  f must leave nothing half-done that matters
// (it only moves bytes), and must not arm a guard of its own.
template <class F>
[[gnu::noinline]] bool run(const void* app, size_t len, F&& f) noexcept {
  install();
  Guard g;
  g.lo = reinterpret_cast<uintptr_t>(app);
  g.hi = g.lo + len < g.lo ? UINTPTR_MAX : g.lo + len;
  Guard*& cur = current();
  g.prev = cur;
  if (sigsetjmp(g.env, 0) != 0) {
    current() = g.prev;
    return false;
  }
  cur = &g;
  f();
  cur = g.prev;
  return true;
}

// memcpy(dst, src, n) where `app` is whichever of the two is application
// memory.
inline bool copy(void* dst, const void* src, size_t n, const void* app) noexcept {
  return run(app, n, [&] { std::memcpy(dst, src, n); });
}

}  // namespace uroce::fault_guard
