// rsockets' entry points, which binaries import whether or not they use
// them (rping and the other rdma_cm examples poll their event channel with
// rpoll).  uroce has no rsockets: rsocket() fails with EAFNOSUPPORT, so
// every descriptor these functions see is an ordinary one, and each passes
// the call on to its libc counterpart (as rsockets itself does for
// descriptors that are not rsockets).  The iomap calls, which need an
// rsocket, fail with EBADF.
#include <fcntl.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>

#define UROCE_C_API extern "C" __attribute__((visibility("default")))

UROCE_C_API int rsocket(int, int, int) {
  errno = EAFNOSUPPORT;
  return -1;
}
UROCE_C_API int rbind(int s, const struct sockaddr* a, socklen_t l) { return bind(s, a, l); }
UROCE_C_API int rlisten(int s, int backlog) { return listen(s, backlog); }
UROCE_C_API int raccept(int s, struct sockaddr* a, socklen_t* l) { return accept(s, a, l); }
UROCE_C_API int rconnect(int s, const struct sockaddr* a, socklen_t l) { return connect(s, a, l); }
UROCE_C_API int rshutdown(int s, int how) { return shutdown(s, how); }
UROCE_C_API int rclose(int s) { return close(s); }
UROCE_C_API ssize_t rrecv(int s, void* b, size_t n, int f) { return recv(s, b, n, f); }
UROCE_C_API ssize_t rrecvfrom(int s, void* b, size_t n, int f, struct sockaddr* a, socklen_t* l) {
  return recvfrom(s, b, n, f, a, l);
}
UROCE_C_API ssize_t rrecvmsg(int s, struct msghdr* m, int f) { return recvmsg(s, m, f); }
UROCE_C_API ssize_t rsend(int s, const void* b, size_t n, int f) { return send(s, b, n, f); }
UROCE_C_API ssize_t rsendto(int s, const void* b, size_t n, int f, const struct sockaddr* a, socklen_t l) {
  return sendto(s, b, n, f, a, l);
}
UROCE_C_API ssize_t rsendmsg(int s, const struct msghdr* m, int f) { return sendmsg(s, m, f); }
UROCE_C_API ssize_t rread(int s, void* b, size_t n) { return read(s, b, n); }
UROCE_C_API ssize_t rreadv(int s, const struct iovec* v, int n) { return readv(s, v, n); }
UROCE_C_API ssize_t rwrite(int s, const void* b, size_t n) { return write(s, b, n); }
UROCE_C_API ssize_t rwritev(int s, const struct iovec* v, int n) { return writev(s, v, n); }
UROCE_C_API int rpoll(struct pollfd* fds, nfds_t n, int timeout) { return poll(fds, n, timeout); }
UROCE_C_API int rselect(int n, fd_set* r, fd_set* w, fd_set* e, struct timeval* t) { return select(n, r, w, e, t); }
UROCE_C_API int rgetpeername(int s, struct sockaddr* a, socklen_t* l) { return getpeername(s, a, l); }
UROCE_C_API int rgetsockname(int s, struct sockaddr* a, socklen_t* l) { return getsockname(s, a, l); }
UROCE_C_API int rsetsockopt(int s, int level, int name, const void* v, socklen_t l) {
  return setsockopt(s, level, name, v, l);
}
UROCE_C_API int rgetsockopt(int s, int level, int name, void* v, socklen_t* l) {
  return getsockopt(s, level, name, v, l);
}
UROCE_C_API int rfcntl(int s, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  int r;
  switch (cmd) {
    case F_GETFD:
    case F_GETFL:
    case F_GETOWN:
    case F_GETSIG:
    case F_GETLEASE:
    case F_GETPIPE_SZ:
    case F_GET_SEALS: r = fcntl(s, cmd); break;
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
    case F_SETFD:
    case F_SETFL:
    case F_SETOWN:
    case F_SETSIG:
    case F_SETLEASE:
    case F_NOTIFY:
    case F_SETPIPE_SZ:
    case F_ADD_SEALS: r = fcntl(s, cmd, va_arg(ap, int)); break;
    default: r = fcntl(s, cmd, va_arg(ap, void*)); break;
  }
  va_end(ap);
  return r;
}
UROCE_C_API off_t riomap(int, void*, size_t, int, int, off_t) {
  errno = EBADF;
  return -1;
}
UROCE_C_API int riounmap(int, void*, size_t) {
  errno = EBADF;
  return -1;
}
UROCE_C_API size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = EBADF;
  return 0;
}
