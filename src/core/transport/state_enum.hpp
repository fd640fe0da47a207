// Protocol-state enums of the transport's machines, each with a name table,
// and the one way to change one: transition(), which traces the change at
// UROCE_LOG=trace ("qp 0x000011 RetryTimer: off -> armed").
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "common/log.hpp"

#define UROCE_STATE_VALUE(n) n,
#define UROCE_STATE_NAME(n) #n,
// Declares `enum class Name` over LIST's names, k<Name>Names and
// to_string(Name) / machine_name(Name).
#define UROCE_STATE_ENUM(Name, LIST)                                                \
  enum class Name : uint8_t { LIST(UROCE_STATE_VALUE) };                            \
  inline constexpr const char* k##Name##Names[] = {LIST(UROCE_STATE_NAME)};         \
  constexpr const char* to_string(Name v) noexcept {                                \
    return size_t(v) < std::size(k##Name##Names) ? k##Name##Names[size_t(v)] : "?"; \
  }                                                                                 \
  constexpr const char* machine_name(Name) noexcept { return #Name; }

namespace uroce::transport {

// Sets `cur` to `next`; a change is traced with the QP's number.
template <class E>
inline void transition(uint32_t qpn, E& cur, E next) noexcept {
  if (cur != next)
    UROCE_LOG(trace, "qp 0x%06x %s: %s -> %s", unsigned(qpn), machine_name(cur), to_string(cur), to_string(next));
  cur = next;
}

}  // namespace uroce::transport
