// The copy gate (transport/copy_gate.hpp) on its own: a fence waits for a
// copy counted in before it, a copy counted in after it sees the new
// generation and stays shut, and a copy that never ends is given up on
// after the bound.
#include "transport/copy_gate.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace uroce::transport {
namespace {

using namespace std::chrono_literals;

// The two words of a ring header's gate, held as ShmIo hands them out.
std::shared_ptr<std::atomic<uint64_t>> make_gate(uint64_t generation) {
  auto words = std::shared_ptr<std::atomic<uint64_t>[]>(new std::atomic<uint64_t>[2]);
  words[0].store(generation);
  words[1].store(0);
  return std::shared_ptr<std::atomic<uint64_t>>(words, &words[0]);
}

TEST(CopyGate, ARequestOfTheCurrentGenerationIsLetThroughAndCounted) {
  auto gate = make_gate(0xfffffffe);
  const uint32_t gen = copy_gate_generation(gate.get());
  EXPECT_EQ(gen, 0xfffffffeu);
  {
    const CopyGateHold hold(gate, gen);
    EXPECT_TRUE(hold.open());
    EXPECT_EQ(gate.get()[1].load(), 1u);
    const CopyGateHold other(gate, gen - 1);  // built before a fence
    EXPECT_FALSE(other.open());
    EXPECT_EQ(gate.get()[1].load(), 2u);  // (counted in all the same, until it goes)
  }
  EXPECT_EQ(gate.get()[1].load(), 0u);
  EXPECT_FALSE(CopyGateHold(nullptr, 0).open());  // no gate (the ring is gone): shut
  {
    CopyGateHold hold(gate, gen);
    hold.release();  // the copy is over before the scope
    EXPECT_EQ(gate.get()[1].load(), 0u);
    hold.release();  // (once only)
  }
  EXPECT_EQ(gate.get()[1].load(), 0u);  // and not again at the end of the scope
}

TEST(CopyGate, AFenceWaitsForTheCopyInProgressAndShutsLaterOnes) {
  auto gate = make_gate(7);
  std::atomic<bool> copying{false}, fence_done{false}, copy_finished{false};
  std::thread copier([&] {
    const CopyGateHold hold(gate, 7);
    ASSERT_TRUE(hold.open());
    copying = true;
    std::this_thread::sleep_for(30ms);  // the copy
    EXPECT_FALSE(fence_done.load()) << "the fence returned while a copy was in progress";
    copy_finished = true;
  });
  while (!copying) std::this_thread::yield();
  EXPECT_EQ(copy_gate_fence(gate.get(), 0, 5s), 0u);
  fence_done = true;
  EXPECT_TRUE(copy_finished.load());
  copier.join();
  EXPECT_EQ(copy_gate_generation(gate.get()), 8u);
  EXPECT_FALSE(CopyGateHold(gate, 7).open()) << "a request built before the fence";
  EXPECT_TRUE(CopyGateHold(gate, 8).open());
}

// A copy that never ends (its copier died in the middle) is given up on
// after the bound; after that its count is the floor later fences wait
// down to, so they still wait for new copies but not for it.
TEST(CopyGate, AFenceGivesUpOnACopyThatNeverEndsAndLaterOnesWaitOnlyForNewCopies) {
  auto gate = make_gate(1);
  gate.get()[1].store(1);  // a copier that died in the middle
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(copy_gate_fence(gate.get(), 0, 20ms), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_EQ(copy_gate_generation(gate.get()), 2u);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(copy_gate_fence(gate.get(), 1, 5s), 1u);  // the stuck one alone: no wait
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 1s);
  std::atomic<bool> release{false};
  std::thread copier([&] {
    const CopyGateHold hold(gate, 3);
    ASSERT_TRUE(hold.open());
    while (!release) std::this_thread::yield();
  });
  while (gate.get()[1].load() != 2) std::this_thread::yield();
  std::thread fence([&] { EXPECT_EQ(copy_gate_fence(gate.get(), 1, 5s), 1u); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(copy_gate_generation(gate.get()), 4u);
  release = true;  // the new copy ends: the fence returns
  fence.join();
  copier.join();
  EXPECT_EQ(copy_gate_fence(nullptr, 0, 20ms), 0u);  // no gate: nothing to wait for
}

}  // namespace
}  // namespace uroce::transport
