#include "transport/sge.hpp"

#include <cstring>

#include "common/fault_guard.hpp"

namespace uroce::transport {
namespace {

uint8_t* resolve(const MemoryDomain& mem, const verbs::Sge& sge, uint32_t off, uint32_t len, uint32_t need) noexcept {
  return mem.local(sge.lkey, sge.addr + off, len, need);
}

}  // namespace

bool scatter(const MemoryDomain& mem, std::span<const verbs::Sge> sges, uint32_t offset,
             std::span<const uint8_t> data) noexcept {
  size_t done = 0;
  for (const verbs::Sge& sge : sges) {
    if (done == data.size()) break;
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const uint32_t n = uint32_t(std::min<size_t>(sge.length - offset, data.size() - done));
    uint8_t* dst = resolve(mem, sge, offset, n, verbs::access::kLocalWrite);
    if (!dst) return false;
    if (!fault_guard::copy(dst, data.data() + done, n, dst)) return false;  // gone since registered
    done += n;
    offset = 0;
  }
  return done == data.size();
}

std::span<const uint8_t> gather(const MemoryDomain& mem, std::span<const verbs::Sge> sges, uint32_t offset,
                                uint32_t len, uint8_t* scratch, bool& ok) noexcept {
  ok = true;
  if (len == 0) return {};
  size_t i = 0;
  for (; i < sges.size() && offset >= sges[i].length; ++i) offset -= sges[i].length;
  if (i == sges.size()) {
    ok = false;
    return {};
  }
  if (sges[i].length - offset >= len) {  // one SGE: zero copy
    const uint8_t* p = resolve(mem, sges[i], offset, len, 0);
    if (!p) ok = false;
    return p ? std::span<const uint8_t>(p, len) : std::span<const uint8_t>{};
  }
  uint32_t done = 0;
  for (; i < sges.size() && done < len; ++i) {
    const uint32_t n = std::min(sges[i].length - offset, len - done);
    const uint8_t* p = resolve(mem, sges[i], offset, n, 0);
    if (!p) {
      ok = false;
      return {};
    }
    if (!fault_guard::copy(scratch + done, p, n, p)) {  // gone since registered
      ok = false;
      return {};
    }
    done += n;
    offset = 0;
  }
  if (done != len) {
    ok = false;
    return {};
  }
  return {scratch, len};
}

bool check_sges(const MemoryDomain& mem, std::span<const verbs::Sge> sges, uint32_t need) noexcept {
  for (const verbs::Sge& sge : sges)
    if (sge.length && !resolve(mem, sge, 0, sge.length, need)) return false;
  return true;
}

}  // namespace uroce::transport
