// wire/copy.hpp: the UROCE_COPY_WRITE and UROCE_COPY_NAK payloads, byte for
// byte, and what their parsers refuse.
#include "wire/copy.hpp"

#include <gtest/gtest.h>

#include "support/hex.hpp"

namespace uroce::wire {
namespace {

using test::to_hex;

CopyRequest sample() {
  CopyRequest w;
  w.flags = kCopyFirst | kCopyImm;
  w.packets = 3;
  w.bytes = 0x3000;
  w.va = 0x1122334455667788;
  w.rkey = 0xa1b2c3d4;
  w.length = 0x10001;
  w.imm = 0xdeadbeef;
  w.gate = 0x00c0ffee;
  w.ranges = {{0x7f0000001000, 0x1000}, {0x7f0000800003, 0x2000}};
  return w;
}

TEST(wire_copy, RequestByteForByte) {
  std::array<uint8_t, 128> buf{};
  const size_t n = write_copy_request(sample(), buf);
  ASSERT_EQ(n, kCopyHeaderLen + 2 * kCopyRangeLen);
  EXPECT_EQ(to_hex({buf.data(), n}),
            "75524357"  // "uRCW"
            "01"
            "05"
            "0002"              // version, FIRST|IMM, 2 ranges
            "00000003"          // packets
            "00003000"          // bytes
            "1122334455667788"  // va
            "a1b2c3d4"          // rkey
            "00010001"          // message length
            "deadbeef"          // immediate data
            "00c0ffee"          // gate generation
            "00007f0000001000"
            "00001000"
            "00007f0000800003"
            "00002000");
  const auto back = parse_copy_request({buf.data(), n});
  ASSERT_TRUE(back);
  const CopyRequest w = sample();
  EXPECT_EQ(back->flags, w.flags);
  EXPECT_EQ(back->packets, w.packets);
  EXPECT_EQ(back->bytes, w.bytes);
  EXPECT_EQ(back->va, w.va);
  EXPECT_EQ(back->rkey, w.rkey);
  EXPECT_EQ(back->length, w.length);
  EXPECT_EQ(back->imm, w.imm);
  EXPECT_EQ(back->gate, w.gate);
  EXPECT_EQ(back->ranges, w.ranges);
}

TEST(wire_copy, WriterRefusesWhatDoesNotFit) {
  std::array<uint8_t, kCopyHeaderLen + kCopyRangeLen> small{};
  EXPECT_EQ(write_copy_request(sample(), small), 0u);  // one range short
  CopyRequest many = sample();
  many.ranges.assign(kCopyMaxRanges + 1, CopyRange{0x1000, 1});
  std::vector<uint8_t> big(4096);
  EXPECT_EQ(write_copy_request(many, big), 0u);
}

TEST(wire_copy, ParserRefusesInconsistentRequests) {
  std::array<uint8_t, 128> buf{};
  const size_t n = write_copy_request(sample(), buf);
  ASSERT_GT(n, 0u);
  for (size_t len = 0; len < n; ++len) EXPECT_FALSE(parse_copy_request({buf.data(), len})) << len;
  std::vector<uint8_t> longer(buf.begin(), buf.begin() + ptrdiff_t(n));
  longer.push_back(0);
  EXPECT_FALSE(parse_copy_request(longer));  // a trailing byte
  auto mutate = [&](size_t at, uint8_t v) {
    auto b = buf;
    b[at] = v;
    return parse_copy_request({b.data(), n});
  };
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(mutate(i, uint8_t(buf[i] ^ 0x20))) << i;  // magic, version
  EXPECT_FALSE(mutate(5, 0x08));                                                        // an unknown flag
  EXPECT_FALSE(mutate(7, 3));                                                           // 3 ranges, 2 present
  EXPECT_FALSE(mutate(11, 0));                                                          // 0 packets
  EXPECT_FALSE(mutate(14, 0x31));                                                       // bytes != sum
  EXPECT_FALSE(mutate(kCopyHeaderLen + 10, 0));                                         // an empty range
  // A range that wraps around the address space.
  CopyRequest wrap = sample();
  wrap.ranges = {{~uint64_t(0) - 0x10, 0x3000}};
  const size_t m = write_copy_request(wrap, buf);
  ASSERT_GT(m, 0u);
  EXPECT_FALSE(parse_copy_request({buf.data(), m}));
}

TEST(wire_copy, NakByteForByte) {
  const auto p = copy_nak_payload(CopyNakReason::requester_fault);
  EXPECT_EQ(to_hex(p), "7552434e01020000");  // "uRCN", version 1, reason 2
  EXPECT_EQ(parse_copy_nak(p), CopyNakReason::requester_fault);
  EXPECT_EQ(parse_copy_nak(copy_nak_payload(CopyNakReason::refused)), CopyNakReason::refused);
  EXPECT_EQ(to_hex(copy_nak_payload(CopyNakReason::stale)), "7552434e01030000");
  EXPECT_EQ(parse_copy_nak(copy_nak_payload(CopyNakReason::stale)), CopyNakReason::stale);
  auto bad = p;
  bad[5] = 9;
  EXPECT_FALSE(parse_copy_nak(bad));
  for (size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(parse_copy_nak({p.data(), n})) << n;
  for (size_t i = 0; i < 5; ++i) {
    auto b = p;
    b[i] ^= 0x20;
    EXPECT_FALSE(parse_copy_nak(b)) << i;
  }
}

TEST(wire_copy, ReadDoneByteForByte) {
  const auto p = copy_done_payload(0x102);
  EXPECT_EQ(to_hex(p),
            "7552434401000000"
            "00000102");  // "uRCD", version 1, reserved, 258 packets
  EXPECT_EQ(parse_copy_done(p), 0x102u);
  EXPECT_FALSE(parse_copy_done(copy_done_payload(0)));  // stands for no packet
  for (size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(parse_copy_done({p.data(), n})) << n;
  for (size_t i = 0; i < 5; ++i) {
    auto b = p;
    b[i] ^= 0x20;
    EXPECT_FALSE(parse_copy_done(b)) << i;
  }
  EXPECT_FALSE(parse_copy_done(copy_nak_payload(CopyNakReason::refused)));
}

}  // namespace
}  // namespace uroce::wire
