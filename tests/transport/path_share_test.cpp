// PathShare, the window the RC QPs sending to one peer share: its
// arithmetic and turns by hand (path_share_test), then QPs over a FakeNetwork
// whose receive queue overflows.
#include "transport/path_share.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace uroce::transport {
namespace {

using namespace std::chrono_literals;

constexpr Clock::time_point kT0{std::chrono::seconds(100)};

TEST(PathShare, UnlimitedUntilALossAndOneQpAloneIsNeverHeld) {
  PathShare p;
  EXPECT_FALSE(p.limited());
  p.recharge(0, 5000);
  EXPECT_EQ(p.busy_qps(), 1u);
  EXPECT_FALSE(p.on_loss(kT0, 1ms)) << "one QP's losses are its own window's";
  EXPECT_FALSE(p.limited());
  // Limited by two QPs' loss, then the other leaves: the one left is not held.
  p.recharge(0, 100);
  ASSERT_TRUE(p.on_loss(kT0, 1ms));
  p.recharge(100, 0);
  EXPECT_TRUE(p.allows(5000, 6000, false));
}

TEST(PathShare, ALossHalvesWhatWasInFlightOncePerGapNotBelowTheMinimum) {
  PathShare p;
  p.recharge(0, 300);
  p.recharge(0, 100);
  EXPECT_EQ(p.in_flight(), 400u);
  EXPECT_EQ(p.busy_qps(), 2u);
  ASSERT_TRUE(p.on_loss(kT0, 1ms));
  EXPECT_EQ(p.window(), 200.0);
  EXPECT_TRUE(p.limited());
  EXPECT_FALSE(p.on_loss(kT0 + 999us, 1ms)) << "the same event";
  EXPECT_EQ(p.window(), 200.0);
  ASSERT_TRUE(p.on_loss(kT0 + 1ms, 1ms));
  EXPECT_EQ(p.window(), 100.0) << "half the window when more is in flight";
  for (int i = 2; i < 10; ++i) p.on_loss(kT0 + i * 1ms, 1ms);
  EXPECT_EQ(p.window(), PathShare::kMinPkts);
}

TEST(PathShare, AWindowsWorthOfAcksGrowsItByGrowPkts) {
  PathShare p;
  p.recharge(0, 64);
  p.recharge(0, 64);
  ASSERT_TRUE(p.on_loss(kT0, 1ms));
  ASSERT_EQ(p.window(), 64.0);
  p.on_ack(63);
  EXPECT_EQ(p.window(), 64.0);
  p.on_ack(1);
  EXPECT_EQ(p.window(), 64.0 + PathShare::kGrowPkts);
  p.on_ack(72 + 80);
  EXPECT_EQ(p.window(), 64.0 + 3 * PathShare::kGrowPkts);
}

TEST(PathShare, RechargingMovesInFlightAndBusyQps) {
  PathShare p;
  p.recharge(0, 10);
  p.recharge(0, 20);
  p.recharge(10, 4);
  EXPECT_EQ(p.in_flight(), 24u);
  EXPECT_EQ(p.busy_qps(), 2u);
  p.recharge(4, 0);
  EXPECT_EQ(p.in_flight(), 20u);
  EXPECT_EQ(p.busy_qps(), 1u);
  p.recharge(20, 0);
  EXPECT_EQ(p.in_flight(), 0u);
  EXPECT_EQ(p.busy_qps(), 0u);
  p.recharge(0, 0);
  EXPECT_EQ(p.busy_qps(), 0u);
}

TEST(PathShare, AFullWindowHoldsQpsAndTurnsComeInOrderAsRoomComes) {
  PathShare p;
  p.recharge(0, 40);  // QP 1
  p.recharge(0, 40);  // QP 2
  ASSERT_TRUE(p.on_loss(kT0, 1ms));
  ASSERT_EQ(p.window(), 40.0);
  // Full: QP 3 (nothing in flight) and QP 1 (one more) are held.
  EXPECT_FALSE(p.allows(0, 0, false));
  EXPECT_FALSE(p.allows(40, 40, false));
  p.wait(3);
  p.wait(1);
  uint32_t qpn = 0;
  EXPECT_FALSE(p.next_turn(qpn)) << "no room yet";
  p.recharge(40, 0);   // QP 2's ACKs
  p.recharge(40, 30);  // and some of QP 1's: room for 10
  ASSERT_TRUE(p.next_turn(qpn));
  EXPECT_EQ(qpn, 3u);
  // While QP 1 waits, a QP with no turn is held even with room; QP 3,
  // whose turn it is, sends while the window has room.
  EXPECT_FALSE(p.allows(0, 0, false));
  EXPECT_TRUE(p.allows(0, 0, true));
  EXPECT_TRUE(p.allows(0, 9, true));
  EXPECT_FALSE(p.allows(0, 10, true));
  p.recharge(0, 10);  // QP 3 sent 10
  EXPECT_FALSE(p.next_turn(qpn)) << "full again";
  p.recharge(30, 0);
  ASSERT_TRUE(p.next_turn(qpn));
  EXPECT_EQ(qpn, 1u);
  EXPECT_FALSE(p.waiting());
  EXPECT_TRUE(p.allows(0, 0, false)) << "nobody waits: room is anyone's";
  EXPECT_TRUE(p.allows(10, 10, false)) << "QP 3 is alone with packets in flight";
}

TEST(PathShare, AQpAloneWithOthersWaitingKeepsToTheWindowAndTheQueue) {
  PathShare p;
  p.recharge(0, 100);  // QP 1
  p.recharge(0, 100);  // QP 2
  ASSERT_TRUE(p.on_loss(kT0, 1ms));
  ASSERT_EQ(p.window(), 100.0);
  p.recharge(100, 0);  // QP 2 is done: QP 1 is alone
  EXPECT_TRUE(p.allows(100, 150, false)) << "alone, nobody waiting: its own window only";
  p.wait(3);  // QP 3 waits for room
  EXPECT_FALSE(p.allows(100, 100, false)) << "alone, but QP 3 waits: the window and the queue hold";
  p.recharge(100, 60);  // QP 1's ACKs
  uint32_t qpn = 0;
  ASSERT_TRUE(p.next_turn(qpn));
  EXPECT_EQ(qpn, 3u);
  EXPECT_TRUE(p.allows(60, 60, false)) << "nobody waits any more";
}

TEST(PathShare, AQpWhoseTurnFoundNoRoomGoesFirstAgain) {
  PathShare p;
  p.recharge(0, 40);
  p.recharge(0, 40);
  ASSERT_TRUE(p.on_loss(kT0, 1ms));
  p.recharge(40, 30);
  p.recharge(40, 0);  // room for 10
  p.wait(5);
  p.wait(6);
  uint32_t qpn = 0;
  ASSERT_TRUE(p.next_turn(qpn));
  ASSERT_EQ(qpn, 5u);
  p.recharge(0, 10);  // another QP with a turn took the room
  p.wait_first(5);
  p.recharge(30, 20);
  ASSERT_TRUE(p.next_turn(qpn));
  EXPECT_EQ(qpn, 5u);
  ASSERT_TRUE(p.next_turn(qpn));
  EXPECT_EQ(qpn, 6u);
}

}  // namespace
}  // namespace uroce::transport
