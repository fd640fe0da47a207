// The handle tables of the open contexts and the set of contexts this
// process has open (handles.hpp).
#include "handles.hpp"

#include <pthread.h>

#include <atomic>
#include <new>
#include <unordered_set>

#include "compat.hpp"

namespace uroce::compat {

namespace {

// One counter for the process: a handle of one context is never a handle
// of another, so an object passed with another context's pointer is not
// found there.
std::atomic<uint32_t> g_next_handle{1};

std::mutex g_contexts_mu;
// Made anew in a forked child: the parent's CM thread may have held it
// (modifying a QP for rdma_cm) at the fork.
[[maybe_unused]] const int g_contexts_fork =
    ::pthread_atfork(nullptr, nullptr, [] { new (&g_contexts_mu) std::mutex; });
std::unordered_set<const ibv_context*>& open_contexts() {
  static auto* set = new std::unordered_set<const ibv_context*>;  // outlives exit-time destructors
  return *set;
}

const char* why(int err) noexcept {
  return err == ENOENT ? "its handle is not an object of its context (destroyed, or of another context)"
                       : "its handle names another object of its context";
}

}  // namespace

uint32_t HandleTable::add(ObjKind kind, const void* obj) {
  uint32_t h = g_next_handle.fetch_add(1, std::memory_order_relaxed);
  if (h == 0) h = g_next_handle.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard g(mu_);
  map_[key(kind, h)] = {kind, obj};
  return h;
}

void HandleTable::add_channel(int fd, const void* obj) {
  std::lock_guard g(mu_);
  map_[key(ObjKind::channel, uint32_t(fd))] = {ObjKind::channel, obj};
}

void HandleTable::remove(ObjKind kind, uint32_t handle) noexcept {
  std::lock_guard g(mu_);
  map_.erase(key(kind, handle));
}

int HandleTable::check(ObjKind kind, uint32_t handle, const void* obj) const noexcept {
  std::lock_guard g(mu_);
  auto it = map_.find(key(kind, handle));
  if (it == map_.end()) return ENOENT;
  return it->second.kind == kind && it->second.obj == obj ? 0 : EINVAL;
}

void context_opened(const ibv_context* c) {
  std::lock_guard g(g_contexts_mu);
  open_contexts().insert(c);
}

void context_closed(const ibv_context* c) noexcept {
  std::lock_guard g(g_contexts_mu);
  open_contexts().erase(c);
}

Context* checked(const char* verb, ibv_context* c) noexcept {
  {
    std::lock_guard g(g_contexts_mu);
    if (c && open_contexts().count(c)) return to_ctx(c);
  }
  fail(verb, EINVAL, "the context is not a device this process has open");
  return nullptr;
}

namespace {

template <class T, class C>
T* checked_object(const char* verb, C* obj, ObjKind kind, ibv_context* ctx, uint32_t handle, const char* what) {
  if (!obj) {
    fail(verb, EINVAL, what);
    return nullptr;
  }
  Context* c = checked(verb, ctx);
  if (!c) return nullptr;
  if (const int err = c->handles.check(kind, handle, obj)) {
    fail(verb, err, why(err));
    return nullptr;
  }
  return reinterpret_cast<T*>(obj);
}

}  // namespace

Pd* checked(const char* verb, ibv_pd* p) noexcept {
  return checked_object<Pd>(verb, p, ObjKind::pd, p ? p->context : nullptr, p ? p->handle : 0, "no PD given");
}
Mr* checked(const char* verb, ibv_mr* m) noexcept {
  return checked_object<Mr>(verb, m, ObjKind::mr, m ? m->context : nullptr, m ? m->handle : 0, "no MR given");
}
Cq* checked(const char* verb, ibv_cq* q) noexcept {
  return checked_object<Cq>(verb, q, ObjKind::cq, q ? q->context : nullptr, q ? q->handle : 0, "no CQ given");
}
Qp* checked(const char* verb, ibv_qp* q) noexcept {
  return checked_object<Qp>(verb, q, ObjKind::qp, q ? q->context : nullptr, q ? q->handle : 0, "no QP given");
}
Srq* checked(const char* verb, ibv_srq* s) noexcept {
  return checked_object<Srq>(verb, s, ObjKind::srq, s ? s->context : nullptr, s ? s->handle : 0, "no SRQ given");
}
Xrcd* checked(const char* verb, ibv_xrcd* x) noexcept {
  return checked_object<Xrcd>(verb, x, ObjKind::xrcd, x ? x->context : nullptr, x ? to_xrcd(x)->handle : 0,
                              "no XRC domain given");
}
Mw* checked(const char* verb, ibv_mw* m) noexcept {
  return checked_object<Mw>(verb, m, ObjKind::mw, m ? m->context : nullptr, m ? m->handle : 0, "no MW given");
}
Ah* checked(const char* verb, ibv_ah* a) noexcept {
  return checked_object<Ah>(verb, a, ObjKind::ah, a ? a->context : nullptr, a ? a->handle : 0, "no AH given");
}
Channel* checked(const char* verb, ibv_comp_channel* ch) noexcept {
  return checked_object<Channel>(verb, ch, ObjKind::channel, ch ? ch->context : nullptr, ch ? uint32_t(ch->fd) : 0,
                                 "no completion channel given");
}

}  // namespace uroce::compat
