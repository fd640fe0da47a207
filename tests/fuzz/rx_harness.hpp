// The receive path under fuzzing: a victim NIC (core, on a FakeNetwork) with
// QPs and memory regions in known states, fed each input as one received
// packet, synchronously.  Shared by the libFuzzer target (rx_fuzz.cpp,
// clang) and the corpus replay test (rx_replay.cpp, any compiler).
//
// Input: two control bytes, then the UDP payload (BTH .. ICRC).  Random
// bytes would rarely pass the ICRC or name a live QP, so the control bytes
// let the fuzzer ask for fix-ups (bits of ctl[0]):
//   0x01  recompute the ICRC after the other fix-ups
//   0x02  send from a foreign address instead of the QPs' peer
//   0x0c  destination: 0 the RC QP in RTS, 1 the UC QP, 2 the UD QP, 3 as in the packet
//   0x10  PSN = the destination's expected PSN + (int8) the packet's PSN low byte
//   0x20  rkey of the RETH/AtomicETH = a live rkey, chosen by ctl[1] & 3
//   0x40  virtual address = that region's start + (address mod (length + 128)) - 64
//   0x80  before the packet, the application changes the memory of a region
//         as if it unmapped or re-protected it while registered: ctl[1]
//         bit 2 picks the receive region instead of the one above, bits 3-4
//         a page of it, bits 5-6 what: 0 PROT_NONE, 1 PROT_READ, 2 unmapped,
//         3 the whole region PROT_NONE.  Put back (contents included) after
//         the packet.  Not under TSan, where the fault guard cannot recover.
// Every region lies between PROT_NONE guard pages (a stray access crashes),
// and regions the peer may not write are checked unchanged after each input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uroce::fuzz {

// Builds the victim on first use.  Never fails silently: aborts if it cannot.
void init();
// Feeds one input; aborts if a region that must not change did.
void one_input(const uint8_t* data, size_t size);
// The victim's non-zero counters, "name=value ..." (what the inputs reached).
std::string counters();

}  // namespace uroce::fuzz
