// The responder's reorder buffer (transport/reorder.hpp) on its own: what it
// keeps, refuses and gives back, and that nothing stale survives.
#include "transport/reorder.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::transport {
namespace {

struct Pkt {
  std::vector<uint8_t> data;
  wire::Packet p;
  Pkt(uint32_t psn, size_t len, uint8_t fill) : data(len, fill) {
    p.hdr.bth.psn = psn;
    p.payload = data;
  }
};

TEST(ReorderBuffer, KeepsCopiesAndGivesThemBackOnce) {
  ReorderBuffer rb;
  Pkt a(105, 100, 0xaa), b(107, 50, 0xbb);
  EXPECT_EQ(rb.keep(a.p, 5), ReorderBuffer::Keep::kept);
  EXPECT_EQ(rb.keep(b.p, 7), ReorderBuffer::Keep::kept);
  EXPECT_EQ(rb.keep(a.p, 5), ReorderBuffer::Keep::duplicate);
  a.data.assign(100, 0);  // the receive buffer is reused: the copy is ours
  EXPECT_EQ(rb.held(), 2u);
  EXPECT_EQ(rb.highest(), 107u);
  wire::Packet out;
  std::vector<uint8_t> payload;
  EXPECT_FALSE(rb.take(106, out, payload));
  ASSERT_TRUE(rb.take(105, out, payload));
  EXPECT_EQ(out.hdr.bth.psn, 105u);
  EXPECT_EQ(std::vector<uint8_t>(out.payload.begin(), out.payload.end()), std::vector<uint8_t>(100, 0xaa));
  EXPECT_FALSE(rb.take(105, out, payload));
  EXPECT_EQ(rb.held(), 1u);
}

TEST(ReorderBuffer, RefusesWhatItCannotHold) {
  ReorderBuffer rb;
  Pkt p(300, 10, 1);
  EXPECT_EQ(rb.keep(p.p, 0), ReorderBuffer::Keep::no_room);
  EXPECT_EQ(rb.keep(p.p, ReorderBuffer::kSlots), ReorderBuffer::Keep::no_room);
  // The byte cap (not reached at RoCE's largest MTU, 255 x 4 KiB): 9000-byte
  // payloads until 2 MiB are held.
  std::vector<Pkt> big;
  for (uint32_t i = 1; i < ReorderBuffer::kSlots; ++i) big.emplace_back(1000 + i, 9000, uint8_t(i));
  size_t kept = 0;
  for (uint32_t i = 1; i < ReorderBuffer::kSlots; ++i)
    kept += rb.keep(big[i - 1].p, i) == ReorderBuffer::Keep::kept ? 1 : 0;
  EXPECT_EQ(kept, ReorderBuffer::kMaxBytes / 9000);
  EXPECT_EQ(rb.held(), kept);
}

// A packet kept for a PSN the expected one then passed without taking it
// (a READ's range covered it) is released when its slot comes round again,
// long before the 24-bit PSN space wraps back to it.
TEST(ReorderBuffer, StalePacketsAreReleasedNotReturned) {
  ReorderBuffer rb;
  Pkt a(0xfffff0, 8, 1);  // near the wrap
  ASSERT_EQ(rb.keep(a.p, 4), ReorderBuffer::Keep::kept);
  wire::Packet out;
  std::vector<uint8_t> payload;
  const uint32_t later = (0xfffff0 + ReorderBuffer::kSlots) & 0xffffff;  // same slot, after the wrap
  EXPECT_FALSE(rb.take(later, out, payload));
  EXPECT_TRUE(rb.empty());
  EXPECT_FALSE(rb.take(0xfffff0, out, payload));
  Pkt b(later, 8, 2);
  EXPECT_EQ(rb.keep(b.p, 3), ReorderBuffer::Keep::kept);
}

}  // namespace
}  // namespace uroce::transport
