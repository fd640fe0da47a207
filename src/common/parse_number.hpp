// A whole string as an unsigned number: decimal digits only (no sign, no
// space, nothing after), within the type's range.  For the UROCE_* numbers
// of the environment, whose bad values fail a device open with EINVAL.
#pragma once

#include <charconv>
#include <concepts>
#include <optional>
#include <string_view>

namespace uroce {

template <std::unsigned_integral T>
std::optional<T> parse_unsigned(std::string_view s) noexcept {
  T n{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

}  // namespace uroce
