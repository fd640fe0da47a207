#include "verbs/keys.hpp"

#include <cstring>

namespace uroce::verbs {
namespace {

// Round function: any function makes a Feistel network a permutation; this
// one mixes well (multiply-xorshift).
inline uint16_t round_fn(uint16_t half, uint32_t key) noexcept {
  uint32_t x = (uint32_t(half) << 16 | half) ^ key;
  x ^= x >> 15;
  x *= 0x2c1b3c6dU;
  x ^= x >> 12;
  x *= 0x297a2d39U;
  x ^= x >> 15;
  return uint16_t(x);
}

}  // namespace

KeyCipher::KeyCipher(std::span<const uint8_t, 16> secret) noexcept {
  uint32_t words[4];
  std::memcpy(words, secret.data(), 16);
  for (int i = 0; i < kRounds; ++i) {
    uint32_t k = words[i % 4] + 0x9e3779b9U * uint32_t(i + 1);
    k ^= words[(i + 1) % 4] >> (i + 3);
    round_keys_[i] = k;
  }
}

uint32_t KeyCipher::permute(uint32_t x) const noexcept {
  uint16_t l = uint16_t(x >> 16), r = uint16_t(x);
  for (int i = 0; i < kRounds; ++i) {
    uint16_t t = uint16_t(l ^ round_fn(r, round_keys_[i]));
    l = r;
    r = t;
  }
  return uint32_t(l) << 16 | r;
}

uint32_t KeyCipher::unpermute(uint32_t x) const noexcept {
  uint16_t l = uint16_t(x >> 16), r = uint16_t(x);
  for (int i = kRounds - 1; i >= 0; --i) {
    uint16_t t = uint16_t(r ^ round_fn(l, round_keys_[i]));
    r = l;
    l = t;
  }
  return uint32_t(l) << 16 | r;
}

uint32_t KeyCipher::encode(const KeyFields& f) const noexcept {
  uint32_t plain =
      (f.slot & (kMaxSlots - 1)) << 22 | (f.index & (kMaxIndex - 1)) << 6 | (f.gen & kGenMask) << 1 | uint32_t(f.kind);
  return permute(plain);
}

KeyFields KeyCipher::decode(uint32_t key) const noexcept {
  uint32_t p = unpermute(key);
  return KeyFields{p >> 22, (p >> 6) & (kMaxIndex - 1), (p >> 1) & kGenMask, KeyKind(p & 1)};
}

}  // namespace uroce::verbs
