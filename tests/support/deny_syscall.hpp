// Runs code as it would run where the kernel, or a container's seccomp
// profile, refuses a system call: no privilege needed.
#pragma once

#include <functional>

namespace uroce::test {

// Runs `fn` on a new thread on which system call `nr` fails with `err`
// (a seccomp filter: threads that thread creates inherit it; the rest of the
// process is unaffected).  Returns false, with `fn` not run, if the filter
// cannot be installed.
bool with_syscall_denied(long nr, int err, const std::function<void()>& fn);

}  // namespace uroce::test
