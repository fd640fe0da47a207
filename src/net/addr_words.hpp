// An IP address as two 64-bit words (big-endian halves of its 16 bytes), as
// the shared tables of the host registry store it: plain integers that the
// seqlocks and compare-and-swaps of those files can handle.
#pragma once

#include <cstdint>

#include "common/ip_addr.hpp"

namespace uroce::net {

// Half `h` (0: bytes 0..7, 1: bytes 8..15) of `a`.
inline uint64_t addr_half(const IpAddr& a, int h) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | a.bytes()[size_t(h * 8 + i)];
  return v;
}

inline IpAddr addr_from_halves(uint64_t hi, uint64_t lo) {
  uint8_t raw[16];
  for (int i = 0; i < 8; ++i) {
    raw[7 - i] = uint8_t(hi >> (8 * i));
    raw[15 - i] = uint8_t(lo >> (8 * i));
  }
  return IpAddr::from_bytes(raw);
}

}  // namespace uroce::net
