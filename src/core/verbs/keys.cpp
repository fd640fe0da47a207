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

// The same mixing, for the 12-bit halves of the 24-bit network.
inline uint16_t round_fn12(uint16_t half, uint32_t key) noexcept {
  return uint16_t(round_fn(half, key ^ 0x5bd1e995U) & 0xfff);
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

uint32_t KeyCipher::permute24(uint32_t x) const noexcept {
  uint16_t l = uint16_t(x >> 12 & 0xfff), r = uint16_t(x & 0xfff);
  for (int i = 0; i < kRounds; ++i) {
    uint16_t t = uint16_t((l ^ round_fn12(r, round_keys_[i])) & 0xfff);
    l = r;
    r = t;
  }
  return uint32_t(l) << 12 | r;
}

uint32_t KeyCipher::unpermute24(uint32_t x) const noexcept {
  uint16_t l = uint16_t(x >> 12 & 0xfff), r = uint16_t(x & 0xfff);
  for (int i = kRounds - 1; i >= 0; --i) {
    uint16_t t = uint16_t((r ^ round_fn12(l, round_keys_[i])) & 0xfff);
    r = l;
    l = t;
  }
  return uint32_t(l) << 12 | r;
}

// Cycle walking: applying a permutation of the 2^n values until the result
// falls in the lower half permutes the lower half (each step leaves it on
// the same cycle); about two steps on average.
uint32_t KeyCipher::encode(const KeyFields& f) const noexcept {
  uint32_t x =
      (f.slot & (kMaxSlots - 1)) << 21 | (f.index & (kMaxIndex - 1)) << 5 | (f.gen & kGenMask) << 1 | uint32_t(f.kind);
  do x = permute(x);
  while (x & kWindowKeyBit);
  return x;
}

KeyFields KeyCipher::decode(uint32_t key) const noexcept {
  if (is_window_key(key)) return KeyFields{};
  uint32_t p = key;
  do p = unpermute(p);
  while (p & kWindowKeyBit);
  return KeyFields{p >> 21, (p >> 5) & (kMaxIndex - 1), (p >> 1) & kGenMask, KeyKind(p & 1)};
}

uint32_t KeyCipher::encode_window(const WindowKeyFields& f) const noexcept {
  uint32_t x = (f.slot & (kMaxSlots - 1)) << 13 | (f.index & (kMaxWindowIndex - 1)) << 2 | (f.gen & kWindowGenMask);
  do x = permute24(x);
  while (x & (1u << 23));
  return kWindowKeyBit | x << 8 | f.tag;
}

WindowKeyFields KeyCipher::decode_window(uint32_t key) const noexcept {
  if (!is_window_key(key)) return WindowKeyFields{};
  uint32_t p = (key >> 8) & 0x7fffff;
  do p = unpermute24(p);
  while (p & (1u << 23));
  return WindowKeyFields{p >> 13, (p >> 2) & (kMaxWindowIndex - 1), p & kWindowGenMask, uint8_t(key)};
}

}  // namespace uroce::verbs
