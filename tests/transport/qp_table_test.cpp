// QP numbers: slot << 14 | index, indexes handed out cyclically from a
// random start (as rxe does), never 0 or 1, never the multicast QPN.
#include "transport/qp_table.hpp"

#include <gtest/gtest.h>

#include <set>

namespace uroce::test {

using transport::QpEngine;
using transport::QpTable;

// The table only stores the pointers; it never looks behind them.
QpEngine* fake(uintptr_t i) { return reinterpret_cast<QpEngine*>(0x1000 + i * 64); }

TEST(QpTable, NumbersCarryTheSlotAndStartWhereAsked) {
  QpTable t(5, 100);
  auto a = t.add(*fake(1));
  auto b = t.add(*fake(2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, 5u << 14 | 100);
  EXPECT_EQ(*b, 5u << 14 | 101);
  EXPECT_EQ(t.find(*a), fake(1));
  EXPECT_EQ(t.find(*b), fake(2));
  EXPECT_EQ(t.find(6u << 14 | 100), nullptr) << "another slot's number";
  EXPECT_EQ(QpTable::slot_of(*b), 5u);
  EXPECT_EQ(t.size(), 2u);
}

TEST(QpTable, FreedIndexesComeBackOnlyAfterAFullTurn) {
  QpTable t(1, 2);
  auto a = t.add(*fake(1));
  ASSERT_TRUE(a.ok());
  t.remove(*a, *fake(1));
  EXPECT_EQ(t.find(*a), nullptr);
  auto b = t.add(*fake(2));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*b, *a) << "a destroyed QP's number is not handed out again at once";
  t.remove(*a, *fake(3));  // not its owner: nothing happens
  EXPECT_EQ(t.find(*b), fake(2));
}

TEST(QpTable, WrapsAroundSkippingTheManagementQps) {
  QpTable t(2, QpTable::kIndexMask);
  auto last = t.add(*fake(1));
  auto wrapped = t.add(*fake(2));
  ASSERT_TRUE(last.ok() && wrapped.ok());
  EXPECT_EQ(*last & QpTable::kIndexMask, QpTable::kIndexMask);
  EXPECT_EQ(*wrapped & QpTable::kIndexMask, QpTable::kFirstIndex) << "indexes 0 and 1 are QP0 and QP1";
}

TEST(QpTable, FullTableIsENOMEMAndTheMulticastQpnIsNeverGiven) {
  QpTable t(1023, 7);  // slot 1023: index 0x3fff would make 0xffffff
  std::set<uint32_t> seen;
  for (uint32_t i = 0;; ++i) {
    auto q = t.add(*fake(i));
    if (!q.ok()) {
      EXPECT_EQ(q.status().code(), ENOMEM);
      break;
    }
    EXPECT_NE(*q, 0xffffffu);
    EXPECT_GE(*q & QpTable::kIndexMask, QpTable::kFirstIndex);
    EXPECT_TRUE(seen.insert(*q).second) << "QPN 0x" << std::hex << *q << " given twice";
  }
  EXPECT_EQ(seen.size(), size_t(QpTable::kIndexMask - QpTable::kFirstIndex));  // all but 0, 1 and 0x3fff
}

TEST(QpTable, RandomStartsAreValidIndexes) {
  std::set<uint32_t> starts;
  for (int i = 0; i < 64; ++i) {
    const uint32_t s = QpTable::random_index();
    EXPECT_GE(s, QpTable::kFirstIndex);
    EXPECT_LE(s, QpTable::kIndexMask);
    starts.insert(s);
  }
  EXPECT_GT(starts.size(), 32u) << "64 draws of 14 random bits";
}

}  // namespace uroce::test
