// Status and Result: the one error type of the core.
//
// A Status is either ok or an error carrying an errno value (the C ABI in
// compat hands it on unchanged) and a human-readable message.  Messages are
// only built on the error path; an ok Status costs one int.
#pragma once

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace uroce {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok

  static Status error(int errnum, std::string message) {
    Status s;
    s.code_ = errnum == 0 ? EIO : errnum;
    s.msg_ = std::make_shared<const std::string>(std::move(message));
    return s;
  }

  bool ok() const noexcept { return code_ == 0; }
  explicit operator bool() const noexcept { return ok(); }
  // errno value; 0 when ok.
  int code() const noexcept { return code_; }
  std::string_view message() const noexcept { return msg_ ? std::string_view(*msg_) : std::string_view{}; }
  // "EINVAL: qp_type 9 is not a QP type"
  std::string to_string() const;

 private:
  int code_ = 0;
  std::shared_ptr<const std::string> msg_;
};

// Shorthands used all over the core: return err::inval("...").
namespace err {
inline Status inval(std::string m) { return Status::error(EINVAL, std::move(m)); }
inline Status nomem(std::string m) { return Status::error(ENOMEM, std::move(m)); }
inline Status notsup(std::string m) { return Status::error(EOPNOTSUPP, std::move(m)); }
inline Status busy(std::string m) { return Status::error(EBUSY, std::move(m)); }
inline Status again(std::string m) { return Status::error(EAGAIN, std::move(m)); }
inline Status noent(std::string m) { return Status::error(ENOENT, std::move(m)); }
inline Status perm(std::string m) { return Status::error(EPERM, std::move(m)); }
inline Status access(std::string m) { return Status::error(EACCES, std::move(m)); }
inline Status exist(std::string m) { return Status::error(EEXIST, std::move(m)); }
inline Status io(std::string m) { return Status::error(EIO, std::move(m)); }
inline Status range(std::string m) { return Status::error(ERANGE, std::move(m)); }
inline Status from_errno(int e, std::string m) { return Status::error(e, std::move(m)); }
}  // namespace err

// Result<T>: a value or an error Status (std::expected is C++23).
template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>);

 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status::error(EIO, "Result built from an ok Status");
  }

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const Status& status() const noexcept { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace uroce

// Propagate an error Status from an expression returning Status.
#define UROCE_TRY(expr)                          \
  do {                                           \
    ::uroce::Status uroce_try_s_ = (expr);       \
    if (!uroce_try_s_.ok()) return uroce_try_s_; \
  } while (0)
