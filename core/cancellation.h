// Cancels a group of pending operations (TensorFlow's CancellationManager).
// Operations register a callback under a token; StartCancel runs every
// registered callback once, on the calling thread, outside the manager's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include <condition_variable>
#include <mutex>

namespace rdv {

class CancellationManager {
 public:
  using Token = uint64_t;
  using Callback = absl::AnyInvocable<void() &&>;

  CancellationManager() = default;
  CancellationManager(const CancellationManager&) = delete;
  CancellationManager& operator=(const CancellationManager&) = delete;

  Token NewToken() { return next_token_.fetch_add(1, std::memory_order_relaxed); }

  // False (and `callback` dropped) when cancellation has already started.
  bool RegisterCallback(Token token, Callback callback);

  // True when the callback was removed before cancellation started, so it
  // will never run. False when cancellation started: then, unless called
  // from inside a cancellation callback, it waits until every callback has
  // run, so that the caller may free what the callback touches.
  bool DeregisterCallback(Token token);

  // Runs every registered callback once. Later calls do nothing.
  void StartCancel();

  bool IsCancelled() const;

 private:
  // Guards every field below it.
  mutable std::mutex mu_;
  std::condition_variable cancelled_cv_;
  bool cancelling_ = false;
  bool cancelled_ = false;
  std::thread::id cancelling_thread_;
  absl::flat_hash_map<Token, Callback> callbacks_;
  std::atomic<Token> next_token_{1};
};

}  // namespace rdv
