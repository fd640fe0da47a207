// The transmit batch: packets are built into preallocated slots (headers,
// pad and ICRC in the slot, payload gathered straight from application
// memory) and leave in one sendmmsg per batch.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "net/packet_io.hpp"
#include "wire/headers.hpp"
#include "wire/icrc.hpp"

namespace uroce::transport {

struct Counters;

class TxBatch {
 public:
  static constexpr size_t kSlots = 64;
  static constexpr size_t kBounce = 4096 + 64;  // path MTU + a GRH's worth
  // Bodies up to this long are copied into the slot (add()).
  static constexpr size_t kCopiedBody = 512;

  TxBatch();

  // Packets to one destination of one size (the last may be shorter) form
  // GSO trains of up to `n` packets (0/1: never; see net::TxPacket).
  void set_gso_max(uint16_t n) noexcept { gso_max_ = n; }
  // Packets may form trains: an ACK added right after a longer packet to
  // the same destination leaves in its datagram.
  bool trains() const noexcept { return gso_max_ > 1; }
  // The next packet starts a datagram of its own.
  void close_train() noexcept { train_closed_ = true; }
  // Leave each packet's ICRC to the I/O (net::PendingIcrc), which may
  // send it without one; else compute it in add().
  void set_defer_icrc(bool on) noexcept { defer_icrc_ = on; }

  bool full() const noexcept { return n_ == kSlots; }
  // The train the packet added last went into: a number that changes with
  // every train started (equal for two packets: one GSO send).
  uint64_t train() const noexcept { return train_; }
  size_t size() const noexcept { return n_; }
  // Scratch space for the body of the next packet (a gathered multi-SGE
  // payload); valid until that packet is sent.
  uint8_t* scratch() noexcept { return slots_[n_].bounce.get(); }

  // Adds one packet: encodes h (opcode h.bth.opcode; BTH pad is set from the
  // body length), appends pad and the ICRC over `ip` (or room for it, left
  // to the I/O: set_defer_icrc).  The body is
  // not copied: it must stay valid until flush().  Caller ensures !full().
  // False, and nothing added, if reading the body faulted: application
  // memory unmapped or re-protected since it was registered.
  [[nodiscard]] bool add(const Endpoint& dst, const wire::IpUdpFields& ip, wire::Headers& h,
                         std::span<const uint8_t> body, uint8_t tos = 0) noexcept;

  // Sends everything queued.
  void flush(net::PacketIo& io, Counters& c) noexcept;

 private:
  struct Slot {
    alignas(64) uint8_t head[64];
    uint8_t tail[8];
    net::PendingIcrc icrc;
    std::unique_ptr<uint8_t[]> bounce;
  };
  std::array<Slot, kSlots> slots_;
  std::array<net::TxPacket, kSlots> pkts_;
  size_t n_ = 0;
  // the train being built: its first packet, length, bytes and segment size
  uint16_t gso_max_ = 0;
  bool defer_icrc_ = false;
  size_t train_first_ = 0;
  uint16_t train_len_ = 0;
  size_t train_bytes_ = 0, train_seg_ = 0;
  bool train_closed_ = true;
  uint64_t train_ = 0;
};

}  // namespace uroce::transport
