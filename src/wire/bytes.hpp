// Big-endian (network order) byte access for wire formats.
//
// Three layers, cheapest first:
//  - load_be*/store_be*: unchecked loads/stores at a pointer, for code that
//    has checked the length once (the encoder checks header_len up front);
//  - Reader: a cursor over a span that refuses to read past its end: every
//    getter returns false on a short buffer and then leaves the output and the
//    cursor untouched;
//  - Writer: the same for writing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce::wire {

constexpr uint16_t load_be16(const uint8_t* p) noexcept { return uint16_t(p[0] << 8 | p[1]); }
constexpr uint32_t load_be24(const uint8_t* p) noexcept { return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]; }
constexpr uint32_t load_be32(const uint8_t* p) noexcept {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
constexpr uint64_t load_be64(const uint8_t* p) noexcept { return uint64_t(load_be32(p)) << 32 | load_be32(p + 4); }

constexpr void store_be16(uint8_t* p, uint16_t v) noexcept {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
constexpr void store_be24(uint8_t* p, uint32_t v) noexcept {  // low 24 bits of v
  p[0] = uint8_t(v >> 16);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v);
}
constexpr void store_be32(uint8_t* p, uint32_t v) noexcept {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}
constexpr void store_be64(uint8_t* p, uint64_t v) noexcept {
  store_be32(p, uint32_t(v >> 32));
  store_be32(p + 4, uint32_t(v));
}

// Little-endian 32-bit access: only the ICRC is sent least-significant byte first.
constexpr uint32_t load_le32(const uint8_t* p) noexcept {
  return uint32_t(p[3]) << 24 | uint32_t(p[2]) << 16 | uint32_t(p[1]) << 8 | p[0];
}
constexpr void store_le32(uint8_t* p, uint32_t v) noexcept {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

// Bounds-checked big-endian reader.  A failed read consumes nothing.
class Reader {
 public:
  constexpr explicit Reader(std::span<const uint8_t> buf) noexcept : buf_(buf) {}

  constexpr size_t remaining() const noexcept { return buf_.size() - pos_; }
  constexpr size_t position() const noexcept { return pos_; }
  constexpr bool empty() const noexcept { return remaining() == 0; }
  // What has not been read yet.
  constexpr std::span<const uint8_t> rest() const noexcept { return buf_.subspan(pos_); }

  constexpr bool u8(uint8_t& v) noexcept {
    if (remaining() < 1) return false;
    v = buf_[pos_++];
    return true;
  }
  constexpr bool u16(uint16_t& v) noexcept { return get(v, 2, load_be16); }
  constexpr bool u24(uint32_t& v) noexcept { return get(v, 3, load_be24); }
  constexpr bool u32(uint32_t& v) noexcept { return get(v, 4, load_be32); }
  constexpr bool u64(uint64_t& v) noexcept { return get(v, 8, load_be64); }
  constexpr bool skip(size_t n) noexcept {
    if (remaining() < n) return false;
    pos_ += n;
    return true;
  }
  // A view of the next n bytes (no copy).
  constexpr bool bytes(size_t n, std::span<const uint8_t>& out) noexcept {
    if (remaining() < n) return false;
    out = buf_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  // Copies the next out.size() bytes.
  bool copy(std::span<uint8_t> out) noexcept {
    if (remaining() < out.size()) return false;
    if (!out.empty()) std::memcpy(out.data(), buf_.data() + pos_, out.size());
    pos_ += out.size();
    return true;
  }

 private:
  template <class T, class F>
  constexpr bool get(T& v, size_t n, F load) noexcept {
    if (remaining() < n) return false;
    v = T(load(buf_.data() + pos_));
    pos_ += n;
    return true;
  }

  std::span<const uint8_t> buf_;
  size_t pos_ = 0;
};

// Bounds-checked big-endian writer.  A failed write writes nothing.
class Writer {
 public:
  constexpr explicit Writer(std::span<uint8_t> buf) noexcept : buf_(buf) {}

  constexpr size_t remaining() const noexcept { return buf_.size() - pos_; }
  constexpr size_t position() const noexcept { return pos_; }
  // What has been written so far.
  constexpr std::span<uint8_t> written() const noexcept { return buf_.first(pos_); }

  constexpr bool u8(uint8_t v) noexcept {
    if (remaining() < 1) return false;
    buf_[pos_++] = v;
    return true;
  }
  constexpr bool u16(uint16_t v) noexcept { return put(v, 2, store_be16); }
  constexpr bool u24(uint32_t v) noexcept { return put(v, 3, store_be24); }
  constexpr bool u32(uint32_t v) noexcept { return put(v, 4, store_be32); }
  constexpr bool u64(uint64_t v) noexcept { return put(v, 8, store_be64); }
  // n zero bytes.
  bool zeros(size_t n) noexcept {
    if (remaining() < n) return false;
    if (n) std::memset(buf_.data() + pos_, 0, n);
    pos_ += n;
    return true;
  }
  bool bytes(std::span<const uint8_t> b) noexcept {
    if (remaining() < b.size()) return false;
    if (!b.empty()) std::memcpy(buf_.data() + pos_, b.data(), b.size());
    pos_ += b.size();
    return true;
  }

 private:
  template <class T, class F>
  constexpr bool put(T v, size_t n, F store) noexcept {
    if (remaining() < n) return false;
    store(buf_.data() + pos_, v);
    pos_ += n;
    return true;
  }

  std::span<uint8_t> buf_;
  size_t pos_ = 0;
};

}  // namespace uroce::wire
