// What the API objects own: one object of the core each, plus the links the
// API needs (parent, back-pointer to the public object that owns it now).
// Private to the library; the public headers only forward-declare these.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdio>
#include <memory>
#include <mutex>
#include <unordered_map>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "uroce/device.hpp"
#include "verbs/ah.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/mw.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"
#include "verbs/srq.hpp"

namespace uroce::detail {

// Destroys `impl` unless objects created from it are still alive
// (`live` > 0): then a debug build asserts, a release build warns and leaks
// it, so that those children can still be used and destroyed safely.
template <class Impl>
void destroy_children_first(std::unique_ptr<Impl>& impl, int live, const char* what) {
  if (live > 0) {
    std::fprintf(stderr,
                 "uroce: %s destroyed while %d object(s) created from it or using it are alive; "
                 "destroy children first. Leaking it.\n",
                 what, live);
    assert(live == 0 && "uroce: destroy children before their parent");
#if defined(__SANITIZE_ADDRESS__)
    __lsan_ignore_object(impl.get());  // leaked on purpose
#endif
    (void)impl.release();
    return;
  }
  // Waits for whatever another thread may still do with the public object
  // (impl is still in place: reset() clears it before the destructor runs).
  if constexpr (requires { impl->quiesce(); }) impl->quiesce();
  impl.reset();
}

struct ContextImpl {
  std::unique_ptr<verbs::Context> ctx;
  DeviceInfo info;
  DeviceAttributes dev_attr;
  PortAttributes port_attr;

  // Core object -> API object, to name the object of an async event.
  std::mutex mu;
  std::unordered_map<const void*, QpImpl*> qps;
  std::unordered_map<const void*, CqImpl*> cqs;
  std::unordered_map<const void*, SrqImpl*> srqs;

  static Context make(std::unique_ptr<ContextImpl> p) { return Context(std::move(p)); }
  template <class Map, class Impl>
  void track(Map& m, const void* core, Impl* impl) {
    std::lock_guard g(mu);
    m[core] = impl;
  }
  template <class Map>
  void untrack(Map& m, const void* core) {
    std::lock_guard g(mu);
    m.erase(core);
  }
  // The API objects an event of the core is about, where they still exist.
  AsyncEvent name_event(const verbs::AsyncEvent& ev);
};

struct ChannelImpl {
  std::unique_ptr<verbs::CompChannel> ch;
  ContextImpl* ctx = nullptr;
  ~ChannelImpl();
};

struct CqImpl {
  std::unique_ptr<verbs::Cq> cq;
  ContextImpl* ctx = nullptr;
  std::atomic<CompletionQueue*> owner{nullptr};  // moves store it while events are named
  // Before destruction: drops the CQ's queued events and waits for those
  // handed out to be acknowledged.
  void quiesce();
  ~CqImpl();
};

struct PdImpl {
  std::unique_ptr<verbs::Pd> pd;
  ContextImpl* ctx = nullptr;
  ~PdImpl();
};

struct MrImpl {
  std::unique_ptr<verbs::Mr> mr;
};

struct MwImpl {
  std::unique_ptr<verbs::Mw> mw;
  uint32_t last_grant = 0;  // the rkey of the last bind handed out
};

struct AhImpl {
  std::unique_ptr<verbs::Ah> ah;
};

struct SrqImpl {
  std::unique_ptr<verbs::Srq> srq;
  ContextImpl* ctx = nullptr;
  std::atomic<SharedReceiveQueue*> owner{nullptr};
  ~SrqImpl();
};

struct QpImpl {
  std::unique_ptr<verbs::Qp> qp;
  ContextImpl* ctx = nullptr;
  std::atomic<QueuePair*> owner{nullptr};
  uint32_t initial_psn = 0;
  ~QpImpl();
};

}  // namespace uroce::detail
