// The doorbell: a tiny UDP datagram a shared-memory producer (ShmIo) sends
// to a consumer that sleeps in its socket, so that the consumer's ordinary
// poll/epoll on the socket wakes it.  It carries nothing: whoever receives it
// (UdpIo) swallows it.  8 bytes, shorter than any RoCEv2 packet (BTH + ICRC
// alone are 16), so it can never be mistaken for one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce::net {

inline constexpr uint8_t kDoorbell[8] = {'u', 'r', 'o', 'c', 'e', 'D', 'B', '1'};

inline bool is_doorbell(std::span<const uint8_t> d) noexcept {
  return d.size() == sizeof kDoorbell && std::memcmp(d.data(), kDoorbell, sizeof kDoorbell) == 0;
}

}  // namespace uroce::net
