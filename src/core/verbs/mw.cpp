#include "verbs/mw.hpp"

#include <sys/random.h>

#include <cstdlib>

#include "transport/nic.hpp"
#include "verbs/context.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"

namespace uroce::verbs {
namespace {

// What a window may grant (IBA 10.6.7.1): remote rights, and for type 2
// zero-based addressing.  LOCAL_WRITE is accepted and means nothing for a
// window, as with rxe (rdma-core's tests pass it).
constexpr uint32_t kWindowAccess =
    access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic | access::kZeroBased;

uint8_t random_byte() noexcept {
  uint8_t b = 0;
  if (::getrandom(&b, 1, GRND_NONBLOCK) != 1) b = uint8_t(std::rand());
  return b;
}

}  // namespace

MwTable& MwTable::instance() {
  static MwTable* table = new MwTable();
  return *table;
}

MwTable::MwTable() {
  for (Entry& e : entries_) e.gen = random_byte() & KeyCipher::kWindowGenMask;
}

Result<uint32_t> MwTable::add(Mw& mw) {
  uint32_t index;
  {
    std::lock_guard g(mu_);
    if (next_ < KeyCipher::kMaxWindowIndex) {
      index = next_++;
    } else if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      return err::nomem("memory window table full (" + std::to_string(kMaxMws) + " windows)");
    }
    ++live_;
  }
  const MrTable& mrs = MrTable::instance();
  mw.index_ = index;
  mw.rkey_.store(mrs.cipher().encode_window({mrs.slot(), index, entries_[index].gen, random_byte()}),
                 std::memory_order_relaxed);
  entries_[index].mw.store(&mw, std::memory_order_release);
  return index;
}

void MwTable::remove(Mw& mw) noexcept {
  std::lock_guard g(mu_);
  Entry& e = entries_[mw.index_];
  e.mw.store(nullptr, std::memory_order_release);
  e.gen = uint8_t((e.gen + 1) & KeyCipher::kWindowGenMask);
  free_.insert(free_.begin(), mw.index_);  // back() is the one freed longest ago
  --live_;
}

Mw* MwTable::lookup(uint32_t rkey) const noexcept {
  if (!is_window_key(rkey)) return nullptr;
  const MrTable& mrs = MrTable::instance();
  const WindowKeyFields f = mrs.cipher().decode_window(rkey);
  if (f.slot != mrs.slot() || f.index == 0 || f.index >= KeyCipher::kMaxWindowIndex) return nullptr;
  Mw* mw = entries_[f.index].mw.load(std::memory_order_acquire);
  if (!mw || (mw->rkey() ^ rkey) >> 8) return nullptr;  // another window (or generation) of the index
  return mw;
}

void MwTable::revoke_region(const Mr& mr) noexcept {
  for (Entry& e : entries_)
    if (Mw* mw = e.mw.load(std::memory_order_acquire); mw && mw->mr_ == &mr) mw->unbind();
}

size_t MwTable::size() const noexcept {
  std::lock_guard g(const_cast<std::mutex&>(mu_));
  return live_;
}

Result<std::unique_ptr<Mw>> Mw::alloc(Pd& pd, MwType type) {
  std::unique_ptr<Mw> mw(new Mw());
  mw->pd_ = &pd;
  mw->type_ = type;
  if (auto r = MwTable::instance().add(*mw); !r.ok()) return r.status();
  pd.users()++;
  return mw;
}

Mw::~Mw() {
  {
    std::lock_guard g(pd_->context().nic().mu());
    unbind();
    MwTable::instance().remove(*this);
  }
  pd_->users()--;
}

void Mw::unbind() noexcept {
  if (mr_) mr_->windows_.fetch_sub(1, std::memory_order_relaxed);
  mr_ = nullptr;
  addr_ = length_ = 0;
  access_ = 0;
  qpn_ = 0;
}

WcStatus Mw::bind(const transport::WindowBind& b, const Pd& qp_pd, uint32_t qpn) noexcept {
  constexpr WcStatus kErr = WcStatus::mw_bind_err;
  if ((b.new_rkey ^ rkey()) >> 8) return kErr;  // only the low byte is the consumer's
  if (&qp_pd != pd_) return kErr;               // C10-72
  if (b.access & ~kWindowAccess) return kErr;
  const Mr* mr = nullptr;
  if (type_ == MwType::type1) {
    if (b.access & access::kZeroBased) return kErr;  // o10-36.2.2
  } else {
    if (bound()) return kErr;        // o10-37.2.30: bind a free window only
    if (b.length == 0) return kErr;  // o10-37.2.40: not a way to revoke
  }
  if (b.length) {
    mr = MrTable::instance().lookup(b.mr_lkey, KeyKind::local);
    if (!mr || mr->pd() != pd_) return kErr;
    if (mr->access() & access::kZeroBased) return kErr;
    if (!(mr->access() & access::kMwBind)) return kErr;  // C10-73
    if ((b.access & (access::kRemoteWrite | access::kRemoteAtomic)) && !(mr->access() & access::kLocalWrite))
      return kErr;  // C10-74
    // C10-75: inside the region.
    if (b.access & access::kZeroBased) {
      if (b.length > mr->length()) return kErr;
    } else if (b.addr < mr->iova() || b.length > mr->length() || b.addr - mr->iova() > mr->length() - b.length) {
      return kErr;
    }
  }
  unbind();
  rkey_.store(b.new_rkey, std::memory_order_relaxed);
  if (mr) {
    mr_ = mr;
    mr->windows_.fetch_add(1, std::memory_order_relaxed);
    addr_ = (b.access & access::kZeroBased) ? mr->iova() : b.addr;
    length_ = b.length;
    access_ = b.access;
    qpn_ = type_ == MwType::type2 ? qpn : 0;
  }
  return WcStatus::success;
}

bool Mw::invalidate(uint32_t rkey) noexcept {
  if (type_ != MwType::type2 || !bound() || rkey != this->rkey()) return false;  // o10-37.2.26
  unbind();
  return true;
}

uint8_t* Mw::translate(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need, const Pd& qp_pd, uint32_t qpn,
                       transport::AccessFault& fault) const noexcept {
  using transport::AccessFault;
  fault = AccessFault::none;
  if (rkey != this->rkey() || !bound() || (type_ == MwType::type2 && qpn != qpn_)) {
    fault = AccessFault::key;
    return nullptr;
  }
  if (&qp_pd != pd_) {
    fault = AccessFault::pd;
    return nullptr;
  }
  if ((access_ & need) != need) {
    fault = AccessFault::rights;
    return nullptr;
  }
  if (mr_->gone()) {
    fault = AccessFault::gone;
    return nullptr;
  }
  // The window's own range, zero-based ones counting from 0.
  const uint64_t base = (access_ & access::kZeroBased) ? 0 : addr_;
  if (va < base || len > length_ || va - base > length_ - len) {
    fault = AccessFault::bounds;
    return nullptr;
  }
  // The region is reached with the local right the window's grant stands
  // on (C10-74: writing through a window needs a locally writable region).
  const uint32_t local = (need & (access::kRemoteWrite | access::kRemoteAtomic)) ? access::kLocalWrite : 0;
  uint8_t* p = mr_->translate(addr_ + (va - base), len, local);
  if (!p) fault = AccessFault::bounds;
  return p;
}

}  // namespace uroce::verbs
