// Communication Management MADs (IBA vol. 1 ch. 12, and annex A11 for the
// IP-based private data header of rdma_cm).
//
// A CM MAD is 256 bytes: the 24-byte common MAD header, then 232 bytes of
// attribute data whose layout depends on the attribute ID.  On RoCEv2 it is
// the payload of a UD SEND_ONLY to QP1 (DETH Q_Key 0x80010000, source QP 1).
//
// One struct per message, holding host-order values; encode() writes all 256
// bytes (reserved fields zero, private data zero-padded), decode() checks the
// length and reads every field.  Bit fields are packed and unpacked by hand
// (no C bitfields in network formats).  Offsets in the comments are within
// the 232-byte attribute data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/ip_addr.hpp"

namespace uroce::cm {

inline constexpr size_t kMadSize = 256;
inline constexpr size_t kMadHeaderSize = 24;
inline constexpr size_t kCmDataSize = kMadSize - kMadHeaderSize;  // 232

inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;

inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;
inline constexpr uint8_t kMethodGet = 0x01;
inline constexpr uint8_t kMethodGetResp = 0x81;
// MAD status (IBA 13.4.7): the method/attribute combination is not
// supported (what Linux's MAD layer answers a Get the CM does not handle);
// a value in the attribute or its modifier is invalid.
inline constexpr uint16_t kMadStatusUnsupportedAttr = 0x000c;
inline constexpr uint16_t kMadStatusInvalidValue = 0x001c;

// Attribute IDs of the CM class (IBA table 103).
enum class AttrId : uint16_t {
  class_port_info = 0x0001,
  req = 0x0010,
  mra = 0x0011,
  rej = 0x0012,
  rep = 0x0013,
  rtu = 0x0014,
  dreq = 0x0015,
  drep = 0x0016,
  sidr_req = 0x0017,
  sidr_rep = 0x0018,
  lap = 0x0019,
  apr = 0x001a,
};
const char* to_string(AttrId id) noexcept;

// Private data sizes of each message.
inline constexpr size_t kReqPrivate = 92;
inline constexpr size_t kRepPrivate = 196;
inline constexpr size_t kRtuPrivate = 224;
inline constexpr size_t kRejPrivate = 148;
inline constexpr size_t kMraPrivate = 222;
inline constexpr size_t kDreqPrivate = 220;
inline constexpr size_t kDrepPrivate = 224;
inline constexpr size_t kSidrReqPrivate = 216;
inline constexpr size_t kSidrRepPrivate = 136;
inline constexpr size_t kRejAriSize = 72;
inline constexpr size_t kClassPortInfoSize = 72;

//  Common MAD header (IBA 13.4.3), 24 bytes
//  +---------------+---------------+---------------+---------------+
//  | BaseVersion   | MgmtClass     | ClassVersion  |R| Method      |
//  +---------------+---------------+---------------+---------------+
//  |            Status             |         ClassSpecific         |
//  +---------------+---------------+---------------+---------------+
//  |                     TransactionID (64)                        |
//  +---------------+---------------+---------------+---------------+
//  |         AttributeID           |           Reserved            |
//  +---------------+---------------+---------------+---------------+
//  |                     AttributeModifier                         |
//  +---------------+---------------+---------------+---------------+
struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMethodSend;  // including the R (response) bit
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;
  uint16_t attr_id = 0;
  uint16_t reserved = 0;
  uint32_t attr_mod = 0;

  friend bool operator==(const MadHeader&, const MadHeader&) = default;
};

// One path of a REQ (primary at data offset 52, alternate at 96), 44 bytes:
//   0 local port LID (16) | remote port LID (16)
//   4 local port GID (128)
//  20 remote port GID (128)
//  36 flow label (20) | reserved (6) | packet rate (6)
//  40 traffic class (8) | hop limit (8) | SL (4) | subnet local (1) | rsvd (3)
//  43 local ACK timeout (5) | reserved (3)
struct ReqPath {
  uint16_t local_lid = 0;
  uint16_t remote_lid = 0;
  IpAddr local_gid;  // the 16 bytes as carried (RoCEv2: ::ffff:a.b.c.d for IPv4)
  IpAddr remote_gid;
  uint32_t flow_label = 0;  // 20 bits
  uint8_t packet_rate = 0;  // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;  // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits

  friend bool operator==(const ReqPath&, const ReqPath&) = default;
};

//  REQ (IBA 12.6.5): ConnectRequest
//    0 local communication ID (32)            4 reserved (32)
//    8 service ID (64)                       16 local CA GUID (64)
//   24 reserved (32)                         28 local Q_Key (32)
//   32 local QPN (24) | responder resources (8)
//   36 local EECN (24) | initiator depth (8)
//   40 remote EECN (24) | remote CM response timeout (5) | transport
//      service type (2) | end-to-end flow control (1)
//   44 starting PSN (24) | local CM response timeout (5) | retry count (3)
//   48 partition key (16) | path MTU (4) | RDC exists (1) | RNR retry count (3)
//   51 max CM retries (4) | SRQ (1) | extended transport type (3)
//   52 primary path (44)                     96 alternate path (44)
//  140 private data (92)
struct Req {
  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;
  uint8_t remote_cm_response_timeout = 0;
  uint8_t transport_service_type = 0;  // 0 RC, 1 UC, 3 XRC (with ext. transport)
  bool e2e_flow_control = false;
  uint32_t starting_psn = 0;
  uint8_t local_cm_response_timeout = 0;
  uint8_t retry_count = 0;
  uint16_t pkey = 0xffff;
  uint8_t path_mtu = 0;  // IB enum: 1 = 256 .. 5 = 4096
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;
  uint8_t max_cm_retries = 0;
  bool srq = false;
  uint8_t extended_transport_type = 0;
  ReqPath primary;
  ReqPath alternate;
  std::array<uint8_t, kReqPrivate> private_data{};

  friend bool operator==(const Req&, const Req&) = default;
};

//  REP (IBA 12.6.8): ConnectReply
//    0 local communication ID    4 remote communication ID
//    8 local Q_Key              12 local QPN (24) | reserved (8)
//   16 local EEC number (24) | reserved (8)
//   20 starting PSN (24) | reserved (8)
//   24 responder resources (8)  25 initiator depth (8)
//   26 target ACK delay (5) | failover accepted (2) | E2E flow control (1)
//   27 RNR retry count (3) | SRQ (1) | reserved (4)
//   28 local CA GUID (64)       36 private data (196)
struct Rep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint32_t local_eecn = 0;
  uint32_t starting_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;
  uint8_t failover_accepted = 0;
  bool e2e_flow_control = false;
  uint8_t rnr_retry_count = 0;
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, kRepPrivate> private_data{};

  friend bool operator==(const Rep&, const Rep&) = default;
};

//  RTU (IBA 12.6.9): ReadyToUse
//    0 local communication ID    4 remote communication ID    8 private data (224)
struct Rtu {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kRtuPrivate> private_data{};

  friend bool operator==(const Rtu&, const Rtu&) = default;
};

// Which message a REJ or an MRA refers to.
enum class MsgRef : uint8_t { req = 0, rep = 1, other = 2 };

// Reject reasons (IBA table 112) that uroce sends or interprets.
enum class RejReason : uint16_t {
  no_qp = 1,
  no_resources = 3,
  timeout = 4,
  unsupported_request = 5,
  invalid_comm_id = 6,
  invalid_comm_instance = 7,
  invalid_service_id = 8,
  invalid_transport_type = 9,
  stale_connection = 10,
  invalid_gid = 12,
  invalid_mtu = 26,
  insufficient_resp_resources = 27,
  consumer_reject = 28,
  invalid_rnr_retry = 29,
  duplicate_local_comm_id = 30,
  invalid_class_version = 31,
};

//  REJ (IBA 12.6.7): ConnectReject
//    0 local communication ID    4 remote communication ID
//    8 message rejected (2) | reserved (6)
//    9 reject info length (7) | reserved (1)
//   10 reason (16)               12 additional reject information (72)
//   84 private data (148)
struct Rej {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MsgRef msg_rejected = MsgRef::req;
  uint8_t reject_info_length = 0;  // 7 bits
  uint16_t reason = 0;
  std::array<uint8_t, kRejAriSize> ari{};
  std::array<uint8_t, kRejPrivate> private_data{};

  friend bool operator==(const Rej&, const Rej&) = default;
};

//  MRA (IBA 12.6.6): MessageReceiptAcknowledgement
//    0 local communication ID    4 remote communication ID
//    8 message MRAed (2) | reserved (6)
//    9 service timeout (5) | reserved (3)
//   10 private data (222)
struct Mra {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MsgRef msg_mraed = MsgRef::req;
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, kMraPrivate> private_data{};

  friend bool operator==(const Mra&, const Mra&) = default;
};

//  DREQ (IBA 12.6.10): DisconnectRequest
//    0 local communication ID    4 remote communication ID
//    8 remote QPN/EECN (24) | reserved (8)     12 private data (220)
struct Dreq {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;
  std::array<uint8_t, kDreqPrivate> private_data{};

  friend bool operator==(const Dreq&, const Dreq&) = default;
};

//  DREP (IBA 12.6.11): DisconnectReply
//    0 local communication ID    4 remote communication ID    8 private data (224)
struct Drep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kDrepPrivate> private_data{};

  friend bool operator==(const Drep&, const Drep&) = default;
};

//  SIDR_REQ (IBA 12.11.1): ServiceIDResolutionRequest
//    0 request ID (32)    4 partition key (16) | reserved (16)
//    8 service ID (64)   16 private data (216)
struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = 0xffff;
  uint64_t service_id = 0;
  std::array<uint8_t, kSidrReqPrivate> private_data{};

  friend bool operator==(const SidrReq&, const SidrReq&) = default;
};

enum class SidrStatus : uint8_t {
  ok = 0,
  sid_not_supported = 1,
  rejected = 2,
  no_qp = 3,
  redirect = 4,
  unsupported_version = 5,
};

//  SIDR_REP (IBA 12.11.2): ServiceIDResolutionResponse
//    0 request ID (32)    4 status (8) | additional info length (8) | reserved (16)
//    8 QPN (24) | reserved (8)     12 service ID (64)    20 Q_Key (32)
//   24 class port info (72)        96 private data (136)
struct SidrRep {
  uint32_t request_id = 0;
  uint8_t status = 0;
  uint8_t additional_info_length = 0;
  uint32_t qpn = 0;
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, kClassPortInfoSize> class_port_info{};
  std::array<uint8_t, kSidrRepPrivate> private_data{};

  friend bool operator==(const SidrRep&, const SidrRep&) = default;
};

// ---------------------------------------------------------------- codec

using MadBuf = std::array<uint8_t, kMadSize>;

// The header of a MAD; false if `mad` is shorter than a header.
bool decode_header(std::span<const uint8_t> mad, MadHeader& out) noexcept;
// True for a header this CM handles: base version 1, class CM, class
// version 2, method Send.
bool is_cm_send(const MadHeader& h) noexcept;

// Each decode() reads the attribute data of a whole MAD (header included in
// `mad`); false if `mad` is shorter than kMadSize.  `out` is only written
// on success.  Each encode() writes the header and the message into `out`
// (the header's attr_id is set from the message type).
bool decode(std::span<const uint8_t> mad, Req& out) noexcept;
bool decode(std::span<const uint8_t> mad, Rep& out) noexcept;
bool decode(std::span<const uint8_t> mad, Rtu& out) noexcept;
bool decode(std::span<const uint8_t> mad, Rej& out) noexcept;
bool decode(std::span<const uint8_t> mad, Mra& out) noexcept;
bool decode(std::span<const uint8_t> mad, Dreq& out) noexcept;
bool decode(std::span<const uint8_t> mad, Drep& out) noexcept;
bool decode(std::span<const uint8_t> mad, SidrReq& out) noexcept;
bool decode(std::span<const uint8_t> mad, SidrRep& out) noexcept;

void encode(MadHeader h, const Req& m, MadBuf& out) noexcept;
void encode(MadHeader h, const Rep& m, MadBuf& out) noexcept;
void encode(MadHeader h, const Rtu& m, MadBuf& out) noexcept;
void encode(MadHeader h, const Rej& m, MadBuf& out) noexcept;
void encode(MadHeader h, const Mra& m, MadBuf& out) noexcept;
void encode(MadHeader h, const Dreq& m, MadBuf& out) noexcept;
void encode(MadHeader h, const Drep& m, MadBuf& out) noexcept;
void encode(MadHeader h, const SidrReq& m, MadBuf& out) noexcept;
void encode(MadHeader h, const SidrRep& m, MadBuf& out) noexcept;
// A ClassPortInfo MAD (Get or GetResp, as h.method says): the header, and
// for a GetResp the CM class's ClassPortInfo (base and class version, the
// response time value); the rest zero.  Used as the keep-alive probe of
// Cm (cm.hpp), its attribute modifier naming a communication ID.
void encode_class_port_info(MadHeader h, uint8_t resp_time_value, MadBuf& out) noexcept;

// ---------------------------------------------------------------- rdma_cm addressing

// Port spaces of rdma_cm (the upper bits of the service ID).
inline constexpr uint16_t kPsIpoib = 0x0002;
inline constexpr uint16_t kPsTcp = 0x0106;
inline constexpr uint16_t kPsUdp = 0x0111;
inline constexpr uint16_t kPsIb = 0x013f;
// Q_Key of RDMA_PS_UDP (and RDMA_PS_IB UD) QPs.
inline constexpr uint32_t kRdmaUdpQkey = 0x01234567;
// The RoCEv2 UDP port, where a peer the registry does not know listens.
inline constexpr uint16_t kRoceV2Port = 4791;

// The service ID of an IP-addressed rdma_cm port: 0x0000000001 | PS (8
// bits of 0x0106 etc. after the leading 0x01) | port, i.e. ps << 16 | port.
inline constexpr uint64_t service_id(uint16_t ps, uint16_t port) noexcept { return uint64_t(ps) << 16 | port; }
inline constexpr uint16_t service_ps(uint64_t sid) noexcept { return uint16_t(sid >> 16); }
inline constexpr uint16_t service_port(uint64_t sid) noexcept { return uint16_t(sid); }
// Whether a service ID is in rdma_cm's IP range (those carry the header below).
inline constexpr bool is_ip_service(uint64_t sid) noexcept {
  return (sid >> 32) == 0 &&
         ((sid >> 16) == kPsTcp || (sid >> 16) == kPsUdp || (sid >> 16) == kPsIb || (sid >> 16) == kPsIpoib);
}

//  IP CM private data header (IBA annex A11.6), first 36 bytes of a REQ's or
//  SIDR_REQ's private data:
//    0 MajV (4) | MinV (4)     1 IPV (4) | reserved (4)     2 source port (16)
//    4 source IP (128)        20 destination IP (128)
//  IPv4 addresses fill the last 4 bytes of their 16 (the first 12 are zero).
struct IpCmHeader {
  uint8_t major = 0;
  uint8_t minor = 0;
  uint8_t ip_version = 4;  // 4 or 6
  uint16_t src_port = 0;
  IpAddr src;  // in uroce's form (v4-mapped for IPv4)
  IpAddr dst;

  friend bool operator==(const IpCmHeader&, const IpCmHeader&) = default;
};
inline constexpr size_t kIpCmHeaderSize = 36;
bool decode_ip_header(std::span<const uint8_t> private_data, IpCmHeader& out) noexcept;
// Writes 36 bytes; false if `out` is shorter.
bool encode_ip_header(const IpCmHeader& h, std::span<uint8_t> out) noexcept;

// Microseconds of an IBA time value: 4.096 us * 2^exp (exp 0..31).
inline constexpr uint64_t iba_time_us(uint8_t exp) noexcept { return (uint64_t(4096) << (exp & 31)) / 1000; }

// One line describing a decoded MAD (logs, test failures).
std::string describe(std::span<const uint8_t> mad);

}  // namespace uroce::cm
