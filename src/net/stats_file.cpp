#include "net/stats_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <set>

#include "common/own_mappings.hpp"
#include "net/proc_info.hpp"
#include "net/runtime_dir.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace {

using stats_file::Header;
using stats_file::kNameLen;

size_t file_size(uint32_t count) { return sizeof(Header) + size_t(count) * (kNameLen + 8); }

char* names_at(void* base) { return static_cast<char*>(base) + sizeof(Header); }
uint64_t* values_at(void* base, uint32_t count) {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(base) + sizeof(Header) + size_t(count) * kNameLen);
}

void copy_str(char* dst, size_t cap, std::string_view s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  std::memset(dst + n, 0, cap - n);
}

std::string sanitize(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64))
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return out.empty() ? std::string("nic") : out;
}

uint64_t magic_word() {
  uint64_t w;
  std::memcpy(&w, stats_file::kMagic, 8);
  return w;
}

std::string prefix() { return "uroce-" + std::to_string(::geteuid()) + "-stats-"; }

// Files this process owns now (two NICs of the same name get distinct files).
std::mutex g_mu;
std::set<std::string>& owned() {
  static auto* s = new std::set<std::string>;
  return *s;
}

uint64_t realtime_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

}  // namespace

Result<std::string> stats_dir() {
  const char* d = std::getenv("UROCE_STATS_DIR");
  if (d && *d) return std::string(d);
  return runtime_dir();
}

bool stats_enabled() {
  const char* e = std::getenv("UROCE_STATS");
  return !(e && std::string_view(e) == "0");
}

Result<std::unique_ptr<StatsPublisher>> StatsPublisher::create(const Identity& id,
                                                               std::span<const std::string_view> names) {
  // Files of processes that died without removing theirs (killed, crashed)
  // go once per process, as `uroce stat` does when it meets them.
  static std::once_flag swept;
  std::call_once(swept, [] { (void)read_published_stats(std::nullopt); });
  const auto me = proc_stat(0);
  auto dir = stats_dir();
  if (!dir) return dir.status();
  const std::string base = *dir + "/" + prefix() + std::to_string(::getpid()) + "-" + sanitize(id.device);
  std::string path;
  {
    std::lock_guard g(g_mu);
    path = base;
    for (int i = 2; owned().count(path); ++i) path = base + "." + std::to_string(i);
    owned().insert(path);
  }
  std::unique_ptr<StatsPublisher> p(new StatsPublisher());
  p->path_ = path;  // from here on the destructor gives the name back
  // A file of this name is left over from a dead process whose pid we now
  // have (we own none of that name): replace it.
  (void)::unlink(path.c_str());
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return err::from_errno(errno, "stats file " + path + ": " + std::strerror(errno));
  const uint32_t count = uint32_t(names.size());
  const size_t size = file_size(count);
  if (::ftruncate(fd.get(), off_t(size)) != 0) {
    const int e = errno;
    ::unlink(path.c_str());
    return err::from_errno(e, "stats file " + path + ": ftruncate: " + std::strerror(e));
  }
  void* m = own_mappings::map(size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    ::unlink(path.c_str());
    return err::from_errno(e, "stats file " + path + ": mmap: " + std::strerror(e));
  }
  p->map_ = m;
  p->size_ = size;
  p->count_ = count;
  auto* h = new (m) Header();
  h->version = stats_file::kVersion;
  h->count = count;
  h->pid = int32_t(::getpid());
  h->start_time = me ? me->start : 0;
  copy_str(h->device, sizeof h->device, id.device);
  copy_str(h->endpoint, sizeof h->endpoint, id.endpoint);
  copy_str(h->faults, sizeof h->faults, id.faults);
  for (uint32_t i = 0; i < count; ++i) copy_str(names_at(m) + size_t(i) * kNameLen, kNameLen, names[i]);
  h->seq.store(0, std::memory_order_relaxed);
  h->updated_ns.store(0, std::memory_order_relaxed);
  h->published.store(0, std::memory_order_relaxed);
  // The magic last, released: a reader ignores a file whose header is not
  // complete.
  __atomic_store_n(reinterpret_cast<uint64_t*>(h->magic), magic_word(), __ATOMIC_RELEASE);
  return p;
}

StatsPublisher::~StatsPublisher() {
  if (map_) own_mappings::unmap(map_, size_);
  if (!path_.empty()) {
    ::unlink(path_.c_str());
    std::lock_guard g(g_mu);
    owned().erase(path_);
  }
}

void StatsPublisher::publish(std::span<const uint64_t> values) noexcept {
  if (!map_) return;
  auto* h = static_cast<Header*>(map_);
  uint64_t* v = values_at(map_, count_);
  // Odd while writing; the acquire half keeps the value stores after it.
  const uint64_t s = h->seq.fetch_add(1, std::memory_order_acq_rel);
  const size_t n = std::min<size_t>(count_, values.size());
  for (size_t i = 0; i < n; ++i) __atomic_store_n(&v[i], values[i], __ATOMIC_RELAXED);
  h->updated_ns.store(realtime_ns(), std::memory_order_relaxed);
  h->published.fetch_add(1, std::memory_order_relaxed);
  h->seq.store(s + 2, std::memory_order_release);
}

namespace {

// Reads one file; nullopt if it is not a complete stats file or its owner is
// gone (then `dead` is set).
std::optional<StatsSnapshot> read_one(const std::string& path, bool& dead) {
  dead = false;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return std::nullopt;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      size_t(st.st_size) < sizeof(Header))
    return std::nullopt;
  void* m = own_mappings::map(size_t(st.st_size), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return std::nullopt;
  struct Unmap {
    void* m;
    size_t n;
    ~Unmap() { own_mappings::unmap(m, n); }
  } unmap{m, size_t(st.st_size)};
  const auto* h = static_cast<const Header*>(m);
  if (__atomic_load_n(reinterpret_cast<const uint64_t*>(h->magic), __ATOMIC_ACQUIRE) != magic_word())
    return std::nullopt;
  if (h->version != stats_file::kVersion || file_size(h->count) > size_t(st.st_size)) return std::nullopt;
  const auto ps = proc_stat(pid_t(h->pid));
  if (!ps || ps->state == 'Z' || ps->state == 'X' || (h->start_time && ps->start != h->start_time)) {
    dead = true;
    return std::nullopt;
  }
  StatsSnapshot s;
  s.pid = pid_t(h->pid);
  s.device.assign(h->device, strnlen(h->device, sizeof h->device));
  s.endpoint.assign(h->endpoint, strnlen(h->endpoint, sizeof h->endpoint));
  s.faults.assign(h->faults, strnlen(h->faults, sizeof h->faults));
  s.path = path;
  const uint32_t count = h->count;
  const char* names = names_at(m);
  const uint64_t* vals = values_at(m, count);
  std::vector<uint64_t> v(count);
  for (int attempt = 0;; ++attempt) {
    const uint64_t s1 = h->seq.load(std::memory_order_acquire);
    // Acquire loads: the second look at seq cannot move before them.
    for (uint32_t i = 0; i < count; ++i) v[i] = __atomic_load_n(&vals[i], __ATOMIC_ACQUIRE);
    s.updated_ns = h->updated_ns.load(std::memory_order_acquire);
    s.published = h->published.load(std::memory_order_acquire);
    const uint64_t s2 = h->seq.load(std::memory_order_relaxed);
    if ((s1 == s2 && !(s1 & 1)) || attempt == 1000) break;
    ::usleep(10);
  }
  for (uint32_t i = 0; i < count; ++i)
    s.counters.emplace_back(std::string(names + size_t(i) * kNameLen, strnlen(names + size_t(i) * kNameLen, kNameLen)),
                            v[i]);
  return s;
}

}  // namespace

Result<std::vector<StatsSnapshot>> read_published_stats(std::optional<pid_t> pid) {
  auto where = stats_dir();
  if (!where) return where.status();
  const std::string dir = *where;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return err::from_errno(errno, "stats directory " + dir + ": " + std::strerror(errno));
  const std::string pre = prefix();
  std::vector<std::string> paths;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with(pre)) continue;
    if (pid) {
      const std::string want = pre + std::to_string(*pid) + "-";
      if (!name.starts_with(want)) continue;
    }
    paths.push_back(dir + "/" + std::string(name));
  }
  ::closedir(d);
  std::vector<StatsSnapshot> out;
  for (const std::string& p : paths) {
    bool dead;
    if (auto s = read_one(p, dead))
      out.push_back(std::move(*s));
    else if (dead)
      (void)::unlink(p.c_str());
  }
  std::sort(out.begin(), out.end(), [](const StatsSnapshot& a, const StatsSnapshot& b) {
    return a.pid != b.pid ? a.pid < b.pid : a.path < b.path;
  });
  return out;
}

}  // namespace uroce::net
