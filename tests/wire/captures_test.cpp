// suite.pcap (one crafted packet per opcode rxe and ConnectX use, IPv4 and
// IPv6) and neg.pcap (broken packets): every verdict asserted.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/hex.hpp"
#include "support/pcap.hpp"
#include "support/roce_packet.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace uroce::wire {
namespace {

test::PcapFile load(const char* name) {
  auto f = test::read_pcap(std::string(UROCE_TEST_DATA "/") + name);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : test::PcapFile{};
}

TEST(wire_captures, SuiteDecodesReencodesAndVerifiesEveryFrame) {
  const auto file = load("suite.pcap");
  const auto frames = test::roce_frames(file);
  ASSERT_EQ(file.frames.size(), 31u);
  ASSERT_EQ(frames.size(), 31u);
  const std::vector<uint8_t> kOpcodes = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a,
                                         0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x11, 0x11, 0x12, 0x13,
                                         0x14, 0x16, 0x17, 0x24, 0x64, 0x65, 0x64, 0x81, 0x06};
  std::vector<uint8_t> seen;
  for (const auto& f : frames) {
    SCOPED_TRACE("frame " + std::to_string(f.index));
    Packet p;
    DecodeError err{};
    ASSERT_TRUE(decode(f.payload(), p, err)) << to_string(err);
    seen.push_back(p.hdr.bth.opcode);
    EXPECT_EQ(test::to_hex(test::make_udp_payload(p.hdr, p.payload, f.ip.fields)), test::to_hex(f.payload()));
    EXPECT_EQ(verify_icrc(f.ip.fields, f.payload()), IcrcCheck::ok);
    if (f.index < 30) {
      EXPECT_EQ(f.ip.fields.ipv4_id, 0x1000 + f.index);  // the generator's IDs
    }
  }
  EXPECT_EQ(seen, kOpcodes);
  EXPECT_FALSE(frames[30].ip.fields.src.is_v4());
}

TEST(wire_captures, SuiteFieldsOfInterest) {
  const auto file = load("suite.pcap");
  const auto frames = test::roce_frames(file);
  ASSERT_EQ(frames.size(), 31u);
  auto dec = [&](size_t i) {
    Packet p;
    DecodeError err{};
    EXPECT_TRUE(decode(frames[i].payload(), p, err));
    return p;
  };
  const Packet pad3 = dec(4);  // RC SEND_ONLY "abcde" + 3 pad
  EXPECT_EQ(pad3.hdr.bth.pad, 3);
  EXPECT_EQ(std::string(pad3.payload.begin(), pad3.payload.end()), "abcde");
  EXPECT_EQ(aeth_type(dec(18).hdr.aeth.syndrome), AckType::nak);
  EXPECT_EQ(NakCode(aeth_value(dec(18).hdr.aeth.syndrome)), NakCode::psn_sequence_error);
  EXPECT_EQ(aeth_type(dec(19).hdr.aeth.syndrome), AckType::rnr_nak);
  EXPECT_EQ(aeth_value(dec(19).hdr.aeth.syndrome), 14);
  EXPECT_EQ(dec(20).hdr.atomic_ack.orig, 42u);
  const Packet cas = dec(21);
  EXPECT_EQ(cas.hdr.atomic.va, 0x7f0000004000ull);
  EXPECT_EQ(cas.hdr.atomic.swap_add, 43u);
  EXPECT_EQ(cas.hdr.atomic.compare, 42u);
  EXPECT_EQ(dec(24).hdr.ieth, 0x5678u);
  const Packet mad = dec(28);  // CM REQ MAD on QP1
  EXPECT_EQ(mad.hdr.bth.dest_qp, 1u);
  EXPECT_EQ(mad.hdr.deth.qkey, 0x80010000u);
  EXPECT_EQ(mad.hdr.deth.src_qp, 1u);
  EXPECT_EQ(mad.payload.size(), 256u);
  EXPECT_TRUE(dec(29).hdr.bth.becn);  // the CNP
}

// neg.pcap: six frames, each with a valid IP/UDP header.  What they hold
// (read from the file): a WRITE_FIRST cut inside its RETH, an unknown opcode
// (0x1f), a READ_REQUEST without RETH, a SEND_ONLY of 10 bytes (shorter than
// a BTH), an ACK with a 2-byte AETH, and a SEND_ONLY with its ICRC's last
// bit flipped.  The first five carry ICRCs that are correct for their bytes.
TEST(wire_captures, NegativesAreAllRefused) {
  const auto file = load("neg.pcap");
  const auto frames = test::roce_frames(file);
  ASSERT_EQ(file.frames.size(), 6u);
  ASSERT_EQ(frames.size(), 6u);
  struct Want {
    uint8_t opcode;
    size_t len;
    bool decodes;
    DecodeError err;
    IcrcCheck icrc;
  };
  const Want kWant[] = {
      {0x06, 24, false, DecodeError::truncated, IcrcCheck::ok},
      {0x1f, 32, false, DecodeError::unknown_opcode, IcrcCheck::ok},
      {0x0c, 16, false, DecodeError::truncated, IcrcCheck::ok},
      {0x04, 10, false, DecodeError::truncated, IcrcCheck::bad},
      {0x11, 18, false, DecodeError::truncated, IcrcCheck::ok},
      {0x04, 32, true, DecodeError{}, IcrcCheck::bad},
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    const auto& f = frames[i];
    EXPECT_EQ(f.payload()[0], kWant[i].opcode);
    EXPECT_EQ(f.payload().size(), kWant[i].len);
    Packet p;
    DecodeError err{};
    const bool ok = decode(f.payload(), p, err);
    EXPECT_EQ(ok, kWant[i].decodes);
    if (!ok) {
      EXPECT_EQ(err, kWant[i].err) << to_string(err);
    }
    EXPECT_EQ(verify_icrc(f.ip.fields, f.payload()), kWant[i].icrc);
    // Every frame is refused by one check or the other, whatever the IP ID.
    IpUdpFields unknown_id = f.ip.fields;
    unknown_id.ipv4_id = 0;
    EXPECT_TRUE(!ok || verify_icrc(unknown_id, f.payload()) == IcrcCheck::bad);
  }
}

}  // namespace
}  // namespace uroce::wire
