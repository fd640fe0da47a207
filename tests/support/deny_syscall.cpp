#include "support/deny_syscall.hpp"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>

#include <thread>

namespace uroce::test {

namespace {

#if defined(__x86_64__)
constexpr unsigned kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kArch = AUDIT_ARCH_AARCH64;
#else
constexpr unsigned kArch = 0;
#endif

bool install(long nr, int err, std::optional<uint32_t> arg1) {
  if (kArch == 0) return false;
  // args[1]'s low word (little-endian) when asked; else a test that passes.
  const unsigned arg_off = unsigned(offsetof(seccomp_data, args) + sizeof(uint64_t));
  sock_filter prog[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, unsigned(nr), 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg1 ? arg_off : unsigned(offsetof(seccomp_data, nr))),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arg1 ? *arg1 : unsigned(nr), 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned(err) & SECCOMP_RET_DATA)),
  };
  sock_fprog fprog{static_cast<unsigned short>(sizeof prog / sizeof prog[0]), prog};
  // Without privilege a filter needs no_new_privs (of this thread only).
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}

}  // namespace

bool with_syscall_denied(long nr, int err, const std::function<void()>& fn, std::optional<uint32_t> arg1) {
  bool ok = false;
  std::thread t([&] {
    ok = install(nr, err, arg1);
    if (ok) fn();
  });
  t.join();
  return ok;
}

}  // namespace uroce::test
