// Talking to a forked child over pipes: whole reads bounded in time, whole
// writes, and one-character commands.  Header-only.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace uroce::test {

// Reads exactly n bytes, or fails if a read fails or nothing comes for `ms`.
inline bool read_full(int fd, void* p, size_t n, int ms = 10000) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, ms) != 1) return false;
    const ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}
inline bool write_full(int fd, const void* p, size_t n) { return ::write(fd, p, n) == ssize_t(n); }
inline bool send_cmd(int fd, char c) { return write_full(fd, &c, 1); }
inline bool expect_cmd(int fd, char c) {
  char got = 0;
  return read_full(fd, &got, 1) && got == c;
}

}  // namespace uroce::test
