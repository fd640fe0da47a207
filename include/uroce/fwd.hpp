// Forward declarations of the uroce C++ API, and the value types of the
// verbs interface (types.hpp) brought into namespace uroce.
//
// Every class of the API is a move-only RAII owner of one object of the
// software NIC (pimpl: the implementation lives in the library, none of it
// in these headers).  Objects are created by their parent and must be
// destroyed before it, children first:
//
//   Context
//   ├── CompletionChannel
//   ├── CompletionQueue          (uses a CompletionChannel)
//   └── ProtectionDomain
//       ├── MemoryRegion
//       ├── AddressHandle
//       ├── SharedReceiveQueue
//       └── QueuePair            (uses CompletionQueues and a SharedReceiveQueue)
//
// An object destroyed while objects created from it (or using it) are alive
// is a programming error: a debug build asserts; a release build prints a
// warning on stderr and leaks the object, so the children stay safe to use
// and destroy.
#pragma once

#include "uroce/ip_addr.hpp"
#include "uroce/status.hpp"
#include "uroce/types.hpp"

namespace uroce {

class Context;
class CompletionChannel;
class CompletionQueue;
class ProtectionDomain;
class MemoryRegion;
class MemoryWindow;
class AddressHandle;
class SharedReceiveQueue;
class QueuePair;

namespace detail {
struct ContextImpl;
struct ChannelImpl;
struct CqImpl;
struct PdImpl;
struct MrImpl;
struct MwImpl;
struct AhImpl;
struct SrqImpl;
struct QpImpl;
}  // namespace detail

// The verbs value types, usable as uroce::SendWr, uroce::Wc, ...
using verbs::AhAttr;
using verbs::AsyncEventType;
using verbs::Mtu;
using verbs::mtu_bytes;
using verbs::MwType;
using verbs::QpAttr;
using verbs::QpCap;
using verbs::QpState;
using verbs::QpType;
using verbs::RecvWr;
using verbs::SendWr;
using verbs::Sge;
using verbs::to_string;
using verbs::Wc;
using verbs::WcOpcode;
using verbs::WcStatus;
using verbs::WrOpcode;
namespace access = verbs::access;
namespace send_flags = verbs::send_flags;
namespace wc_flags = verbs::wc_flags;
namespace qp_attr_mask = verbs::qp_attr_mask;

// "SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV", ...
const char* to_string(WcOpcode op) noexcept;
// "SEND", "RDMA_WRITE", ... for work request opcodes.
const char* to_string(WrOpcode op) noexcept;
// "CQ_ERR", "QP_FATAL", "SRQ_LIMIT_REACHED", ...
const char* to_string(AsyncEventType t) noexcept;
// The IB MTU enum for a size in bytes: 256, 512, 1024, 2048 or 4096
// (EINVAL for anything else).
Result<Mtu> mtu_from_bytes(uint32_t bytes);

}  // namespace uroce
