#include "pytorch/work.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv::pytorch {

Work::Work(int rank, c10d::OpType type, std::vector<at::Tensor> tensors, std::string what,
           std::chrono::milliseconds default_timeout, int source_rank)
    : c10d::Work(rank, type),
      tensors_(std::move(tensors)),
      what_(std::move(what)),
      default_timeout_(default_timeout),
      source_rank_(source_rank),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void Work::Complete(const absl::Status& status) {
  if (completing_.exchange(true)) return;
  if (status.ok()) {
    finish();
    future_->markCompleted(c10::IValue(tensors_));
    done_.Notify();
    return;
  }
  auto error = std::make_exception_ptr(
      std::runtime_error(absl::StrCat("rdv: ", what_, " failed: ", status.ToString())));
  finish(error);
  future_->setError(error);
  done_.Notify();
}

bool Work::wait(std::chrono::milliseconds timeout) {
  const auto bound = timeout == kNoTimeout ? default_timeout_ : timeout;
  if (!done_.WaitForNotificationWithTimeout(absl::FromChrono(bound))) {
    throw std::runtime_error(absl::StrCat("rdv: ", what_, " did not complete within ",
                                          bound.count(), " ms; it is still pending"));
  }
  std::unique_lock lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void Work::abort() { cancellation_.StartCancel(); }

int Work::sourceRank() const {
  if (source_rank_ < 0) throw std::runtime_error(absl::StrCat("rdv: ", what_, " has no source"));
  return source_rank_;
}

std::vector<at::Tensor> Work::result() { return tensors_; }

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() { return future_; }

}  // namespace rdv::pytorch
