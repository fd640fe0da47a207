// Handle checks, as the kernel makes them for rdma-core: every object the C
// ABI hands out is entered in its context's table under a handle unique in
// the process, and every verb that takes an object (destroy, modify,
// query, create on a parent) looks the object's `handle` up in the table
// of the object's `context` first.  A handle that is not there, names an
// object of another type or another object, or a context this process
// did not open, fails the call with the kernel's errno (ENOENT for an
// unknown handle, EINVAL otherwise) and leaves every object untouched.
// The data path (post, poll, notify) is not checked, as in rdma-core's
// providers.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace uroce::compat {

enum class ObjKind : uint8_t { pd, mr, cq, qp, srq, ah, channel, mw, xrcd };

class HandleTable {
 public:
  // Enters `obj` and returns its handle (a completion channel's handle is
  // its fd, which the channel brings).
  uint32_t add(ObjKind kind, const void* obj);
  void add_channel(int fd, const void* obj);
  void remove(ObjKind kind, uint32_t handle) noexcept;
  // 0 if `handle` names `obj`, of `kind`; else the errno value.
  int check(ObjKind kind, uint32_t handle, const void* obj) const noexcept;

 private:
  struct Entry {
    ObjKind kind;
    const void* obj;
  };
  static uint64_t key(ObjKind kind, uint32_t handle) noexcept {
    return kind == ObjKind::channel ? (uint64_t{1} << 32) | handle : handle;
  }
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> map_;
};

}  // namespace uroce::compat
