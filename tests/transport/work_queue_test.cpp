// WorkQueue: a FIFO addressed by free-running counters whose storage grows
// from 16 entries to max_wr as entries first pile up, keeping each entry's
// WQE, SGEs and inline bytes where its counter finds them.
#include "transport/work_queue.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace uroce::transport {
namespace {

// Entry n: wr_id n, SGEs (n, k), inline bytes n + k.
void fill(WorkQueue<SendWqe>& q, uint32_t n) {
  SendWqe* w = q.push();
  ASSERT_NE(w, nullptr) << "push " << n;
  w->wr_id = n;
  for (uint32_t k = 0; k < q.max_sge(); ++k) q.sges(n)[k] = verbs::Sge{n, k, n ^ k};
  for (uint32_t k = 0; k < q.inline_bytes(); ++k) q.inline_data(n)[k] = uint8_t(n + k);
}

void expect_entry(WorkQueue<SendWqe>& q, uint32_t n) {
  EXPECT_EQ(q.at(n).wr_id, n);
  for (uint32_t k = 0; k < q.max_sge(); ++k) {
    const verbs::Sge& s = q.sges(n)[k];
    EXPECT_TRUE(s.addr == n && s.length == k && s.lkey == (n ^ k)) << "entry " << n << " sge " << k;
  }
  for (uint32_t k = 0; k < q.inline_bytes(); ++k) ASSERT_EQ(q.inline_data(n)[k], uint8_t(n + k)) << "entry " << n;
}

TEST(WorkQueue, DeepQueueStartsSmallAndGrowsOnlyAsEntriesPileUp) {
  WorkQueue<SendWqe> q;
  q.init(128, 2, 8);
  EXPECT_EQ(q.room(), 16u);
  // 1,000 entries through it, never more than 16 at a time: no growth.
  for (uint32_t n = 0; n < 1000; ++n) {
    fill(q, n);
    if (q.size() == 16) {
      expect_entry(q, q.head());
      q.pop();
    }
  }
  EXPECT_EQ(q.room(), 16u);
  // 17 at a time: twice the room, the 16 already there kept.
  fill(q, 1000);
  fill(q, 1001);
  EXPECT_EQ(q.size(), 17u);
  EXPECT_EQ(q.room(), 32u);
  for (uint32_t n = q.head(); n != q.tail(); ++n) expect_entry(q, n);
}

TEST(WorkQueue, GrowingAcrossTheWrapKeepsOrderSgesAndInlineBytes) {
  WorkQueue<SendWqe> q;
  q.init(100, 3, 5);
  // Head in the middle of the storage, tail wrapped past its end.
  for (uint32_t n = 0; n < 10; ++n) fill(q, n);
  for (int i = 0; i < 10; ++i) q.pop();
  uint32_t next = 10;
  while (q.size() < 100) fill(q, next++);
  EXPECT_EQ(q.room(), 128u);  // 16 -> 32 -> 64 -> 128
  EXPECT_TRUE(q.full());
  EXPECT_EQ(q.push(), nullptr);  // max_wr, not the room, bounds it
  for (uint32_t n = q.head(); n != q.tail(); ++n) expect_entry(q, n);
  for (uint32_t n = 10; n < next; ++n) {
    ASSERT_EQ(q.at(q.head()).wr_id, n);
    q.pop();
  }
  EXPECT_TRUE(q.empty());
}

TEST(WorkQueue, ShallowQueueIsAllocatedToItsSize) {
  WorkQueue<RecvWqe> q;
  q.init(5, 1);
  EXPECT_EQ(q.room(), 8u);
  for (uint32_t n = 0; n < 5; ++n) ASSERT_NE(q.push(), nullptr);
  EXPECT_EQ(q.push(), nullptr);
  EXPECT_EQ(q.room(), 8u);
}

TEST(WorkQueue, RaisedBoundLetsTheQueueGrowFurther) {
  WorkQueue<RecvWqe> q;
  q.init(16, 1);
  for (uint32_t n = 0; n < 16; ++n) q.push()->wr_id = n;
  EXPECT_EQ(q.push(), nullptr);
  q.set_max_wr(40);
  for (uint32_t n = 16; n < 40; ++n) ASSERT_NE(q.push(), nullptr) << n;
  EXPECT_EQ(q.push(), nullptr);
  EXPECT_EQ(q.room(), 64u);
  for (uint32_t n = 0; n < 16; ++n) EXPECT_EQ(q.at(n).wr_id, n);
}

}  // namespace
}  // namespace uroce::transport
