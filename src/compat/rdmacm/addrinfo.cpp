// rdma_getaddrinfo / rdma_freeaddrinfo: getaddrinfo(3) for rdma_cm.
//
// The first address getaddrinfo gives becomes the source (RAI_PASSIVE: the
// address to listen on, the unspecified one without a node) or the
// destination (with the hints' source, if any); without a node or service,
// the hints' addresses are the answer.  The QP type and port space
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

namespace {

// The QP type and port space of the hints, one from the other (UD <->
// RDMA_PS_UDP), else RC and RDMA_PS_TCP.
void types_of(const rdma_addrinfo* hints, int& qp_type, int& ps) {
  qp_type = hints ? hints->ai_qp_type : 0;
  ps = hints ? hints->ai_port_space : 0;
  if (!qp_type) qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
  if (!ps) ps = qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
}

bool set_addr(sockaddr*& out, socklen_t& out_len, const sockaddr* sa, socklen_t len) {
  out = copy_sockaddr(sa, len);
  out_len = out ? len : 0;
  return out != nullptr;
}

// The addresses a node and service name (getaddrinfo's first answer): the
// source for RAI_PASSIVE, else the destination.  0 or an EAI_* code.
int resolve_names(const char* node, const char* service, const rdma_addrinfo* hints, int qp_type, rdma_addrinfo& r) {
  const int flags = hints ? hints->ai_flags : 0;
  addrinfo ah{};
  ah.ai_family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
  if (ah.ai_family != AF_UNSPEC && ah.ai_family != AF_INET && ah.ai_family != AF_INET6) {
    errno = EAFNOSUPPORT;
    return EAI_FAMILY;
  }
  if (flags & RAI_PASSIVE) ah.ai_flags |= AI_PASSIVE;
  if (flags & RAI_NUMERICHOST) ah.ai_flags |= AI_NUMERICHOST;
  ah.ai_socktype = qp_type == IBV_QPT_UD ? SOCK_DGRAM : SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (int e = getaddrinfo(node, service, &ah, &ai); e != 0) {
    UROCE_LOG(warn, "rdma_getaddrinfo(%s, %s): %s", node ? node : "-", service ? service : "-", gai_strerror(e));
    errno = e == EAI_SYSTEM ? errno : ENOENT;
    return e;
  }
  r.ai_family = ai->ai_family;
  bool ok;
  if (flags & RAI_PASSIVE) {
    ok = set_addr(r.ai_src_addr, r.ai_src_len, ai->ai_addr, ai->ai_addrlen);
  } else {
    ok = set_addr(r.ai_dst_addr, r.ai_dst_len, ai->ai_addr, ai->ai_addrlen);
    if (ok && node) {
      r.ai_dst_canonname = strdup(ai->ai_canonname ? ai->ai_canonname : node);
      ok = r.ai_dst_canonname;
    }
  }
  freeaddrinfo(ai);
  if (!ok) {
    errno = ENOMEM;
    return EAI_MEMORY;
  }
  return 0;
}

}  // namespace

// With neither a node nor a service, the addresses come from the hints
// (ai_dst_addr, ai_src_addr), as rdma-core has it: libfabric passes its
// source and destination that way.  A source in the hints is added to an
// active answer that has none.
UROCE_C_API int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                 rdma_addrinfo** res) {
  const bool from_hints = !node && !service;
  if (!res || (from_hints && (!hints || (!hints->ai_src_len && !hints->ai_dst_len)))) {
    errno = EINVAL;
    return EAI_NONAME;
  }
  int qp_type, ps;
  types_of(hints, qp_type, ps);
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!r) {
    errno = ENOMEM;
    return EAI_MEMORY;
  }
  r->ai_flags = hints ? hints->ai_flags : 0;
  r->ai_qp_type = qp_type;
  r->ai_port_space = ps;
  int e = 0;
  if (!from_hints) {
    e = resolve_names(node, service, hints, qp_type, *r);
  } else if (hints->ai_dst_len && hints->ai_dst_addr) {
    if (!set_addr(r->ai_dst_addr, r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len)) e = EAI_MEMORY;
  }
  if (!e && !r->ai_src_len && hints && hints->ai_src_len && hints->ai_src_addr) {
    if (!set_addr(r->ai_src_addr, r->ai_src_len, hints->ai_src_addr, hints->ai_src_len)) e = EAI_MEMORY;
  }
  if (!e && !r->ai_family) {
    const sockaddr* a = r->ai_dst_addr ? r->ai_dst_addr : r->ai_src_addr;
    r->ai_family = hints && hints->ai_family ? hints->ai_family : a ? a->sa_family : AF_UNSPEC;
  }
  if (e) {
    if (e == EAI_MEMORY) errno = ENOMEM;
    free_one(r);
    return e;
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
