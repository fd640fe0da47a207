// Memory keys: unique on the host, not sequential, not guessable.
//
// The top bit says what a key names: 0 a memory region, 1 a memory window.
//
// A region's key is a keyed permutation of the 31-bit values (a 32-bit
// Feistel network, secret from the host registry, walked until its result
// has the top bit clear) of  slot(10) | index(16) | generation(4) | kind(1):
//  - slot: this process's registry slot, so two processes never hand out the
//    same key (the permutation is the same host-wide, its inputs differ);
//  - index: the MR's place in this process's table, so a lookup is O(1);
//  - generation: bumped when an index is reused, so a stale key misses;
//  - kind: lkey (0) or rkey (1), so a local key is useless remotely.
// Without the secret the next key cannot be predicted from earlier ones.
//
// A window's rkey is  1 | id(23) | tag(8): the tag is the consumer's (IB
// lets it choose the low byte at each bind, ibv_inc_rkey); the id is a keyed
// permutation of the 23-bit values (a 24-bit Feistel network, walked) of
// slot(10) | index(11) | generation(2), fixed for the window's life.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace uroce::verbs {

enum class KeyKind : uint8_t { local = 0, remote = 1 };

struct KeyFields {
  uint32_t slot = 0;   // 10 bits
  uint32_t index = 0;  // 16 bits
  uint32_t gen = 0;    // 4 bits
  KeyKind kind = KeyKind::local;
};

struct WindowKeyFields {
  uint32_t slot = 0;   // 10 bits
  uint32_t index = 0;  // 11 bits
  uint32_t gen = 0;    // 2 bits
  uint8_t tag = 0;     // the consumer's low byte
};

inline constexpr uint32_t kWindowKeyBit = 1u << 31;
inline constexpr bool is_window_key(uint32_t key) noexcept { return key & kWindowKeyBit; }

class KeyCipher {
 public:
  static constexpr uint32_t kMaxSlots = 1u << 10;
  static constexpr uint32_t kMaxIndex = 1u << 16;
  static constexpr uint32_t kGenMask = 0xf;
  static constexpr uint32_t kMaxWindowIndex = 1u << 11;
  static constexpr uint32_t kWindowGenMask = 0x3;

  explicit KeyCipher(std::span<const uint8_t, 16> secret) noexcept;

  // A region's key (top bit clear), and back; decode() of a window key
  // yields index 0, which no region has.
  uint32_t encode(const KeyFields& f) const noexcept;
  KeyFields decode(uint32_t key) const noexcept;
  // A window's rkey (top bit set), and back.
  uint32_t encode_window(const WindowKeyFields& f) const noexcept;
  WindowKeyFields decode_window(uint32_t key) const noexcept;

 private:
  uint32_t permute(uint32_t x) const noexcept;
  uint32_t unpermute(uint32_t x) const noexcept;
  uint32_t permute24(uint32_t x) const noexcept;
  uint32_t unpermute24(uint32_t x) const noexcept;
  static constexpr int kRounds = 6;
  std::array<uint32_t, kRounds> round_keys_{};
};

}  // namespace uroce::verbs
