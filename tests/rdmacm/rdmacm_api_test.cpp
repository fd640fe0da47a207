// rdmacm.Api: the C ABI of uroce's librdmacm.so.1 where rdma-core's
// behaviour is what libfabric, UCX and librpma rely on: addresses taken
// from rdma_getaddrinfo's hints, the per-device PD every id gets, and
// rdma_migrate_id of a synchronous id that still holds its request.
// Includes only <rdma/rdma_cma.h>; links only our libraries.  The device is
// UROCE_ADDR (set by ctest).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

namespace {

sockaddr_in v4(const char* addr, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons(port);
  inet_pton(AF_INET, addr, &s.sin_addr);
  return s;
}

const char* device_addr() {
  const char* a = std::getenv("UROCE_ADDR");
  return a && *a ? a : "127.0.0.1";
}

// Destroying a channel and then asking it for an event, on one thread, is a
// plain misuse: EBADF, as a read() of the closed fd gives under rdma-core.
TEST(RdmacmApi, GetCmEventOnAChannelThisThreadDestroyedFailsWithEbadf) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_destroy_event_channel(ch);
  rdma_cm_event* ev = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_get_cm_event(ch, &ev), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(ev, nullptr);
}

// Runs `body` in a child process, which reports on `ready` just before it
// calls rdma_get_cm_event; true when that call was still waiting 300 ms
// later (the child is then killed).
bool child_keeps_waiting(void (*body)(int ready)) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    body(fds[1]);
    ::_exit(3);  // rdma_get_cm_event returned
  }
  ::close(fds[1]);
  char c = 0;
  pollfd ready{fds[0], POLLIN, 0};
  const bool reached = ::poll(&ready, 1, 10'000) == 1 && ::read(fds[0], &c, 1) == 1;
  ::close(fds[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int st = 0;
  const bool running = ::waitpid(pid, &st, WNOHANG) == 0;
  if (running) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
  }
  return reached && running;
}

// rping's CM thread loops back into rdma_get_cm_event while main destroys
// the channel.  Had it got in first, it would wait forever (a read()
// blocked in the kernel's rdma_cm does); coming in just after must not be
// different -- an error made rping exit 255 after a clean run.
TEST(RdmacmApi, GetCmEventRacingAnotherThreadsTeardownKeepsWaiting) {
  EXPECT_TRUE(child_keeps_waiting([](int ready) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (!ch) ::_exit(2);
    std::thread([ch] { rdma_destroy_event_channel(ch); }).join();
    (void)!::write(ready, "r", 1);
    rdma_cm_event* ev = nullptr;
    rdma_get_cm_event(ch, &ev);
  }));
}

// No call on a non-blocking channel waits, before its destruction or after.
TEST(RdmacmApi, GetCmEventOnANonBlockingChannelAnotherThreadDestroyedFailsWithEbadf) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(::fcntl(ch->fd, F_SETFL, ::fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  rdma_cm_event* ev = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_get_cm_event(ch, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
  std::thread([ch] { rdma_destroy_event_channel(ch); }).join();
  // (Detached: a call that waits would wait for good.)
  auto done = std::make_shared<std::promise<std::pair<int, int>>>();
  auto call = done->get_future();
  std::thread([ch, done] {
    rdma_cm_event* e = nullptr;
    const int rc = rdma_get_cm_event(ch, &e);
    done->set_value({rc, errno});
  }).detach();
  ASSERT_EQ(call.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "it waited";
  const auto [rc, err] = call.get();
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(err, EBADF);
}

TEST(RdmacmApi, GetCmEventWaitingWhenAnotherThreadDestroysTheChannelKeepsWaiting) {
  EXPECT_TRUE(child_keeps_waiting([](int ready) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (!ch) ::_exit(2);
    std::thread([ch, ready] {
      (void)!::write(ready, "r", 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the call below is waiting by now
      rdma_destroy_event_channel(ch);
    }).detach();
    rdma_cm_event* ev = nullptr;
    rdma_get_cm_event(ch, &ev);
  }));
}

TEST(RdmacmApi, GetAddrInfoWithoutNamesTakesTheHintsAddresses) {
  sockaddr_in src = v4(device_addr(), 0), dst = v4(device_addr(), 7471);
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
  hints.ai_src_len = sizeof src;
  hints.ai_dst_addr = reinterpret_cast<sockaddr*>(&dst);
  hints.ai_dst_len = sizeof dst;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0) << std::strerror(errno);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  ASSERT_EQ(res->ai_dst_len, sizeof dst);
  EXPECT_EQ(std::memcmp(res->ai_dst_addr, &dst, sizeof dst), 0);
  ASSERT_EQ(res->ai_src_len, sizeof src);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
  rdma_freeaddrinfo(res);
  // Neither names nor addresses: nothing to answer.
  rdma_addrinfo empty{};
  EXPECT_NE(rdma_getaddrinfo(nullptr, nullptr, &empty, &res), 0);
}

TEST(RdmacmApi, EveryIdOnADeviceHasTheDevicesPd) {
  rdma_cm_id *a = nullptr, *b = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &a, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(nullptr, &b, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(a->pd, nullptr);  // no device yet
  sockaddr_in addr = v4(device_addr(), 0);
  ASSERT_EQ(rdma_bind_addr(a, reinterpret_cast<sockaddr*>(&addr)), 0) << std::strerror(errno);
  ASSERT_EQ(rdma_bind_addr(b, reinterpret_cast<sockaddr*>(&addr)), 0) << std::strerror(errno);
  ASSERT_NE(a->verbs, nullptr);
  ASSERT_NE(a->pd, nullptr);
  EXPECT_EQ(a->pd->context, a->verbs);
  EXPECT_EQ(b->pd, a->pd);
  // UCX's rdma_cm transport creates a QP of its own in it.
  ibv_cq* cq = ibv_create_cq(a->verbs, 1, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_UD;
  qa.cap = {2, 2, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(a->pd, &qa);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(rdma_destroy_id(a), 0);
  EXPECT_EQ(rdma_destroy_id(b), 0);
}

// librpma and libfabric: a request taken with rdma_get_request (a
// synchronous id holding its event), then moved to a channel of their own.
TEST(RdmacmApi, MigratingASynchronousIdAcknowledgesTheEventItHolds) {
  const uint16_t port = uint16_t(20000 + (getpid() % 20000));
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  const std::string service = std::to_string(port);
  ASSERT_EQ(rdma_getaddrinfo(device_addr(), service.c_str(), &hints, &res), 0);
  rdma_cm_id* listen = nullptr;
  ibv_qp_init_attr attr{};
  attr.cap = {4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_ep(&listen, res, nullptr, &attr), 0) << std::strerror(errno);
  rdma_freeaddrinfo(res);
  ASSERT_EQ(rdma_listen(listen, 2), 0);

  // The client connects (synchronously) in a thread of its own.
  auto client = std::async(std::launch::async, [&] {
    rdma_addrinfo h{}, *r = nullptr;
    h.ai_port_space = RDMA_PS_TCP;
    if (rdma_getaddrinfo(device_addr(), service.c_str(), &h, &r) != 0) return -1;
    rdma_cm_id* id = nullptr;
    ibv_qp_init_attr a{};
    a.cap = {4, 4, 1, 1, 0};
    int rc = rdma_create_ep(&id, r, nullptr, &a);
    rdma_freeaddrinfo(r);
    if (rc != 0) return -2;
    rc = rdma_connect(id, nullptr);
    if (rc == 0) rdma_disconnect(id);
    rdma_destroy_ep(id);
    return rc;
  });

  rdma_cm_id* child = nullptr;
  ASSERT_EQ(rdma_get_request(listen, &child), 0) << std::strerror(errno);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  auto migrated = std::async(std::launch::async, [&] { return rdma_migrate_id(child, ch); });
  ASSERT_EQ(migrated.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "rdma_migrate_id waits for the event the id itself holds";
  EXPECT_EQ(migrated.get(), 0);
  EXPECT_EQ(child->channel, ch);
  EXPECT_EQ(child->event, nullptr);
  // Accepted on the new channel: ESTABLISHED arrives there.
  ASSERT_EQ(rdma_accept(child, nullptr), 0) << std::strerror(errno);
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(rdma_get_cm_event(ch, &ev), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(ev->id, child);
  rdma_ack_cm_event(ev);
  ASSERT_EQ(rdma_get_cm_event(ch, &ev), 0);  // the client's disconnect
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_DISCONNECTED);
  rdma_ack_cm_event(ev);
  EXPECT_EQ(rdma_disconnect(child), 0);  // the reply the client waits for
  ASSERT_EQ(client.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(client.get(), 0);
  rdma_destroy_qp(child);
  EXPECT_EQ(rdma_destroy_id(child), 0);
  rdma_destroy_event_channel(ch);
  rdma_destroy_ep(listen);
}

// The thread of this process named `name` (/proc/self/task/*/comm), or 0.
pid_t thread_named(const std::string& name) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string comm;
    std::ifstream(std::string("/proc/self/task/") + e->d_name + "/comm") >> comm;
    if (comm == name) found = pid_t(std::atoi(e->d_name));
  }
  closedir(d);
  return found;
}

// The channel the death test's child opens: reachable to the end (the
// process exits from the handler; LeakSanitizer would count a local's).
rdma_event_channel* g_channel = nullptr;

// Our threads leave the fault signals unblocked, so an application's fault
// handler may run on one.  Some call exit() there (libinfinipath's, loaded
// by libfabric's psm provider, does): the atexit handlers then run on the
// CM thread, including ours that stops that very thread.  The process must
// end with the handler's status, not abort on a thread joining itself.
TEST(RdmacmApiDeathTest, AFaultHandlerThatExitsOnTheCmThreadEndsTheProcessWithItsStatus) {
#if defined(__SANITIZE_THREAD__)
#define UROCE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UROCE_TEST_TSAN 1
#endif
#endif
#ifdef UROCE_TEST_TSAN
  GTEST_SKIP() << "exit() from a handler on one thread runs the static destructors while the others run: "
                  "ThreadSanitizer reports that of any such program";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        g_channel = rdma_create_event_channel();  // starts the CM thread
        if (!g_channel) _exit(90);
        struct sigaction sa {};
        sa.sa_handler = [](int) { std::exit(7); };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, nullptr);
        pid_t cm = 0;
        for (int i = 0; i < 5000 && !cm; ++i, usleep(1000)) cm = thread_named("uroce-cm");
        if (!cm) _exit(91);
        syscall(SYS_tgkill, getpid(), cm, SIGSEGV);
        sleep(10);
        _exit(92);
      },
      ::testing::ExitedWithCode(7), "");
}

}  // namespace
