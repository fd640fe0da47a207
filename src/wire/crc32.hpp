// CRC-32 (IEEE 802.3, the CRC of zlib and gzip) and the GF(2) arithmetic
// behind it, for the ICRC (icrc.hpp).
//
// Representation: CRC-32 is "reflected": a 32-bit value v stands for the
// polynomial whose coefficient of x^i is bit (31 - i) of v, so x^0 is
// 0x80000000 and x^31 is 1.  The generator P(x) = x^32 + ... + 1 is
// 0x04C11DB7 with the x^32 term implicit; reflected that is 0xEDB88320.
//
// crc32() is the zlib convention: register preset to all ones, result
// inverted, and chainable: crc32(crc32(0, a), b) == crc32(0, a || b).  The
// raw register (no preset, no inversion) after a message M is M(x) * x^32
// mod P, so two messages of the same length that differ by D have CRCs
// that differ by D(x) * x^32 mod P: the presets cancel.  icrc.cpp uses this
// to solve for an unknown IPv4 Identification.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace uroce::wire::crc32 {

inline constexpr uint32_t kPoly = 0xedb88320;  // P(x) - x^32, reflected
inline constexpr uint32_t kOne = 0x80000000;   // the polynomial 1
inline constexpr uint32_t kX = 0x40000000;     // the polynomial x

// a(x) * b(x) mod P(x).
constexpr uint32_t mul(uint32_t a, uint32_t b) noexcept {
  uint32_t r = 0;
  for (int i = 31; i >= 0; --i) {  // a's coefficients of x^0, x^1, ... (branch-free)
    r ^= b & (0u - ((a >> i) & 1));
    b = (b >> 1) ^ (kPoly & (0u - (b & 1)));  // b *= x
  }
  return r;
}

// x^-1 mod P exists because P has a constant term: P = x*Q + 1, so x*Q = 1
// (mod P, over GF(2)).  Q = (P - 1) / x: drop x^0, shift down, and the x^32
// term of P becomes x^31 (bit 0).
inline constexpr uint32_t kXInv = ((kPoly & ~kOne) << 1) | 1;
static_assert(mul(kX, kXInv) == kOne);

namespace detail {
// table[i] = base^(2^i) mod P
constexpr auto square_table(uint32_t base) noexcept {
  struct T {
    uint32_t v[64];
  } t{};
  t.v[0] = base;
  for (int i = 1; i < 64; ++i) t.v[i] = mul(t.v[i - 1], t.v[i - 1]);
  return t;
}
inline constexpr auto kXPow2 = square_table(kX);
inline constexpr auto kXInvPow2 = square_table(kXInv);
constexpr uint32_t pow(const decltype(kXPow2)& t, uint64_t n) noexcept {
  uint32_t r = kOne;
  for (int i = 0; n != 0; ++i, n >>= 1)
    if (n & 1) r = mul(r, t.v[i]);
  return r;
}
}  // namespace detail

// x^n mod P and x^-n mod P.
constexpr uint32_t x_pow(uint64_t n) noexcept { return detail::pow(detail::kXPow2, n); }
constexpr uint32_t x_pow_neg(uint64_t n) noexcept { return detail::pow(detail::kXInvPow2, n); }
static_assert(mul(x_pow(1000), x_pow_neg(1000)) == kOne);

// zlib-compatible CRC-32 of `bytes`, continuing from `crc` (0 to start).
// ISA-L's PCLMUL implementation (crc32_gzip_refl) behind it.
uint32_t update(uint32_t crc, std::span<const uint8_t> bytes) noexcept;

}  // namespace uroce::wire::crc32
