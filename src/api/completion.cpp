// uroce::CompletionQueue and uroce::CompletionChannel over verbs::Cq and
// verbs::CompChannel.
#include <thread>

#include "impl.hpp"

namespace uroce {

// ------------------------------------------------------------ CompletionChannel

CompletionChannel::CompletionChannel(std::unique_ptr<detail::ChannelImpl> impl) noexcept : impl_(std::move(impl)) {}
CompletionChannel::CompletionChannel(CompletionChannel&&) noexcept = default;

CompletionChannel& CompletionChannel::operator=(CompletionChannel&& o) noexcept {
  if (this != &o) {
    if (impl_) detail::destroy_children_first(impl_, impl_->ch->users().load(), "CompletionChannel");
    impl_ = std::move(o.impl_);
  }
  return *this;
}

CompletionChannel::~CompletionChannel() {
  if (impl_) detail::destroy_children_first(impl_, impl_->ch->users().load(), "CompletionChannel");
}

int CompletionChannel::fd() const noexcept { return impl_->ch->fd(); }

Result<CompletionQueue*> CompletionChannel::get_event(int timeout_ms) {
  auto cq = impl_->ch->get_event(timeout_ms);
  if (!cq.ok()) return cq.status();
  auto* owner = static_cast<detail::CqImpl*>((*cq)->user_context());
  return owner ? owner->owner.load() : nullptr;
}

// ------------------------------------------------------------ CompletionQueue

CompletionQueue::CompletionQueue(std::unique_ptr<detail::CqImpl> impl) noexcept : impl_(std::move(impl)) {
  if (impl_) impl_->owner = this;
}

CompletionQueue::CompletionQueue(CompletionQueue&& o) noexcept : impl_(std::move(o.impl_)) {
  if (impl_) impl_->owner = this;
}

CompletionQueue& CompletionQueue::operator=(CompletionQueue&& o) noexcept {
  if (this != &o) {
    if (impl_) detail::destroy_children_first(impl_, impl_->cq->users().load(), "CompletionQueue");
    impl_ = std::move(o.impl_);
    if (impl_) impl_->owner = this;
  }
  return *this;
}

CompletionQueue::~CompletionQueue() {
  if (impl_) detail::destroy_children_first(impl_, impl_->cq->users().load(), "CompletionQueue");
}

Result<int> CompletionQueue::poll(std::span<Wc> out) { return impl_->cq->poll(out); }

Result<int> CompletionQueue::poll_for(std::span<Wc> out, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto n = impl_->cq->poll(out);
    if (!n.ok() || *n > 0 || out.empty()) return n;
    if (std::chrono::steady_clock::now() >= deadline) return 0;
  }
}

Status CompletionQueue::req_notify(bool solicited_only) { return impl_->cq->req_notify(solicited_only); }
void CompletionQueue::ack_events(unsigned n) { impl_->cq->ack_events(n); }
uint32_t CompletionQueue::capacity() const noexcept { return impl_->cq->capacity(); }
Status CompletionQueue::resize(uint32_t cqe) { return impl_->cq->resize(cqe); }

}  // namespace uroce
