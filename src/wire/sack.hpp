// uroce's selective acknowledgement (docs/congestion.md), a manufacturer-
// specific packet between uroce peers only.  A requester that has seen its
// peer keep packets after a lost one sends UROCE_SACK_HELLO; a responder
// that got one answers the packets it keeps out of order with UROCE_SACK,
// which says which PSNs after the expected one it holds.  Neither is sent to
// a peer that did not show it is uroce, so rdma_rxe and NICs never see one.
//
// Both are a BTH (opcode 0xc0 / 0xc1, dest QP, PSN) and a payload:
//   magic "uRSK" (4 bytes), version (1), reserved (3), and for UROCE_SACK
//   a 32-byte bitmap: bit i (byte i / 8, least significant bit first) set
//   says PSN (BTH PSN + 1 + i) is held.  The BTH PSN of a SACK is the PSN
//   the responder expects next.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

namespace uroce::wire {

inline constexpr std::array<uint8_t, 4> kSackMagic{'u', 'R', 'S', 'K'};
inline constexpr uint8_t kSackVersion = 1;
inline constexpr unsigned kSackBits = 256;
inline constexpr size_t kSackHelloLen = 8;
inline constexpr size_t kSackLen = kSackHelloLen + kSackBits / 8;

using SackBitmap = std::array<uint8_t, kSackBits / 8>;

// The payloads, as sent.
std::array<uint8_t, kSackHelloLen> sack_hello_payload() noexcept;
std::array<uint8_t, kSackLen> sack_payload(const SackBitmap& held) noexcept;

// Whether `payload` is a hello this version understands.
bool parse_sack_hello(std::span<const uint8_t> payload) noexcept;
// The bitmap of a SACK this version understands.
std::optional<SackBitmap> parse_sack(std::span<const uint8_t> payload) noexcept;

constexpr bool sack_bit(const SackBitmap& b, unsigned i) noexcept { return (b[i / 8] >> (i % 8)) & 1; }
constexpr void set_sack_bit(SackBitmap& b, unsigned i) noexcept { b[i / 8] = uint8_t(b[i / 8] | 1u << (i % 8)); }

}  // namespace uroce::wire
