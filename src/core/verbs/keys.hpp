// Memory keys: unique on the host, not sequential, not guessable.
//
// A key is a keyed 32-bit permutation (a Feistel network, secret from the
// host registry) of  slot(10) | index(16) | generation(5) | kind(1):
//  - slot: this process's registry slot, so two processes never hand out the
//    same key (the permutation is the same host-wide, its inputs differ);
//  - index: the MR's place in this process's table, so a lookup is O(1);
//  - generation: bumped when an index is reused, so a stale key misses;
//  - kind: lkey (0) or rkey (1), so a local key is useless remotely.
// Without the secret the next key cannot be predicted from earlier ones.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace uroce::verbs {

enum class KeyKind : uint8_t { local = 0, remote = 1 };

struct KeyFields {
  uint32_t slot = 0;   // 10 bits
  uint32_t index = 0;  // 16 bits
  uint32_t gen = 0;    // 5 bits
  KeyKind kind = KeyKind::local;
};

class KeyCipher {
 public:
  static constexpr uint32_t kMaxSlots = 1u << 10;
  static constexpr uint32_t kMaxIndex = 1u << 16;
  static constexpr uint32_t kGenMask = 0x1f;

  explicit KeyCipher(std::span<const uint8_t, 16> secret) noexcept;

  uint32_t encode(const KeyFields& f) const noexcept;
  KeyFields decode(uint32_t key) const noexcept;

 private:
  uint32_t permute(uint32_t x) const noexcept;
  uint32_t unpermute(uint32_t x) const noexcept;
  static constexpr int kRounds = 6;
  std::array<uint32_t, kRounds> round_keys_{};
};

}  // namespace uroce::verbs
