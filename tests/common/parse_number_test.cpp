// parse_unsigned: decimal digits only, the whole string, within range.
#include "common/parse_number.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace uroce {
namespace {

TEST(ParseUnsigned, TakesWholeStringsOfDigitsWithinRange) {
  EXPECT_EQ(parse_unsigned<uint32_t>("0"), 0u);
  EXPECT_EQ(parse_unsigned<uint32_t>("3600000"), 3600000u);
  EXPECT_EQ(parse_unsigned<uint32_t>("4294967295"), 4294967295u);
  EXPECT_EQ(parse_unsigned<uint64_t>("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "12x", "0x10", "4294967296"})
    EXPECT_FALSE(parse_unsigned<uint32_t>(bad).has_value()) << '"' << bad << '"';
}

}  // namespace
}  // namespace uroce
