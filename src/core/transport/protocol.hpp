// Entry points of the protocol engines, called by the NIC with its lock held.
//   requester.cpp  - turns send WQEs into request packets (IBA 9.7.1-9.7.4)
//   completer.cpp  - handles ACK/NAK/READ and atomic responses (IBA 9.7.5)
//   retransmit.cpp - timers: retransmission, RNR waits (IBA 9.7.5.2.8, 9.7.6)
//   responder.cpp  - executes RC/UC requests (IBA 9.7.5.1, 9.7.6); responder_ack.cpp
//                    queues the ACK/NAK, responder_tx.cpp sends responses
//   ud.cpp         - UD receive (IBA 9.8)
#pragma once

#include <cstddef>
#include <cstdint>

#include "net/packet_io.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {

class QpEngine;

class Nic;

// Emits request packets of `qp` into the NIC's batch, at most `budget`
// (decremented).  Returns true if it stopped on the budget with more to send.
bool requester_produce(Nic& nic, QpEngine& qp, size_t& budget) noexcept;
// What requester_produce would send next: nothing, a packet of an RDMA
// WRITE without immediate data (nothing the peer's CQ sees), or another.
enum class NextRequest : uint8_t { none, silent, visible };
NextRequest requester_next(const QpEngine& qp) noexcept;
// Emits queued responses (READ data, atomic ACKs, then the coalesced ACK/NAK).
bool responder_produce(Nic& nic, QpEngine& qp, size_t& budget) noexcept;
// The responder owes only a coalescable ACK (no READ data, atomic ACK, NAK
// or SACK).
bool responder_owes_plain_ack(const QpEngine& qp) noexcept;
// Sends only the coalesced ACK (lazy list).
void responder_flush_ack(Nic& nic, QpEngine& qp) noexcept;

// A UROCE_COPY_READ_DONE: READ responses placed by a same-host responder
// in one copy (wire/copy.hpp).
void copy_read_done_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
void completer_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
// A UROCE_SACK from the peer (sack.cpp): marks what it holds and has holes
// looked for.
void sack_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
void responder_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
void ud_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt, const net::RxPacket& raw) noexcept;

// A timer of `qp` fired (or may have): retransmit, end an RNR wait, re-arm.
void requester_on_timer(Nic& nic, QpEngine& qp) noexcept;
// Starts (or keeps) the retransmission timer after packets went out.
void requester_arm_retransmit(Nic& nic, QpEngine& qp) noexcept;

}  // namespace uroce::transport
