// UROCE_SACK_HELLO and UROCE_SACK payloads (sack.hpp).
#include "wire/sack.hpp"

#include <algorithm>

namespace uroce::wire {
namespace {

template <size_t N>
void put_prefix(std::array<uint8_t, N>& p) noexcept {
  std::copy(kSackMagic.begin(), kSackMagic.end(), p.begin());
  p[4] = kSackVersion;
}

bool prefix_ok(std::span<const uint8_t> payload) noexcept {
  return payload.size() >= kSackHelloLen && std::equal(kSackMagic.begin(), kSackMagic.end(), payload.begin()) &&
         payload[4] == kSackVersion;
}

}  // namespace

std::array<uint8_t, kSackHelloLen> sack_hello_payload() noexcept {
  std::array<uint8_t, kSackHelloLen> p{};
  put_prefix(p);
  return p;
}

std::array<uint8_t, kSackLen> sack_payload(const SackBitmap& held) noexcept {
  std::array<uint8_t, kSackLen> p{};
  put_prefix(p);
  std::copy(held.begin(), held.end(), p.begin() + kSackHelloLen);
  return p;
}

bool parse_sack_hello(std::span<const uint8_t> payload) noexcept {
  return payload.size() == kSackHelloLen && prefix_ok(payload);
}

std::optional<SackBitmap> parse_sack(std::span<const uint8_t> payload) noexcept {
  if (payload.size() != kSackLen || !prefix_ok(payload)) return std::nullopt;
  SackBitmap b;
  std::copy(payload.begin() + kSackHelloLen, payload.end(), b.begin());
  return b;
}

}  // namespace uroce::wire
