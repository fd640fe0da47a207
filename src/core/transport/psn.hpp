// 24-bit Packet Sequence Numbers: the one place that knows they wrap.
#pragma once

#include <cstdint>

namespace uroce::transport {

inline constexpr uint32_t kPsnMask = 0xffffff;

inline constexpr uint32_t psn_add(uint32_t psn, uint32_t n) noexcept { return (psn + n) & kPsnMask; }

// Signed distance a - b in the 24-bit circle: > 0 when a is after b.
// Valid while the two are less than 2^23 apart (IBA 9.7.2: half the space).
inline constexpr int32_t psn_diff(uint32_t a, uint32_t b) noexcept { return int32_t((a - b) << 8) >> 8; }

inline constexpr bool psn_before(uint32_t a, uint32_t b) noexcept { return psn_diff(a, b) < 0; }

static_assert(psn_diff(0, kPsnMask) == 1);
static_assert(psn_diff(kPsnMask, 0) == -1);
static_assert(psn_add(kPsnMask, 2) == 1);

}  // namespace uroce::transport
