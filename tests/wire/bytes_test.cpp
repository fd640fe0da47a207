// wire/bytes.hpp: big-endian Reader/Writer refuse short buffers.
#include "wire/bytes.hpp"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace uroce::wire {
namespace {

constexpr std::array<uint8_t, 19> kBytes = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a,
                                            0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13};

TEST(wire_bytes, ReaderReadsBigEndianInOrder) {
  Reader r(kBytes);
  uint8_t a = 0;
  uint16_t b = 0;
  uint32_t c = 0, d = 0;
  uint64_t e = 0;
  ASSERT_TRUE(r.u8(a) && r.u16(b) && r.u24(c) && r.u32(d) && r.u64(e));
  EXPECT_EQ(a, 0x01);
  EXPECT_EQ(b, 0x0203);
  EXPECT_EQ(c, 0x040506u);
  EXPECT_EQ(d, 0x0708090au);
  EXPECT_EQ(e, 0x0b0c0d0e0f101112ull);
  EXPECT_EQ(r.position(), 18u);
  EXPECT_EQ(r.remaining(), 1u);
  EXPECT_EQ(r.rest().front(), 0x13);
}

TEST(wire_bytes, ReaderRefusesShortBufferWithoutConsuming) {
  // Each getter on a buffer one byte too short fails and leaves state alone.
  std::vector<uint8_t> buf(kBytes.begin(), kBytes.begin() + 7);
  for (size_t have = 0; have < 8; ++have) {
    const std::span<const uint8_t> part = std::span(buf).first(have);
    uint16_t v16 = 0xaaaa;
    uint32_t v24 = 0xaaaaaaaa, v32 = 0xaaaaaaaa;
    uint64_t v64 = 0xaaaaaaaaaaaaaaaa;
    Reader r2{part};
    EXPECT_EQ(r2.u16(v16), have >= 2);
    if (have < 2) {
      EXPECT_EQ(v16, 0xaaaa);
    }
    Reader r3{part};
    EXPECT_EQ(r3.u24(v24), have >= 3);
    if (have < 3) {
      EXPECT_EQ(v24, 0xaaaaaaaau);
    }
    Reader r4{part};
    EXPECT_EQ(r4.u32(v32), have >= 4);
    if (have < 4) {
      EXPECT_EQ(v32, 0xaaaaaaaau);
      EXPECT_EQ(r4.position(), 0u);
    }
    Reader r8{part};
    EXPECT_FALSE(r8.u64(v64));
    EXPECT_EQ(v64, 0xaaaaaaaaaaaaaaaaull);
    EXPECT_EQ(r8.position(), 0u);
  }
}

TEST(wire_bytes, ReaderSkipAndBytes) {
  Reader r(kBytes);
  EXPECT_FALSE(r.skip(20));
  EXPECT_EQ(r.position(), 0u);
  EXPECT_TRUE(r.skip(3));
  std::span<const uint8_t> v;
  EXPECT_FALSE(r.bytes(17, v));
  EXPECT_TRUE(v.empty());
  ASSERT_TRUE(r.bytes(2, v));
  EXPECT_EQ(v.data(), kBytes.data() + 3);
  EXPECT_EQ(v.size(), 2u);
  std::array<uint8_t, 3> out{};
  EXPECT_TRUE(r.copy(out));
  EXPECT_EQ(out, (std::array<uint8_t, 3>{0x06, 0x07, 0x08}));
  EXPECT_TRUE(r.skip(r.remaining()));
  EXPECT_TRUE(r.empty());
  uint8_t b = 0x55;
  EXPECT_FALSE(r.u8(b));
  EXPECT_EQ(b, 0x55);
}

TEST(wire_bytes, WriterWritesBigEndianAndRefusesOverflow) {
  std::array<uint8_t, 18> buf{};
  Writer w(buf);
  ASSERT_TRUE(w.u8(0x01) && w.u16(0x0203) && w.u24(0xff040506) && w.u32(0x0708090a) && w.u64(0x0b0c0d0e0f101112));
  EXPECT_TRUE(std::equal(buf.begin(), buf.end(), kBytes.begin()));
  EXPECT_EQ(w.remaining(), 0u);
  EXPECT_FALSE(w.u8(0));

  std::array<uint8_t, 3> small{0xee, 0xee, 0xee};
  Writer s(small);
  EXPECT_FALSE(s.u32(0x11223344));
  EXPECT_EQ(small, (std::array<uint8_t, 3>{0xee, 0xee, 0xee}));  // nothing written
  EXPECT_EQ(s.position(), 0u);
  EXPECT_FALSE(s.bytes(kBytes));
  EXPECT_TRUE(s.zeros(2));
  EXPECT_FALSE(s.zeros(2));
  EXPECT_EQ(s.written().size(), 2u);
  EXPECT_EQ(small, (std::array<uint8_t, 3>{0, 0, 0xee}));
}

TEST(wire_bytes, UncheckedLoadsAndStores) {
  uint8_t b[8] = {};
  store_be16(b, 0xabcd);
  EXPECT_EQ(b[0], 0xab);
  EXPECT_EQ(load_be16(b), 0xabcd);
  store_be24(b, 0xff123456);  // only the low 24 bits
  EXPECT_EQ(b[0], 0x12);
  EXPECT_EQ(load_be24(b), 0x123456u);
  store_le32(b, 0x0a0b0c0d);  // ICRC order: least-significant byte first
  EXPECT_EQ(b[0], 0x0d);
  EXPECT_EQ(b[3], 0x0a);
  EXPECT_EQ(load_le32(b), 0x0a0b0c0du);
  EXPECT_EQ(load_be32(b), 0x0d0c0b0au);
  store_be64(b, 0x0102030405060708);
  EXPECT_EQ(b[7], 0x08);
  EXPECT_EQ(load_be64(b), 0x0102030405060708ull);
  static_assert(load_be32(kBytes.data()) == 0x01020304);
}

}  // namespace
}  // namespace uroce::wire
