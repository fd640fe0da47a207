// A context's async event queue (verbs/context.hpp): events come out in
// order, one per fd count; forgetting an object's events drops those queued
// and waits out one being handed out, so that a destroy which forgets first
// never frees an object that a consumer is still counting an event against.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "fake_context.hpp"

namespace uroce::verbs {
namespace {

using namespace std::chrono_literals;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

TEST(AsyncEvents, ComeOutInOrderAndForgetDropsOnlyTheObjectsOwn) {
  auto ctx = open_fake_context();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  Context& c = **ctx;
  int a = 0, b = 0;
  c.post_async_event({AsyncEventType::qp_last_wqe_reached, &a});
  c.post_async_event({AsyncEventType::comm_est, &b});
  c.post_async_event({AsyncEventType::qp_fatal, &a});
  c.post_async_event({AsyncEventType::port_active, nullptr, 1});
  c.forget_async_events(&a);
  auto e1 = c.get_async_event();
  ASSERT_TRUE(e1.ok());
  EXPECT_EQ(e1->type, AsyncEventType::comm_est);
  EXPECT_EQ(e1->element, &b);
  auto e2 = c.get_async_event();
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(e2->type, AsyncEventType::port_active);
  EXPECT_FALSE(readable(c.async_fd()));  // the fd's count went with the forgotten events
}

TEST(AsyncEvents, ForgetWaitsForAnEventBeingHandedOut) {
  auto ctx = open_fake_context();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  Context& c = **ctx;
  int qp = 0;
  c.post_async_event({AsyncEventType::qp_last_wqe_reached, &qp});
  std::atomic<bool> in_delivery{false}, delivery_done{false};
  std::thread consumer([&] {
    auto ev = c.get_async_event([&](const AsyncEvent& e) {
      EXPECT_EQ(e.element, &qp);
      in_delivery.store(true);
      std::this_thread::sleep_for(100ms);  // a consumer slow to count it
      delivery_done.store(true);
    });
    EXPECT_TRUE(ev.ok());
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!in_delivery.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  if (!in_delivery.load()) {
    consumer.join();
    FAIL() << "the event was never handed out";
  }
  c.forget_async_events(&qp);
  EXPECT_TRUE(delivery_done.load()) << "forget returned while the event was being handed out";
  consumer.join();
  EXPECT_FALSE(readable(c.async_fd()));
}

// A blocking take waits for an event and never fails with EAGAIN, even
// while another thread posts and forgets events under it (the fd is read
// only under the queue's lock); the fd's flags stay the application's.
TEST(AsyncEvents, ABlockingTakeWaitsThroughForgottenEvents) {
  auto ctx = open_fake_context();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  Context& c = **ctx;
  const int flags = ::fcntl(c.async_fd(), F_GETFL);
  ASSERT_FALSE(flags & O_NONBLOCK);
  int a = 0, b = 0;
  std::atomic<int> failures{0}, taken_a{0};
  std::thread reader([&] {
    while (failures.load() < 100) {
      auto ev = c.get_async_event();
      if (!ev.ok()) {
        ++failures;
        continue;
      }
      if (ev->element == &b) return;
      ++taken_a;
    }
  });
  for (int i = 0; i < 20000; ++i) {
    c.post_async_event({AsyncEventType::qp_fatal, &a});
    c.forget_async_events(&a);
  }
  c.post_async_event({AsyncEventType::comm_est, &b});
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(::fcntl(c.async_fd(), F_GETFL), flags);
  EXPECT_FALSE(readable(c.async_fd()));
}

}  // namespace
}  // namespace uroce::verbs
