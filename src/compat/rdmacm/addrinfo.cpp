// rdma_getaddrinfo / rdma_freeaddrinfo: getaddrinfo(3) for rdma_cm.
//
// The first address getaddrinfo gives becomes the source (RAI_PASSIVE: the
// address to listen on, the unspecified one without a node) or the
// destination (with the hints' source, if any).  The QP type and port space
// come from the hints, one from the other (UD <-> RDMA_PS_UDP), else RC and
// RDMA_PS_TCP.  No route is resolved here (rdma_resolve_route does that, at
// once, on uroce).  Errors are getaddrinfo's EAI_* codes, as rdma-core's.
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "rdmacm.hpp"

using namespace uroce;
using namespace uroce::rdmacm;

namespace {

sockaddr* copy_sockaddr(const sockaddr* sa, socklen_t len) {
  auto* out = static_cast<sockaddr*>(std::malloc(len));
  if (out) std::memcpy(out, sa, len);
  return out;
}

void free_one(rdma_addrinfo* r) {
  std::free(r->ai_src_addr);
  std::free(r->ai_dst_addr);
  std::free(r->ai_src_canonname);
  std::free(r->ai_dst_canonname);
  std::free(r->ai_route);
  std::free(r->ai_connect);
  std::free(r);
}

}  // namespace

UROCE_C_API int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                 rdma_addrinfo** res) {
  if (!res || (!node && !service)) {
    errno = EINVAL;
    return EAI_NONAME;
  }
  const int flags = hints ? hints->ai_flags : 0;
  addrinfo ah{};
  ah.ai_family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
  if (ah.ai_family != AF_UNSPEC && ah.ai_family != AF_INET && ah.ai_family != AF_INET6) {
    errno = EAFNOSUPPORT;
    return EAI_FAMILY;
  }
  if (flags & RAI_PASSIVE) ah.ai_flags |= AI_PASSIVE;
  if (flags & RAI_NUMERICHOST) ah.ai_flags |= AI_NUMERICHOST;
  int qp_type = hints ? hints->ai_qp_type : 0;
  int ps = hints ? hints->ai_port_space : 0;
  if (!qp_type) qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
  if (!ps) ps = qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
  ah.ai_socktype = qp_type == IBV_QPT_UD ? SOCK_DGRAM : SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (int e = getaddrinfo(node, service, &ah, &ai); e != 0) {
    UROCE_LOG(warn, "rdma_getaddrinfo(%s, %s): %s", node ? node : "-", service ? service : "-", gai_strerror(e));
    errno = e == EAI_SYSTEM ? errno : ENOENT;
    return e;
  }
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!r) {
    freeaddrinfo(ai);
    errno = ENOMEM;
    return EAI_MEMORY;
  }
  r->ai_flags = flags;
  r->ai_family = ai->ai_family;
  r->ai_qp_type = qp_type;
  r->ai_port_space = ps;
  bool ok = true;
  if (flags & RAI_PASSIVE) {
    r->ai_src_len = ai->ai_addrlen;
    r->ai_src_addr = copy_sockaddr(ai->ai_addr, ai->ai_addrlen);
    ok = r->ai_src_addr;
  } else {
    r->ai_dst_len = ai->ai_addrlen;
    r->ai_dst_addr = copy_sockaddr(ai->ai_addr, ai->ai_addrlen);
    ok = r->ai_dst_addr;
    if (ok && hints && hints->ai_src_addr && hints->ai_src_len) {
      r->ai_src_len = hints->ai_src_len;
      r->ai_src_addr = copy_sockaddr(hints->ai_src_addr, hints->ai_src_len);
      ok = r->ai_src_addr;
    }
    if (ok && node) {
      r->ai_dst_canonname = strdup(ai->ai_canonname ? ai->ai_canonname : node);
      ok = r->ai_dst_canonname;
    }
  }
  freeaddrinfo(ai);
  if (!ok) {
    free_one(r);
    errno = ENOMEM;
    return EAI_MEMORY;
  }
  *res = r;
  return 0;
}

UROCE_C_API void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    free_one(res);
    res = next;
  }
}
