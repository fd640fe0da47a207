// IpAddr: an IPv4 or IPv6 address held as 16 bytes, IPv4 in the IPv4-mapped
// form ::ffff:a.b.c.d.  That is exactly a RoCEv2 GID, so a GID and the
// address it names are the same value.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace uroce {

class IpAddr {
 public:
  constexpr IpAddr() = default;
  static IpAddr from_bytes(const uint8_t (&raw)[16]) {
    IpAddr a;
    std::memcpy(a.b_.data(), raw, 16);
    return a;
  }
  static IpAddr from_v4(uint32_t host_order) {
    IpAddr a;
    a.b_[10] = a.b_[11] = 0xff;
    a.b_[12] = uint8_t(host_order >> 24);
    a.b_[13] = uint8_t(host_order >> 16);
    a.b_[14] = uint8_t(host_order >> 8);
    a.b_[15] = uint8_t(host_order);
    return a;
  }
  static IpAddr from_in(const in_addr& a) { return from_v4(ntohl(a.s_addr)); }
  static IpAddr from_in6(const in6_addr& a) {
    IpAddr r;
    std::memcpy(r.b_.data(), &a, 16);
    return r;
  }
  // Parses "127.0.0.1", "::1" or "::ffff:10.0.0.1".
  static std::optional<IpAddr> parse(std::string_view text);

  bool is_v4() const noexcept {
    static constexpr uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(b_.data(), pre, 12) == 0;
  }
  bool is_unspecified() const noexcept { return *this == IpAddr{}; }
  bool is_multicast() const noexcept { return is_v4() ? (b_[12] & 0xf0) == 0xe0 : b_[0] == 0xff; }
  uint32_t v4() const noexcept {  // host order; only meaningful if is_v4()
    return uint32_t(b_[12]) << 24 | uint32_t(b_[13]) << 16 | uint32_t(b_[14]) << 8 | b_[15];
  }
  in_addr to_in() const noexcept {
    in_addr a{};
    a.s_addr = htonl(v4());
    return a;
  }
  in6_addr to_in6() const noexcept {
    in6_addr a{};
    std::memcpy(&a, b_.data(), 16);
    return a;
  }
  const std::array<uint8_t, 16>& bytes() const noexcept { return b_; }

  std::string to_string() const;

  friend auto operator<=>(const IpAddr&, const IpAddr&) = default;
  // Equality as two 8-byte compares: the defaulted one calls memcmp, and
  // the packet path compares addresses several times a packet.
  friend bool operator==(const IpAddr& a, const IpAddr& b) noexcept {
    uint64_t x[2], y[2];
    std::memcpy(x, a.b_.data(), 16);
    std::memcpy(y, b.b_.data(), 16);
    return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
  }

 private:
  std::array<uint8_t, 16> b_{};
};

// A UDP endpoint: address and port (host order).
struct Endpoint {
  IpAddr addr;
  uint16_t port = 0;

  // Fills a sockaddr_in (IPv4) or sockaddr_in6; returns its length.
  socklen_t to_sockaddr(sockaddr_storage& ss) const noexcept;
  static std::optional<Endpoint> from_sockaddr(const sockaddr* sa, socklen_t len) noexcept;
  std::string to_string() const;
  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
  friend bool operator==(const Endpoint& a, const Endpoint& b) noexcept { return a.port == b.port && a.addr == b.addr; }
};

}  // namespace uroce
