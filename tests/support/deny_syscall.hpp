// Runs code as it would run where the kernel, or a container's seccomp
// profile, refuses a system call: no privilege needed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace uroce::test {

// Runs `fn` on a new thread on which system call `nr` fails with `err`
// (a seccomp filter: threads that thread creates inherit it; the rest of the
// process is unaffected); with `arg1`, only calls whose second argument's
// low 32 bits are that (an ioctl's request).  Returns false, with `fn` not
// run, if the filter cannot be installed.
bool with_syscall_denied(long nr, int err, const std::function<void()>& fn,
                         std::optional<uint32_t> arg1 = std::nullopt);

}  // namespace uroce::test
