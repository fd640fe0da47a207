// ShmBell: how a shared-memory producer wakes a consumer that sleeps in
// poll() (ShmIo): a one-byte datagram to the consumer's Unix datagram
// socket in the abstract namespace of its network namespace.
//
// The socket's name carries a random 64-bit token that the consumer writes
// into its ring's header (mode 0600: only the user's own processes read
// it), so the name cannot be taken before the consumer binds it.  A
// datagram says nothing but "look at the ring": a stray one (anyone in the
// namespace may send to an abstract socket) costs a wake-up, no more.
// The RoCEv2 socket sees no bell, so a capture of the UDP port shows only
// RoCEv2 packets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {

class ShmBell {
 public:
  // The consumer's bell, bound to a fresh random name.
  static Result<ShmBell> open();
  // A socket to ring bells with (unbound).
  static Result<UniqueFd> open_ringer();
  // Rings the bell of `token` from `ringer`.  True when the bell rang or
  // already holds a datagram its owner has not read; false when nobody
  // listens (the consumer is gone) or the datagram could not be sent.
  static bool ring(int ringer, uint64_t token) noexcept;

  int fd() const noexcept { return fd_.get(); }
  uint64_t token() const noexcept { return token_; }
  // Reads the datagrams waiting; returns how many.  Any thread.
  size_t drain() noexcept;

 private:
  ShmBell(UniqueFd fd, uint64_t token) : fd_(std::move(fd)), token_(token) {}
  UniqueFd fd_;
  uint64_t token_ = 0;
};

}  // namespace uroce::net
