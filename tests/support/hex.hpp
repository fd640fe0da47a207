// Hex helpers for tests.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::test {

// "0a1b..." (lower case, no separators).
std::string to_hex(std::span<const uint8_t> bytes);

// Parses hex digits, ignoring whitespace, ':' and '-'.  Throws
// std::invalid_argument on any other character or an odd digit count.
std::vector<uint8_t> from_hex(std::string_view text);

}  // namespace uroce::test
