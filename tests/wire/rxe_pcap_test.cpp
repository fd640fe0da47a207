// 865 frames captured from the Linux kernel's Soft-RoCE (rdma_rxe): every one
// decodes, re-encodes byte for byte (ICRC computed from the frame's own IP
// fields, including its real, non-zero IP ID), and its ID can be solved.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>

#include "support/hex.hpp"
#include "support/pcap.hpp"
#include "support/roce_packet.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace uroce::wire {
namespace {

struct Capture {
  const char* file;
  size_t frames;
  std::map<uint8_t, int> opcodes;  // opcode -> frames
};

const Capture kCaptures[] = {
    {"rxe_rc_pingpong.pcap", 200, {{0x00, 40}, {0x01, 80}, {0x02, 40}, {0x11, 40}}},
    {"rxe_ud_pingpong.pcap", 200, {{0x64, 200}}},
    {"rxe_rping.pcap", 65, {{0x04, 20}, {0x0a, 5}, {0x0c, 5}, {0x10, 5}, {0x11, 25}, {0x64, 5}}},
    {"rxe_ib_write_bw.pcap", 200, {{0x06, 4}, {0x07, 191}, {0x08, 3}, {0x11, 2}}},
    {"rxe_ib_read_lat.pcap", 200, {{0x0c, 100}, {0x10, 100}}},
};

// Keeps GoogleTest from printing the struct's bytes in test names.
void PrintTo(const Capture& c, std::ostream* os) { *os << c.file; }

class wire_rxe_pcap : public ::testing::TestWithParam<Capture> {};

TEST_P(wire_rxe_pcap, EveryFrameRoundTripsWithItsIcrc) {
  const Capture& c = GetParam();
  auto file = test::read_pcap(std::string(UROCE_TEST_DATA "/") + c.file);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->linktype, test::kLinktypeEthernet);
  const auto frames = test::roce_frames(*file);
  ASSERT_EQ(file->frames.size(), c.frames);
  ASSERT_EQ(frames.size(), c.frames);
  std::map<uint8_t, int> opcodes;
  for (const auto& f : frames) {
    SCOPED_TRACE("frame " + std::to_string(f.index));
    Packet p;
    DecodeError err{};
    ASSERT_TRUE(decode(f.payload(), p, err)) << to_string(err);
    ++opcodes[p.hdr.bth.opcode];
    ASSERT_EQ(test::to_hex(test::make_udp_payload(p.hdr, p.payload, f.ip.fields)), test::to_hex(f.payload()));
    EXPECT_EQ(verify_icrc(f.ip.fields, f.payload()), IcrcCheck::ok);
  }
  EXPECT_EQ(opcodes, c.opcodes);
}

// rxe sends from the kernel with DF set and a per-destination IP ID counter,
// never 0: a user-space receiver must solve for it.
TEST_P(wire_rxe_pcap, IpIdIsSolvedFromTheIcrc) {
  const Capture& c = GetParam();
  auto file = test::read_pcap(std::string(UROCE_TEST_DATA "/") + c.file);
  ASSERT_TRUE(file.ok());
  for (const auto& f : test::roce_frames(*file)) {
    EXPECT_EQ(f.ip.fields.ipv4_frag, 0x4000);
    EXPECT_NE(f.ip.fields.ipv4_id, 0);
    IpUdpFields guess = f.ip.fields;
    guess.ipv4_id = 0;
    uint16_t id = 0;
    ASSERT_EQ(verify_icrc(guess, f.payload(), &id), IcrcCheck::ok_id_solved) << f.index;
    EXPECT_EQ(id, f.ip.fields.ipv4_id) << f.index;
    guess.ipv4_frag = 0;  // wrong flags too
    ASSERT_EQ(verify_icrc(guess, f.payload(), &id), IcrcCheck::ok_id_solved) << f.index;
    EXPECT_EQ(id, f.ip.fields.ipv4_id) << f.index;
  }
}

INSTANTIATE_TEST_SUITE_P(captures, wire_rxe_pcap, ::testing::ValuesIn(kCaptures), [](const auto& info) {
  std::string n = info.param.file;
  n = n.substr(4, n.size() - 9);  // rxe_X.pcap -> X
  return n;
});

TEST(wire_rxe_pcap_total, EightHundredSixtyFiveFrames) {
  size_t total = 0;
  for (const Capture& c : kCaptures) total += c.frames;
  EXPECT_EQ(total, 865u);
}

TEST(wire_rxe_pcap_total, UdAndCmMadFields) {
  auto ud = test::read_pcap(UROCE_TEST_DATA "/rxe_ud_pingpong.pcap");
  ASSERT_TRUE(ud.ok());
  for (const auto& f : test::roce_frames(*ud)) {
    Packet p;
    DecodeError err{};
    ASSERT_TRUE(decode(f.payload(), p, err));
    EXPECT_EQ(p.hdr.deth.qkey, 0x11111111u);  // ibv_ud_pingpong's Q_Key
    EXPECT_EQ(p.hdr.deth.src_qp, 0x12u);
  }
  auto rping = test::read_pcap(UROCE_TEST_DATA "/rxe_rping.pcap");
  ASSERT_TRUE(rping.ok());
  int mads = 0;
  for (const auto& f : test::roce_frames(*rping)) {
    Packet p;
    DecodeError err{};
    ASSERT_TRUE(decode(f.payload(), p, err));
    if (p.hdr.bth.opcode != 0x64) continue;
    ++mads;  // rdma_cm MADs: QP1 to QP1, the GSI Q_Key, a 256-byte MAD
    EXPECT_EQ(p.hdr.bth.dest_qp, 1u);
    EXPECT_EQ(p.hdr.deth.src_qp, 1u);
    EXPECT_EQ(p.hdr.deth.qkey, 0x80010000u);
    EXPECT_EQ(p.payload.size(), 256u);
  }
  EXPECT_EQ(mads, 5);
}

}  // namespace
}  // namespace uroce::wire
