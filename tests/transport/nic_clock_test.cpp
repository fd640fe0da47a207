// The engine's clock (Nic::now_): read once per poll and post, and by the
// I/O through PacketIo::use_clock.  The stamp of the last send is the one
// reading that must come after the send itself: a waiter's spin counts from
// it (Nic::wait_spin), and a send can take long (on loopback it runs the
// receiver's path).  Stamped with the clock read before the send, a
// notify-mode ping-pong's waiter slept before its answer came.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <vector>

#include "copy_fixture.hpp"
#include "fake_wire.hpp"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;

// A send that takes 300 us, and when it ended.
class SlowSendIo final : public copy::ForwardingIo {
 public:
  using copy::ForwardingIo::ForwardingIo;
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override {
    const size_t sent = inner_->send_batch(pkts);
    const Clock::time_point until = Clock::now() + std::chrono::microseconds(300);
    while (Clock::now() < until) {
    }
    ended_ = Clock::now();
    return sent;
  }
  Clock::time_point ended() const noexcept { return ended_; }

 private:
  Clock::time_point ended_{};
};

TEST(NicClock, TheLastSendIsStampedWhenTheSendEnded) {
  std::vector<SlowSendIo*> ios;
  PairOptions o;
  o.wrap = [&ios](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    auto slow = std::make_unique<SlowSendIo>(std::move(io));
    ios.push_back(slow.get());
    return slow;
  };
  Fake f(o);
  Pair& p = *f.p;
  ASSERT_EQ(ios.size(), 2u);
  SlowSendIo* a_io = ios[0]->local() == f.a_ep ? ios[0] : ios[1];
  ASSERT_EQ(a_io->local(), f.a_ep);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 64)}).ok());
  Sge sge = p.a.sge(0, 64);
  const Clock::time_point before = Clock::now();
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());  // (an idle QP sends at once)
  ASSERT_GT(a_io->ended(), before);                                        // the post sent it
  Clock::time_point stamped;
  {
    std::lock_guard g(p.a.ctx->nic().mu());
    stamped = p.a.ctx->nic().last_tx();
  }
  EXPECT_GE(stamped, a_io->ended())
      << "stamped " << std::chrono::duration_cast<std::chrono::microseconds>(a_io->ended() - stamped).count()
      << " us before the send ended";
  expect_one(*p.a.scq, 1, WcOpcode::send, 64);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 64);
}

}  // namespace
}  // namespace uroce::test
