// uroce's one-copy WRITE and READ between processes of one host
// (docs/one_copy_design.md): manufacturer-specific packets that only ever
// travel through a same-host shared-memory ring, never UDP.
//
// UROCE_COPY_WRITE (0xc2), requester to responder: "packets p .. p+k-1 of
// this RC WRITE are in my memory at these addresses: copy them in".  BTH
// (dest QP, PSN p, AckReq, Solicited on the last) and a payload:
//   magic "uRCW" (4), version (1), flags (1: kCopyFirst, kCopyLast,
//   kCopyImm), range count n (2, big-endian like every field),
//   packets k (4), bytes (4),
//   RETH-like va (8), rkey (4), message length (4) -- meaningful on the
//   first request of a message, as a FIRST packet's RETH,
//   immediate data (4), gate generation (4: the requester's copy gate as
//   it built the request, net/packet_io.hpp CopyGate; 0 from a requester
//   that has none),
//   n ranges of the requester's address space: address (8), length (4).
// The ranges' lengths add up to `bytes`; `bytes` is k MTUs, or on the last
// request what is left of the message.
//
// UROCE_COPY_READ (0xc4), requester to responder: "put the response
// packets p .. p+k-1 of this RDMA READ into my memory at these addresses".
// BTH (PSN p, AckReq) and the same payload as a UROCE_COPY_WRITE: no flags,
// va/rkey/length the READ request's RETH for those packets (length =
// bytes), the ranges where the bytes go.
//
// UROCE_COPY_READ_DONE (0xc5), responder to requester: the response
// packets from the BTH PSN on, `packets` of them, were placed (it stands
// for them, in order with the other responses).  Payload: magic "uRCD" (4),
// version (1), reserved (3), packets (4).
//
// UROCE_COPY_NAK (0xc3), responder to requester: the request at the BTH PSN
// (for a READ: the response from it on) was not carried out because the
// copy could not be made (the kernel refused, or the requester's memory
// faulted, or the requester closed its gate since it asked); resend from
// that PSN as packets.  Payload: magic "uRCN" (4), version (1), reason (1),
// reserved (2).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace uroce::wire {

inline constexpr uint8_t kCopyVersion = 1;
inline constexpr uint8_t kCopyFirst = 1, kCopyLast = 2, kCopyImm = 4;
inline constexpr size_t kCopyHeaderLen = 40;
inline constexpr size_t kCopyRangeLen = 12;
// More ranges than a WRITE's scatter/gather list can have is malformed.
inline constexpr size_t kCopyMaxRanges = 64;
inline constexpr size_t kCopyNakLen = 8;
inline constexpr size_t kCopyDoneLen = 12;
// The most one request may move (a responder refuses more: it copies under
// its NIC's lock).
inline constexpr uint32_t kCopyMaxBytes = 1u << 20;

struct CopyRange {
  uint64_t addr = 0;
  uint32_t len = 0;
  friend bool operator==(const CopyRange&, const CopyRange&) = default;
};

struct CopyRequest {
  uint8_t flags = 0;
  uint32_t packets = 0;
  uint32_t bytes = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint32_t imm = 0;
  uint32_t gate = 0;  // the requester's gate generation
  std::vector<CopyRange> ranges;
};

enum class CopyNakReason : uint8_t {
  refused = 1,          // the kernel would not let the responder copy (EPERM, ESRCH, ENOSYS)
  requester_fault = 2,  // the requester's memory (a WRITE's source, a READ's sink) faulted under the copy
  stale = 3,            // the requester's gate moved on since (it flushed a QP or deregistered memory)
};

// Writes the payload of `w` into `out`: its length, 0 if it does not fit.
size_t write_copy_request(const CopyRequest& w, std::span<uint8_t> out) noexcept;
// The request in `payload`, if it is one this version understands and its
// ranges are consistent (count within kCopyMaxRanges, lengths adding up to
// `bytes`, none empty, none wrapping around the address space).
std::optional<CopyRequest> parse_copy_request(std::span<const uint8_t> payload);

std::array<uint8_t, kCopyNakLen> copy_nak_payload(CopyNakReason why) noexcept;
std::optional<CopyNakReason> parse_copy_nak(std::span<const uint8_t> payload) noexcept;

std::array<uint8_t, kCopyDoneLen> copy_done_payload(uint32_t packets) noexcept;
// The packet count of a UROCE_COPY_READ_DONE (at least 1).
std::optional<uint32_t> parse_copy_done(std::span<const uint8_t> payload) noexcept;

}  // namespace uroce::wire
