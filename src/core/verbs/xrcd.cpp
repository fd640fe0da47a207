#include "verbs/xrcd.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <tuple>

#include "verbs/context.hpp"
#include "verbs/pd.hpp"

namespace uroce::verbs {
namespace {

// The domains opened on files: (NIC, device, inode) -> domain and opens.
struct FileDomain {
  uint32_t id = 0;
  int opens = 0;
};
using FileKey = std::tuple<const void*, dev_t, ino_t>;

std::mutex& domains_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<FileKey, FileDomain>& domains() {
  static auto* m = new std::map<FileKey, FileDomain>;
  return *m;
}
std::atomic<uint32_t> g_next_id{1};

}  // namespace

Result<std::unique_ptr<Xrcd>> Xrcd::open(Context& ctx, int fd, int oflags) {
  std::unique_ptr<Xrcd> x(new Xrcd());
  x->ctx_ = &ctx;
  auto pd = Pd::create(ctx);
  if (!pd.ok()) return pd.status();
  x->pd_ = std::move(*pd);
  if (fd == -1) {
    x->id_ = g_next_id++;
    return x;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) return err::from_errno(EBADF, "XRC domain: fd " + std::to_string(fd) + " is not open");
  std::lock_guard g(domains_mu());
  const FileKey key{&ctx.nic(), st.st_dev, st.st_ino};
  auto it = domains().find(key);
  if (it == domains().end() && !(oflags & O_CREAT))
    return err::inval("XRC domain: the file has none and oflags lack O_CREAT");
  if (it != domains().end() && (oflags & O_EXCL))
    return err::inval("XRC domain: the file has one and oflags ask O_EXCL");
  if (it == domains().end()) it = domains().emplace(key, FileDomain{g_next_id++, 0}).first;
  ++it->second.opens;
  x->id_ = it->second.id;
  x->on_file_ = true;
  x->dev_ = st.st_dev;
  x->ino_ = st.st_ino;
  return x;
}

Xrcd::~Xrcd() {
  if (!on_file_) return;
  std::lock_guard g(domains_mu());
  auto it = domains().find(FileKey{&ctx_->nic(), dev_, ino_});
  if (it != domains().end() && --it->second.opens == 0) domains().erase(it);
}

}  // namespace uroce::verbs
