// What responder.cpp (requests), responder_ack.cpp (the ACK/NAK owed) and
// responder_tx.cpp (responses) share.
// NIC lock held.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/engine_state.hpp"
#include "transport/nic.hpp"
#include "wire/copy.hpp"
#include "wire/headers.hpp"

namespace uroce::transport {

// Queues a NAK with `code` for `psn` (sent at once, never coalesced away).
void responder_nak(Nic& nic, QpEngine& qp, uint32_t psn, wire::NakCode code) noexcept;
// A request that cannot be carried out (RC: IBA class C, the QP enters ERR
// after the NAK; see responder.cpp).  `wqe_in_use`: a WRITE with immediate
// data took a receive WQE, which completes with the error.
void responder_fail(Nic& nic, QpEngine& qp, uint32_t psn, wire::NakCode code, bool wqe_in_use = false) noexcept;
// Bytes of an RDMA WRITE: one packet, or a one-copy request standing for
// `npkts` packets from `psn` (responder_copy.cpp).  first/va/rkey/length as
// a FIRST packet's RETH; `len` bytes go where the message has got to.
struct WriteChunk {
  uint32_t psn = 0;
  uint32_t npkts = 1;
  bool first = false, last = false, imm = false, solicited = false, ack_req = false;
  uint32_t imm_data = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint32_t len = 0;
};
// How placing a chunk's bytes at `dst` went: done; our own memory faulted
// (the request fails: REMOTE_ACCESS_ERR); or declined (nothing counts: the
// placer answered the requester, who sends the chunk again as packets).
enum class WritePlaced : uint8_t { done, own_fault, declined };
using WritePlacer = WritePlaced (*)(Nic& nic, QpEngine& qp, uint8_t* dst, uint32_t len, const void* ctx) noexcept;
// Runs a chunk in order (its PSN the expected one, opcode sequence checked)
// through the WRITE state: the access checks, the length rules, the
// receive of a WRITE with immediate data, ePSN, the ACK.
void responder_write(Nic& nic, QpEngine& qp, const WriteChunk& c, WritePlacer place, const void* ctx) noexcept;
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
// A UROCE_COPY_WRITE: a one-copy WRITE chunk from a same-host requester
// (responder_copy.cpp), trusted only as it came through our ring; and a
// UROCE_COPY_READ.
void responder_copy_write(Nic& nic, QpEngine& qp, const wire::Packet& pkt, const net::RxPacket& raw) noexcept;
void responder_copy_read(Nic& nic, QpEngine& qp, const wire::Packet& pkt, const net::RxPacket& raw) noexcept;
// A READ request for the responses from `psn` (a packet's RETH, or a
// one-copy request's, with `sink`: where in the requester's memory the
// bytes go, pushed in one copy; empty: as response packets), in order
// (responder_read; `sink_gate`: the request's generation of the
// requester's copy gate), or one executed before (responder_reread: false
// if no READ resource holds that PSN).
void responder_read(Nic& nic, QpEngine& qp, uint32_t psn, const wire::Reth& reth, std::vector<wire::CopyRange>&& sink,
                    uint32_t sink_gate) noexcept;
bool responder_reread(Nic& nic, QpEngine& qp, uint32_t psn, const wire::Reth& reth,
                      std::vector<wire::CopyRange>&& sink) noexcept;
// The responses of a one-copy READ resource (responder_copy.cpp): the
// bytes pushed into the requester's memory, then one UROCE_COPY_READ_DONE;
// or UROCE_COPY_NAK (refused, the requester's memory faulted), or the
// REMOTE_ACCESS_ERR of a region gone.
void responder_push_read(Nic& nic, QpEngine& qp, RdAtomicResource& r) noexcept;
void responder_emit_sack(Nic& nic, QpEngine& qp) noexcept;
// The remote access check (rkey, PD, QP and MR access rights, bounds):
// the address of `len` bytes at `va`, or nullptr, counted by cause.
uint8_t* responder_remote_ptr(Nic& nic, const QpEngine& qp, uint32_t rkey, uint64_t va, uint32_t len,
                              uint32_t need) noexcept;

}  // namespace uroce::transport
