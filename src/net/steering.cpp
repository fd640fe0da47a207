#include "net/steering.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace uroce::net {
namespace {

// Payload offsets (the BTH starts at 0).
constexpr uint32_t kDestQpWord = 4;    // BTH: reserved(8) | destination QP(24)
constexpr uint32_t kMgmtClass = 21;    // BTH(12) + DETH(8) + MAD: base version(1), class(1)
constexpr uint32_t kAttributeId = 36;  // MAD offset 16
constexpr uint32_t kCmData = 44;       // MAD offset 24: the CM message
constexpr uint32_t kLocalCommId = kCmData;
constexpr uint32_t kRemoteCommId = kCmData + 4;
constexpr uint32_t kServiceIdHi = kCmData + 8;  // REQ and SIDR_REQ
constexpr uint32_t kServiceIdLo = kCmData + 12;
constexpr uint32_t kMadMinLen = kCmData + 16;

constexpr uint32_t kCmClass = 0x07;
constexpr uint32_t kReq = 0x0010, kSidrReq = 0x0017, kSidrRep = 0x0018;
constexpr uint32_t kQpSlotShift = 14;    // QPN = slot << 14 | index
constexpr uint32_t kCommSlotShift = 22;  // comm ID = slot << 22 | counter

// A program under construction, with forward jumps to labels resolved at
// the end (classic BPF jumps only forward; BPF_JA takes 32-bit offsets).
class Builder {
 public:
  enum Label { kMad, kRequestId, kService, kLookup, kFallback, kLabels };

  void op(uint16_t code, uint32_t k) { prog_.push_back(BPF_STMT(code, k)); }
  void load_len() { op(BPF_LD | BPF_W | BPF_LEN, 0); }
  void load_word(uint32_t off) { op(BPF_LD | BPF_W | BPF_ABS, off); }
  void ret(uint32_t v) { op(BPF_RET | BPF_K, v); }
  void jump(Label l) {
    fixups_.push_back({prog_.size(), l});
    op(BPF_JMP | BPF_JA, 0);
  }
  // To `l` if A == k (else on).
  void if_eq(uint32_t k, Label l) {
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 0, 1));
    jump(l);
  }
  // To `l` if A != k.
  void if_ne(uint32_t k, Label l) {
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 1, 0));
    jump(l);
  }
  // To `l` if A < k.
  void if_lt(uint32_t k, Label l) {
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, k, 1, 0));
    jump(l);
  }
  // On if A == k, else over the next `n` instructions.
  void skip_unless_eq(uint32_t k, uint8_t n) { prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 0, n)); }
  // Returns `v` if A == k (else on).
  void ret_if_eq(uint32_t k, uint32_t v) {
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 0, 1));
    ret(v);
  }
  void place(Label l) { at_[l] = prog_.size(); }
  size_t size() const noexcept { return prog_.size(); }

  std::vector<sock_filter> finish() {
    for (const auto& [pc, l] : fixups_) prog_[pc].k = uint32_t(at_[l] - pc - 1);
    return std::move(prog_);
  }

 private:
  std::vector<sock_filter> prog_;
  std::vector<std::pair<size_t, Label>> fixups_;
  size_t at_[kLabels] = {};
};

uint32_t position_of(const SteeringTable& t, uint32_t slot) {
  for (const auto& s : t.slots)
    if (s.slot == slot) return s.position;
  return kSteerFallback;
}

}  // namespace

std::vector<sock_filter> steering_program(const SteeringTable& table) {
  Builder b;
  // A datagram for a QP: by the slot of its destination QPN.
  b.load_len();
  b.if_lt(12, Builder::kFallback);  // not even a BTH
  b.load_word(kDestQpWord);
  b.op(BPF_ALU | BPF_AND | BPF_K, 0xffffff);
  b.if_eq(1, Builder::kMad);
  b.op(BPF_ALU | BPF_RSH | BPF_K, kQpSlotShift);
  b.jump(Builder::kLookup);

  // QP1: a CM MAD, by the service it asks for or the comm ID it answers.
  b.place(Builder::kMad);
  b.load_len();
  b.if_lt(kMadMinLen, Builder::kFallback);
  b.op(BPF_LD | BPF_B | BPF_ABS, kMgmtClass);
  b.if_ne(kCmClass, Builder::kFallback);
  b.op(BPF_LD | BPF_H | BPF_ABS, kAttributeId);
  b.if_eq(kReq, Builder::kService);
  b.if_eq(kSidrReq, Builder::kService);
  b.if_eq(kSidrRep, Builder::kRequestId);
  b.load_word(kRemoteCommId);  // REP, RTU, REJ, MRA, DREQ, DREP, LAP, APR
  b.op(BPF_ALU | BPF_RSH | BPF_K, kCommSlotShift);
  b.jump(Builder::kLookup);
  b.place(Builder::kRequestId);
  b.load_word(kLocalCommId);  // SIDR_REP: our request ID
  b.op(BPF_ALU | BPF_RSH | BPF_K, kCommSlotShift);
  b.jump(Builder::kLookup);

  // What is left of the program's room holds the table: slots first (every
  // datagram of a connection needs its slot), then the listeners.
  constexpr size_t kSlotInsns = 2, kListenerInsns = 5, kTail = 2;
  size_t room = BPF_MAXINSNS - b.size() - kTail;
  const size_t slots = std::min(table.slots.size(), room / kSlotInsns);
  room -= slots * kSlotInsns;

  b.place(Builder::kService);
  size_t listeners = 0;
  for (const auto& l : table.listeners) {
    if (listeners == room / kListenerInsns) break;
    const uint32_t pos = position_of(table, l.slot);
    if (pos == kSteerFallback) continue;
    b.load_word(kServiceIdHi);
    b.skip_unless_eq(uint32_t(l.service_id >> 32), 3);  // to the next listener
    b.load_word(kServiceIdLo);
    b.ret_if_eq(uint32_t(l.service_id), pos);
    ++listeners;
  }
  b.jump(Builder::kFallback);

  b.place(Builder::kLookup);
  for (size_t i = 0; i < slots; ++i) b.ret_if_eq(table.slots[i].slot, table.slots[i].position);
  b.place(Builder::kFallback);
  b.ret(table.otherwise);
  return b.finish();
}

Status attach_steering(int fd, std::span<const sock_filter> prog) {
  sock_fprog p{uint16_t(prog.size()), const_cast<sock_filter*>(prog.data())};
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &p, sizeof p) != 0) {
    const int e = errno;
    return err::from_errno(e, std::string("setsockopt(SO_ATTACH_REUSEPORT_CBPF): ") + std::strerror(e));
  }
  return {};
}

}  // namespace uroce::net
