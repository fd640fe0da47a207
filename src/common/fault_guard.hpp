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
//
// Plain copies (copy(), readable()) cost less on x86-64: they run in one
// assembly routine (rep movsb), and a fault inside it at an address of the
// guarded range resumes at the routine's failure exit, the way a kernel's
// exception table recovers a fault in copy_from_user: no sigsetjmp, no
// out-of-line call.  Under a sanitizer the portable path is kept, so that
// the sanitizer still sees those accesses.
#pragma once

#include <setjmp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace uroce::fault_guard {

struct Guard {
  sigjmp_buf env;
  uintptr_t lo, hi;  // the guarded application range
  Guard* prev;
};

// The guards armed in this thread (innermost first).  Initial-exec TLS: one
// load from the thread pointer, no call (uroce is loaded with the program,
// or dlopen'ed into glibc's static TLS reserve: 8 bytes).
extern thread_local Guard* t_current __attribute__((tls_model("initial-exec")));
inline Guard*& current() noexcept { return t_current; }
// Installs the handler (idempotent, thread-safe); the check is one relaxed
// load once installed.
void install_slow() noexcept;
extern std::atomic<bool> g_installed;
inline void install() noexcept {
  if (!g_installed.load(std::memory_order_acquire)) [[unlikely]]
    install_slow();
}
// Faults recovered from, process-wide.
uint64_t recovered() noexcept;

// f() out of line: a function that calls sigsetjmp is compiled with every
// value kept in memory (it may return twice), which would slow down the
// copy or checksum loop of f if it were inlined into run() (measured: 12%
// of WRITE bandwidth).
template <class F>
[[gnu::noinline]] void call_out_of_line(F& f) noexcept {
  f();
}

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
  call_out_of_line(f);
  cur = g.prev;
  return true;
}

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && \
    !defined(UROCE_NO_FAST_COPY)
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define UROCE_FAULT_GUARD_PORTABLE_COPY 1
#endif
#endif
#else
#define UROCE_FAULT_GUARD_PORTABLE_COPY 1
#endif

#ifndef UROCE_FAULT_GUARD_PORTABLE_COPY
// The range the copy routine may fault in and recover from (this thread's
// current copy; 0/0 when none).
struct CopyRange {
  uintptr_t lo, hi;
};
extern thread_local CopyRange t_copy __attribute__((tls_model("initial-exec")));
// memcpy(dst, src, n), 0; 1 if it faulted (fault_guard.cpp).
extern "C" int uroce_fault_guard_copy(void* dst, const void* src, size_t n) noexcept
    __attribute__((visibility("hidden")));

// memcpy(dst, src, n) where `app` is whichever of the two is application
// memory.
inline bool copy(void* dst, const void* src, size_t n, const void* app) noexcept {
  install();
  CopyRange& r = t_copy;
  const CopyRange outer = r;  // (a copy inside a run() of ours: nothing else nests)
  r.lo = reinterpret_cast<uintptr_t>(app);
  r.hi = r.lo + n < r.lo ? UINTPTR_MAX : r.lo + n;
  const int faulted = uroce_fault_guard_copy(dst, src, n);
  r = outer;
  return faulted == 0;
}
#else
inline bool copy(void* dst, const void* src, size_t n, const void* app) noexcept {
  return run(app, n, [&] { std::memcpy(dst, src, n); });
}
#endif

// Whether every page of [p, p + n) can be read now: one byte of each is.
inline bool readable(const void* p, size_t n) noexcept {
  if (n == 0) return true;
  const auto* b = static_cast<const uint8_t*>(p);
  constexpr size_t kPage = 4096;  // (a larger page is read more often than needed)
  const size_t first_gap = kPage - (reinterpret_cast<uintptr_t>(p) & (kPage - 1));
  uint8_t sink;
  if (!copy(&sink, b, 1, b)) return false;
  for (size_t off = first_gap; off < n; off += kPage)
    if (!copy(&sink, b + off, 1, b + off)) return false;
  return copy(&sink, b + n - 1, 1, b + n - 1);
}

}  // namespace uroce::fault_guard
