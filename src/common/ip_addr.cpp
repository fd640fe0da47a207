#include "uroce/ip_addr.hpp"

#include <arpa/inet.h>

namespace uroce {

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
  std::string s(text);
  in_addr a4{};
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) return from_in(a4);
  in6_addr a6{};
  if (inet_pton(AF_INET6, s.c_str(), &a6) == 1) return from_in6(a6);
  return std::nullopt;
}

std::string IpAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  if (is_v4()) {
    in_addr a = to_in();
    inet_ntop(AF_INET, &a, buf, sizeof buf);
  } else {
    in6_addr a = to_in6();
    inet_ntop(AF_INET6, &a, buf, sizeof buf);
  }
  return buf;
}

socklen_t Endpoint::to_sockaddr(sockaddr_storage& ss) const noexcept {
  std::memset(&ss, 0, sizeof ss);
  if (addr.is_v4()) {
    auto* s = reinterpret_cast<sockaddr_in*>(&ss);
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    s->sin_addr = addr.to_in();
    return sizeof(sockaddr_in);
  }
  auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(port);
  s->sin6_addr = addr.to_in6();
  return sizeof(sockaddr_in6);
}

std::optional<Endpoint> Endpoint::from_sockaddr(const sockaddr* sa, socklen_t len) noexcept {
  if (sa->sa_family == AF_INET && len >= socklen_t(sizeof(sockaddr_in))) {
    auto* s = reinterpret_cast<const sockaddr_in*>(sa);
    return Endpoint{IpAddr::from_in(s->sin_addr), ntohs(s->sin_port)};
  }
  if (sa->sa_family == AF_INET6 && len >= socklen_t(sizeof(sockaddr_in6))) {
    auto* s = reinterpret_cast<const sockaddr_in6*>(sa);
    return Endpoint{IpAddr::from_in6(s->sin6_addr), ntohs(s->sin6_port)};
  }
  return std::nullopt;
}

std::string Endpoint::to_string() const {
  // (Appended piece by piece: GCC 12 warns of a false overlap (-Wrestrict)
  // in "[" + std::string&&.)
  std::string s = addr.is_v4() ? "" : "[";
  s += addr.to_string();
  s += addr.is_v4() ? ":" : "]:";
  s += std::to_string(port);
  return s;
}

}  // namespace uroce
