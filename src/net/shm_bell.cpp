#include "net/shm_bell.hpp"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace uroce::net {
namespace {

socklen_t bell_name(sockaddr_un& a, uint64_t token) noexcept {
  // The user the process started as, read once: a ring is one sendto(), not
  // a geteuid() as well (a bell's owner is of the same user, as ring files
  // and the registry require).
  static const unsigned uid = unsigned(::geteuid());
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "uroce-shm-%u-%016llx", uid,
                              static_cast<unsigned long long>(token));
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

Status sys_error(const char* what) {
  return err::from_errno(errno, std::string("shm bell: ") + what + ": " + std::strerror(errno));
}

}  // namespace

Result<ShmBell> ShmBell::open() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return sys_error("socket");
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint64_t token = 0;
    if (::getrandom(&token, sizeof token, 0) != ssize_t(sizeof token)) return sys_error("getrandom");
    sockaddr_un a;
    const socklen_t len = bell_name(a, token);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) == 0) return ShmBell(std::move(fd), token);
    if (errno != EADDRINUSE) return sys_error("bind");
  }
  return sys_error("bind");
}

Result<UniqueFd> ShmBell::open_ringer() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return sys_error("socket");
  return fd;
}

bool ShmBell::ring(int ringer, uint64_t token) noexcept {
  sockaddr_un a;
  const socklen_t len = bell_name(a, token);
  const uint8_t one = 1;
  // EAGAIN: the bell's queue is full of datagrams not read yet, so it rang.
  return ::sendto(ringer, &one, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&a), len) == 1 || errno == EAGAIN;
}

size_t ShmBell::drain() noexcept {
  // One recvmmsg() for the usual one or two datagrams, rather than a recv()
  // each and one more to see EAGAIN; a full batch means there may be more.
  constexpr unsigned kBatch = 16;
  uint8_t b[kBatch];
  iovec iov[kBatch];
  mmsghdr msgs[kBatch] = {};
  for (unsigned i = 0; i < kBatch; ++i) {
    iov[i] = {&b[i], 1};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  size_t n = 0;
  for (;;) {
    const int got = ::recvmmsg(fd_.get(), msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (got <= 0) return n;
    n += size_t(got);
    if (unsigned(got) < kBatch) return n;
  }
}

}  // namespace uroce::net
