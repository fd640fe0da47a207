// Steering among the processes that share a UDP port (issue 18): the uroce
// processes of one user on one address each hold a socket of one
// SO_REUSEPORT group on ADDR:4791, and a classic BPF program attached to the
// group (SO_ATTACH_REUSEPORT_CBPF, which needs no privilege) picks, for each
// datagram, the socket of the process that owns its destination, as a NIC
// shared by the processes of a host does:
//  - a datagram for a QP goes by the registry slot in its destination QPN
//    (the transport numbers QPs slot << 14 | index);
//  - a CM MAD (destination QP1, management class 0x07) goes, for a REQ or a
//    SIDR_REQ, to the process listening on its service ID; for any other
//    CM message by the slot in the comm ID (or SIDR request ID) it carries
//    back to us, which the CM makes slot << 22 | counter.
// What the program cannot place (a slot or a service no process of the
// table has, a datagram too short to read) goes to the table's `otherwise`
// position, or, without one, gets an index past the group, for which the
// kernel falls back to its usual hash of the addresses.
//
// The kernel hands the program the UDP payload (the UDP header is already
// pulled): offset 0 is the BTH.  It returns the index of a socket in the
// group, in the order the sockets joined it.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.hpp"

namespace uroce::net {

struct SteeringTable {
  struct Slot {
    uint32_t slot;      // registry slot (10 bits)
    uint32_t position;  // index of its socket in the group
  };
  struct Listener {
    uint64_t service_id;  // as on the wire (host order here)
    uint32_t slot;        // the listening process's registry slot
  };
  std::vector<Slot> slots;
  std::vector<Listener> listeners;
  // Where what the table cannot place goes: a live member, which drops a
  // datagram for a QP it does not have and refuses a connection to a service
  // nobody listens on, as a NIC would; kSteerFallback lets the kernel hash.
  uint32_t otherwise = 0xffffffffu;
};

// What the program returns when it cannot place a datagram: past any group,
// so the kernel hashes.
inline constexpr uint32_t kSteerFallback = 0xffffffffu;

// The program for `table`.  Entries beyond what one program can hold
// (BPF_MAXINSNS instructions) are left out: their datagrams are hashed.
std::vector<sock_filter> steering_program(const SteeringTable& table);

// Attaches `prog` to the SO_REUSEPORT group of socket `fd` (replacing the
// group's program).
Status attach_steering(int fd, std::span<const sock_filter> prog);

}  // namespace uroce::net
