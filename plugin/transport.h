// A loaded transport plugin (plugin/rdv_transport.h) behind a C++ face:
// Status instead of codes, callables instead of C callbacks. Thread-safe.
//
// Loading: librdv_transport_<name>.so is looked for in each directory of
// RDV_PLUGIN_PATH (':'-separated), then in rdv's install directory, then
// in the build tree's plugin directory. It is opened with
// RTLD_NOW | RTLD_LOCAL, and its newest ABI entry rdv knows is taken
// (rdv_transport_v3, else the frozen rdv_transport_v2); a missing file, no
// known entry or an entry reporting another version is an error naming the
// file, the symbol and the versions.
//
// Settings: a v3 plugin lists the settings it takes; each is given by the
// caller, else read from the variable the plugin names for it (RDV_UCX_OP,
// UCX_TLS, RDV_IB_DEVICE...), else left to the plugin's default. A v2
// plugin takes none (it reads its environment itself).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "core/memory.h"
#include "core/status.h"
#include "plugin/rdv_transport.h"

namespace rdv::plugin {

class Transport;

// Memory the transport can move: allocated by it or registered with it.
// Released (unregistered or freed) when destroyed.
class TransportMemory {
 public:
  ~TransportMemory();
  TransportMemory(const TransportMemory&) = delete;
  TransportMemory& operator=(const TransportMemory&) = delete;

  void* address() const { return address_; }
  size_t length() const { return length_; }
  rdv_transport_memory_t handle() const { return handle_; }
  // The remote key a peer needs to reach this memory (packed once).
  const std::string& remote_key() const { return remote_key_; }
  // Peers read it by a copy of their own, without this process's help
  // (rdv_transport_memory_attributes_t::read_by_peer_copy): a producer may
  // lend it to be read instead of sending it.
  bool read_by_peer_copy() const { return read_by_peer_copy_; }

 private:
  friend class Transport;
  TransportMemory(std::shared_ptr<const Transport> transport, rdv_transport_memory_t handle,
                  void* address, size_t length)
      : transport_(std::move(transport)), handle_(handle), address_(address), length_(length) {}

  std::shared_ptr<const Transport> transport_;
  rdv_transport_memory_t handle_;
  void* address_;
  size_t length_;
  std::string remote_key_;
  bool read_by_peer_copy_ = false;
};

// A connection to one peer. Disconnected when destroyed.
class TransportEndpoint {
 public:
  ~TransportEndpoint();
  TransportEndpoint(const TransportEndpoint&) = delete;
  TransportEndpoint& operator=(const TransportEndpoint&) = delete;
  rdv_transport_endpoint_t handle() const { return handle_; }
  // Ends what is in flight on it with CANCELLED, without waiting for the
  // peer, and fails what is posted later: only for a peer known to be lost.
  void Abort() const;

 private:
  friend class Transport;
  TransportEndpoint(std::shared_ptr<const Transport> transport, rdv_transport_endpoint_t handle)
      : transport_(std::move(transport)), handle_(handle) {}
  std::shared_ptr<const Transport> transport_;
  rdv_transport_endpoint_t handle_;
};

// Runs once on the plugin's progress thread; must not block.
using TransportDone = absl::AnyInvocable<void(absl::Status) &&>;

// Values for a plugin's settings, by the names it lists.
using TransportSettings = std::map<std::string, std::string>;

// Takes each message peers post to this context (ABI v3's messages), on
// the plugin's progress thread; must not block. The bytes are valid during
// the call only.
using MessageHandler = std::function<void(absl::string_view message)>;

// One setting a plugin lists, and the value it was loaded with.
struct TransportSetting {
  std::string name;
  std::string environment;  // the variable it is read from; empty when none
  std::string default_value;
  std::string description;
  std::string value;        // given or read from `environment`; empty: the default
  bool from_environment = false;
};

class Transport : public std::enable_shared_from_this<Transport> {
 public:
  // Loads and initializes librdv_transport_<name>.so with `settings`
  // (INVALID_ARGUMENT for a name the plugin does not list, naming those it
  // does; FAILED_PRECONDITION for any, to a v2 plugin).
  // Messages peers post to it go to `on_message` (none taken when null).
  static absl::StatusOr<std::shared_ptr<Transport>> Load(absl::string_view name,
                                                         const TransportSettings& settings = {},
                                                         MessageHandler on_message = nullptr);
  // What librdv_transport_<name>.so takes, with the values Load would pass
  // it now; the plugin is not initialized (no device needed). Empty for a v2
  // plugin.
  static absl::StatusOr<std::vector<TransportSetting>> ListSettings(absl::string_view name);
  // Where Load looks, in order.
  static std::vector<std::string> SearchPath();

  // Finalizes the plugin's context. The last user may let go anywhere, in
  // one of this transport's callbacks too (memory held by a transfer that
  // ended after its worker): finalizing there would join the thread it
  // runs on, so it runs on a thread of its own, joined at exit.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const std::string& name() const { return name_; }
  // The ABI version the plugin was loaded by: 3, or 2 for an older plugin.
  uint32_t abi_version() const { return api_.abi_version; }
  const std::string& description() const { return description_; }
  // What the plugin takes, with the values it got; empty for a v2 plugin.
  const std::vector<TransportSetting>& settings() const { return settings_; }
  uint32_t preferred_op() const { return preferred_op_; }
  // RDV_TRANSPORT_OP_* it offers.
  uint32_t supported_ops() const { return supported_ops_; }
  // It carries messages (SendMessage) of up to max_message_bytes().
  bool carries_messages() const { return max_message_bytes_ > 0; }
  size_t max_message_bytes() const { return max_message_bytes_; }
  // A message posted on an endpoint after a Put on it reaches the peer only
  // once the Put's bytes are in the peer's memory, and never when it failed.
  bool messages_follow_puts() const { return messages_follow_puts_; }
  // Allocate gives memory read by a peer's copy (read_by_peer_copy()) to
  // lengths of at least this, while the plugin has such memory left; 0:
  // never.
  size_t peer_copy_from_bytes() const { return peer_copy_from_bytes_; }
  // The transport moves CUDA device memory itself (GPUDirect RDMA, or
  // UCX's CUDA support); else GPU tensors stage through host memory.
  bool reaches_cuda_memory() const { return reaches_cuda_memory_; }

  absl::StatusOr<std::string> LocalAddress() const;
  absl::StatusOr<std::unique_ptr<TransportEndpoint>> Connect(absl::string_view peer_address) const;
  absl::StatusOr<std::unique_ptr<TransportMemory>> Allocate(size_t length) const;
  absl::StatusOr<std::unique_ptr<TransportMemory>> Register(
      void* address, size_t length, MemoryLocation location = MemoryLocation::Host()) const;

  // One-sided and tagged transfers. `done` runs exactly once: on the
  // progress thread when the transfer ends, or on this thread at once when
  // it could not be posted.
  void Get(const TransportEndpoint& endpoint, void* local, const TransportMemory& memory,
           uint64_t remote_address, absl::string_view remote_key, size_t length,
           TransportDone done) const;
  void Put(const TransportEndpoint& endpoint, const void* local, const TransportMemory& memory,
           uint64_t remote_address, absl::string_view remote_key, size_t length,
           TransportDone done) const;
  void Send(const TransportEndpoint& endpoint, const void* local, size_t length, uint64_t tag,
            TransportDone done) const;
  void Recv(void* local, size_t length, uint64_t tag, TransportDone done) const;
  // Sends `message` (copied before this returns) to the peer context's
  // message handler. UNIMPLEMENTED where !carries_messages().
  void SendMessage(const TransportEndpoint& endpoint, absl::string_view message,
                   TransportDone done) const;
  // Ends the Recv waiting under `tag` with CANCELLED if no send matched it
  // yet; NOT_FOUND when none waits (it ended, or its bytes are arriving).
  absl::Status CancelRecv(uint64_t tag) const;

 private:
  friend class TransportMemory;
  friend class TransportEndpoint;
  Transport() = default;
  // Finds and opens the library and binds its table; not initialized.
  static absl::StatusOr<std::shared_ptr<Transport>> Open(absl::string_view name);
  // Takes the newest ABI entry the library exports into api_.
  absl::Status Bind();
  // Fills settings_ from `given` and the environment.
  absl::Status ResolveSettings(const TransportSettings& given);
  absl::Status Initialize();
  // Packs its remote key.
  absl::Status Pack(TransportMemory* memory) const;
  // What it is to peers (mem_query, where the plugin has it).
  absl::Status Query(TransportMemory* memory) const;
  // Hands `done` to a post function; runs it with the error if the plugin
  // refused the operation.
  template <typename PostFn>
  void Post(absl::string_view what, TransportDone done, PostFn post) const;

  std::string name_;
  std::string path_;
  void* library_ = nullptr;
  // The plugin's table; a v2 plugin's has no `settings`.
  rdv_transport_v3_t api_{};
  std::vector<TransportSetting> settings_;
  rdv_transport_context_t context_ = nullptr;
  std::string description_;
  uint32_t preferred_op_ = RDV_TRANSPORT_OP_GET;
  uint32_t supported_ops_ = 0;
  bool reaches_cuda_memory_ = false;
  size_t max_message_bytes_ = 0;
  bool messages_follow_puts_ = false;
  size_t peer_copy_from_bytes_ = 0;
  MessageHandler on_message_;
};

// The plugin's error as a Status: `code` and its message, prefixed by what
// rdv was doing.
absl::Status TransportStatus(int code, const char* message, absl::string_view what);

}  // namespace rdv::plugin
