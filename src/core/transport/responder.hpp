// What responder.cpp (requests) and responder_tx.cpp (responses) share.
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
// The remote access check (rkey, PD, QP and MR access rights, bounds):
// the address of `len` bytes at `va`, or nullptr, counted by cause.
uint8_t* responder_remote_ptr(Nic& nic, const QpEngine& qp, uint32_t rkey, uint64_t va, uint32_t len,
                              uint32_t need) noexcept;

}  // namespace uroce::transport
