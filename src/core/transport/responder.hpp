// What responder.cpp (requests), responder_ack.cpp (the ACK/NAK owed) and
// responder_tx.cpp (responses) share.
// NIC lock held.
#pragma once

#include <cstdint>

#include "transport/nic.hpp"
#include "wire/headers.hpp"

namespace uroce::transport {

// Queues a NAK with `code` for `psn` (sent at once, never coalesced away).
void responder_nak(Nic& nic, QpEngine& qp, uint32_t psn, wire::NakCode code) noexcept;
// A request that cannot be carried out (RC: IBA class C, the QP enters ERR
// after the NAK; see responder.cpp).
void responder_fail(Nic& nic, QpEngine& qp, uint32_t psn, wire::NakCode code) noexcept;
// What the packet ended that the application may answer right away, so
// that the ACK can leave with the answer: nothing, a message it sees in its
// CQ (a receive it completed), or one it does not (a WRITE without
// immediate data).
enum class Answerable : uint8_t { no, seen, unseen };
// An ACK for `psn` owed, and an RNR NAK for `psn` (responder_ack.cpp).
void responder_ack(Nic& nic, QpEngine& qp, uint32_t psn, Answerable what) noexcept;
void responder_rnr_nak(Nic& nic, QpEngine& qp, uint32_t psn) noexcept;
// A packet that begins a request: a FIRST/ONLY, a READ or an atomic.
bool responder_starts_message(uint32_t flags) noexcept;
// XRC (responder_xrc.cpp): the XRC SRQ a request is for (false: refused),
// and a SEND for another process's XRC SRQ.
bool responder_xrc_target(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
void responder_send_remote(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
// Sends `copies` more of the last ACK when it covers everything received
// (none while a NAK, an ACK or a READ response is still owed): a QP going
// away repeats its final ACK, so that the peer's last message is not left
// to be resent to nobody when that ACK is lost (issue 14 item 5).
void responder_repeat_final_ack(Nic& nic, QpEngine& qp, int copies) noexcept;
// Selective repeat (responder_sr.cpp): keeps a request packet `ahead` PSNs
// beyond the expected one, and executes kept packets once the expected one
// has arrived.
void responder_keep(Nic& nic, QpEngine& qp, const wire::Packet& pkt, uint32_t ahead) noexcept;
void responder_drain(Nic& nic, QpEngine& qp) noexcept;
// A UROCE_SACK_HELLO: the requester understands SACKs (wire/sack.hpp);
// from now on packets kept out of order draw one after each receive batch,
// sent by responder_emit_sack.
void responder_sack_hello(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
void responder_emit_sack(Nic& nic, QpEngine& qp) noexcept;
// The remote access check (rkey, PD, QP and MR access rights, bounds):
// the address of `len` bytes at `va`, or nullptr, counted by cause.
uint8_t* responder_remote_ptr(Nic& nic, const QpEngine& qp, uint32_t rkey, uint64_t va, uint32_t len,
                              uint32_t need) noexcept;

}  // namespace uroce::transport
