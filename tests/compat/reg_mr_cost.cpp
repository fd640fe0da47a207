// What registering memory costs on uroce, against copying it: ibv_reg_mr of
// 1 GiB (touched and untouched memory, with and without on-demand paging,
// implicit ODP) and ibv_dereg_mr, next to one memcpy of 1 GiB.  A hardware
// NIC pins and maps every page at registration (typically a large fraction
// of the memcpy time per GiB); a software NIC only checks that the range is
// mapped, or, with ODP, not even that.  Prints the figures; fails only if a
// verb fails.  Exit 77 (skipped) with less than 4 GiB of memory available.
#include <infiniband/verbs.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSize = size_t(1) << 30;
constexpr int kRounds = 5;

double best_us(const std::function<void()>& f) {
  double best = 1e300;
  for (int i = 0; i < kRounds; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return best;
}

void* map(bool touch) {
  void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (touch) std::memset(p, 1, kSize);
  return p;
}

}  // namespace

// MemAvailable of /proc/meminfo in bytes (0 if unknown).
size_t available_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

int main() {
  // 2 GiB are touched (the memcpy's source and destination), 1 GiB more at
  // the end (the fault-in row): leave room for the rest of the machine.
  if (available_memory() < 4 * kSize) {
    std::printf("less than 4 GiB of memory available: skipped\n");
    return 77;
  }
  void* src = map(true);
  void* dst = map(true);
  void* fresh = map(false);
  if (!src || !dst || !fresh) {
    std::printf("cannot map 3 x 1 GiB: skipped\n");
    return 77;
  }
  ibv_device** list = ibv_get_device_list(nullptr);
  if (!list || !list[0]) return 1;
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  if (!pd) return 1;

  const unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  bool ok = true;
  auto reg = [&](void* addr, size_t len, unsigned acc) {
    return [&ok, pd, addr, len, acc] {
      ibv_mr* mr = ibv_reg_mr(pd, addr, len, int(acc));
      if (!mr) {
        ok = false;
        return;
      }
      ibv_dereg_mr(mr);
    };
  };
  // Deregistration alone.
  double dereg = 1e300;
  for (int i = 0; i < kRounds; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd, src, kSize, int(access));
    if (!mr) return 1;
    const auto t0 = Clock::now();
    ibv_dereg_mr(mr);
    dereg = std::min(dereg, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }

  const double copy = best_us([&] { std::memcpy(dst, src, kSize); });
  const double reg_touched = best_us(reg(src, kSize, access));
  const double reg_fresh = best_us(reg(fresh, kSize, access));
  const double reg_odp = best_us(reg(src, kSize, access | IBV_ACCESS_ON_DEMAND));
  const double reg_implicit = best_us(reg(nullptr, SIZE_MAX, access | IBV_ACCESS_ON_DEMAND));

  // What on-demand paging defers: faulting in 1 GiB never touched (what a
  // pinning NIC pays inside ibv_reg_mr).  Once: the pages stay afterwards.
  double prefetch = 0;
  {
    ibv_mr* mr = ibv_reg_mr(pd, fresh, kSize, int(access | IBV_ACCESS_ON_DEMAND));
    if (!mr) return 1;
    ibv_sge sge{reinterpret_cast<uintptr_t>(fresh), 0, mr->lkey};
    const auto t0 = Clock::now();
    for (size_t off = 0; off < kSize; off += size_t(1) << 30 >> 2) {  // 4 SGEs of 256 MiB
      sge.addr = reinterpret_cast<uintptr_t>(fresh) + off;
      sge.length = uint32_t(kSize >> 2);
      if (ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1)) ok = false;
    }
    prefetch = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    ibv_dereg_mr(mr);
  }

  std::printf("best of %d rounds, 1 GiB = %zu bytes\n", kRounds, kSize);
  std::printf("  %-48s %12.1f us  (%.2f GB/s)\n", "memcpy of 1 GiB", copy, kSize / copy / 1e3);
  auto row = [&](const char* what, double us) {
    std::printf("  %-48s %12.1f us  (%.6f of the memcpy)\n", what, us, us / copy);
  };
  row("ibv_reg_mr + ibv_dereg_mr, 1 GiB touched", reg_touched);
  row("ibv_reg_mr + ibv_dereg_mr, 1 GiB never touched", reg_fresh);
  row("ibv_dereg_mr alone", dereg);
  row("ibv_reg_mr ON_DEMAND + dereg, 1 GiB", reg_odp);
  row("ibv_reg_mr(NULL, SIZE_MAX, ON_DEMAND) + dereg", reg_implicit);
  row("ODP prefetch (fault-in) of 1 GiB never touched", prefetch);

  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  munmap(src, kSize);
  munmap(dst, kSize);
  munmap(fresh, kSize);
  return ok ? 0 : 1;
}
