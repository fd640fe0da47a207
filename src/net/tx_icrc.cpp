// Pending ICRCs (packet_io.hpp): computed by the I/O that puts a packet on
// a wire, not by the transport that built it.
#include "common/fault_guard.hpp"
#include "net/packet_io.hpp"
#include "wire/opcode.hpp"

namespace uroce::net {

void finish_icrc(const TxPacket& pkt) noexcept {
  if (!pkt.icrc || pkt.head.size() < 12 || pkt.tail.size() < wire::kIcrcLen) return;
  wire::Icrc crc(pkt.icrc->ip, pkt.size(), std::span<const uint8_t, 12>(pkt.head.data(), 12));
  crc.update(pkt.head.subspan(12));
  if (!pkt.body.empty() && !fault_guard::run(pkt.body.data(), pkt.body.size(), [&] { crc.update(pkt.body); })) {
    wire::put_icrc(0, pkt.icrc->out);
    return;
  }
  crc.update(pkt.tail.first(pkt.tail.size() - wire::kIcrcLen));
  wire::put_icrc(crc.value(), pkt.icrc->out);
}

}  // namespace uroce::net
