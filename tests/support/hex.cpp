#include "support/hex.hpp"

#include <stdexcept>

namespace uroce::test {

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 0xf]);
  }
  return s;
}

std::vector<uint8_t> from_hex(std::string_view text) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out;
  int hi = -1;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ':' || c == '-') continue;
    const int d = digit(c);
    if (d < 0) throw std::invalid_argument("from_hex: not a hex digit: " + std::string(1, c));
    if (hi < 0) {
      hi = d;
    } else {
      out.push_back(uint8_t(hi << 4 | d));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("from_hex: odd number of digits");
  return out;
}

}  // namespace uroce::test
