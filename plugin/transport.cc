#include "plugin/transport.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/environment.h"
#include "core/logging.h"

namespace rdv::plugin {
namespace {

void LogFromPlugin(void* user, int level, const char* message) {
  const auto* transport = static_cast<const std::string*>(user);
  const LogLevel rdv_level = static_cast<LogLevel>(std::min(std::max(level, 0), 4));
  if (LogEnabled(rdv_level)) {
    LogMessage(rdv_level, "plugin", 0).stream() << *transport << ": " << message;
  }
}

// Callbacks from a plugin's thread running on this thread: a transport
// let go of there cannot finalize there (it would join that thread).
thread_local int callbacks_running = 0;

class InCallback {
 public:
  InCallback() { ++callbacks_running; }
  ~InCallback() { --callbacks_running; }
  InCallback(const InCallback&) = delete;
  InCallback& operator=(const InCallback&) = delete;
};

// Finalizes, each on a thread of its own, the transports whose last user
// let go inside one of their callbacks (a buffer of transport memory held
// by a transfer that outlived its worker); joins them at exit.
class DeferredFinalizer {
 public:
  ~DeferredFinalizer() {
    std::lock_guard lock(mu_);
    for (std::thread& thread : threads_) thread.join();
  }
  void Finalize(void (*finalize)(rdv_transport_context_t), rdv_transport_context_t context) {
    std::lock_guard lock(mu_);
    threads_.emplace_back([finalize, context] { finalize(context); });
  }

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;  // mu_
};

DeferredFinalizer& Finalizer() {
  static DeferredFinalizer finalizer;
  return finalizer;
}

void DeliverMessage(void* user, const void* message, size_t length) {
  const InCallback in_callback;
  (*static_cast<const MessageHandler*>(user))(
      absl::string_view(static_cast<const char*>(message), length));
}

void Trampoline(void* user, int code, const char* message) {
  const InCallback in_callback;
  auto* done = static_cast<TransportDone*>(user);
  std::move (*done)(TransportStatus(code, message, "transfer"));
  delete done;
}

bool IsFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// <libdir>/rdv when this code runs from an installed librdv.so, wherever
// its prefix was moved to: an embedder finds the plugins installed with it.
std::optional<std::string> PluginDirBesideSharedLibrary() {
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&IsFile), &info) == 0 || info.dli_fname == nullptr) {
    return std::nullopt;
  }
  // The path the loader used may hold "..": an RPATH of $ORIGIN/../..
  std::error_code error;
  const std::filesystem::path file = std::filesystem::weakly_canonical(info.dli_fname, error);
  if (error || file.filename().string().find(".so") == std::string::npos) return std::nullopt;
  return (file.parent_path() / "rdv").string();
}

}  // namespace

absl::Status TransportStatus(int code, const char* message, absl::string_view what) {
  if (code == RDV_TRANSPORT_OK) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat(what, ": ", message != nullptr ? message : "(no message)"));
}

std::vector<std::string> Transport::SearchPath() {
  std::vector<std::string> directories;
  if (const char* env = std::getenv("RDV_PLUGIN_PATH")) {
    for (absl::string_view dir : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      directories.emplace_back(dir);
    }
  }
  if (std::optional<std::string> beside = PluginDirBesideSharedLibrary()) {
    directories.push_back(*std::move(beside));
  }
  directories.emplace_back(RDV_INSTALL_PLUGIN_DIR);
  directories.emplace_back(RDV_BUILD_PLUGIN_DIR);
  return directories;
}

absl::StatusOr<std::shared_ptr<Transport>> Transport::Load(absl::string_view name,
                                                           const TransportSettings& settings,
                                                           MessageHandler on_message) {
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<Transport> transport, Open(name));
  transport->on_message_ = std::move(on_message);
  RDV_RETURN_IF_ERROR(transport->ResolveSettings(settings));
  RDV_RETURN_IF_ERROR(transport->Initialize());
  RDV_LOG(Info) << "transport " << name << " (ABI v" << transport->abi_version() << ") from "
                << transport->path_ << ": " << transport->description_;
  return transport;
}

absl::StatusOr<std::vector<TransportSetting>> Transport::ListSettings(absl::string_view name) {
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<Transport> transport, Open(name));
  RDV_RETURN_IF_ERROR(transport->ResolveSettings({}));
  return transport->settings_;
}

absl::StatusOr<std::shared_ptr<Transport>> Transport::Open(absl::string_view name) {
  const std::string file = absl::StrCat("librdv_transport_", name, ".so");
  const std::vector<std::string> directories = SearchPath();
  std::string path;
  for (const std::string& dir : directories) {
    if (IsFile(dir + "/" + file)) {
      path = dir + "/" + file;
      break;
    }
  }
  if (path.empty()) {
    return absl::NotFoundError(absl::StrCat("transport '", name, "': ", file, " not found in ",
                                            absl::StrJoin(directories, ":"),
                                            " (set RDV_PLUGIN_PATH, or build with RDV_WITH_",
                                            absl::AsciiStrToUpper(name), "=ON)"));
  }
  auto transport = std::shared_ptr<Transport>(new Transport());
  transport->name_ = std::string(name);
  transport->path_ = path;
  transport->library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (transport->library_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot load ", path, ": ", dlerror()));
  }
  RDV_RETURN_IF_ERROR(transport->Bind());
  return transport;
}

namespace {

// The entry's table, checked: its version and a size that holds at least
// its first `min_size` bytes (functions appended later may be missing).
template <typename Table>
absl::StatusOr<const Table*> TableOf(void* entry, const std::string& path, const char* symbol,
                                     uint32_t version, size_t min_size = sizeof(Table)) {
  using EntryFn = const Table* (*)();
  const Table* table = reinterpret_cast<EntryFn>(entry)();
  if (table == nullptr || table->abi_version != version || table->struct_size < min_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": ", symbol, " reports ABI version ", table ? table->abi_version : 0, " (",
        table ? table->struct_size : 0, " bytes); it must report ", version, " (at least ",
        min_size, " bytes). rdv takes transport ABI ", RDV_TRANSPORT_ABI_VERSION,
        " (", RDV_TRANSPORT_ENTRY_V3, ") and ", RDV_TRANSPORT_OLDEST_ABI_VERSION, " (",
        RDV_TRANSPORT_ENTRY_V2, ")"));
  }
  return table;
}

// A v2 table as v3's, without `settings`.
rdv_transport_v3_t FromV2(const rdv_transport_v2_t& v2) {
  rdv_transport_v3_t api{};
  api.abi_version = v2.abi_version;
  api.struct_size = v2.struct_size;
  api.name = v2.name;
  api.init = v2.init;
  api.finalize = v2.finalize;
  api.query = v2.query;
  api.local_address = v2.local_address;
  api.connect = v2.connect;
  api.disconnect = v2.disconnect;
  api.mem_alloc = v2.mem_alloc;
  api.mem_register = v2.mem_register;
  api.mem_release = v2.mem_release;
  api.mem_pack = v2.mem_pack;
  api.post_get = v2.post_get;
  api.post_put = v2.post_put;
  api.post_send = v2.post_send;
  api.post_recv = v2.post_recv;
  api.abort = v2.abort;
  api.cancel_recv = v2.cancel_recv;
  return api;
}

}  // namespace

absl::Status Transport::Bind() {
  if (void* entry = dlsym(library_, RDV_TRANSPORT_ENTRY_V3)) {
    RDV_ASSIGN_OR_RETURN(const rdv_transport_v3_t* table,
                         TableOf<rdv_transport_v3_t>(entry, path_, RDV_TRANSPORT_ENTRY_V3, 3,
                                                     RDV_TRANSPORT_V3_BASE_SIZE));
    // A table of an older v3 ends early: what it lacks stays null.
    api_ = rdv_transport_v3_t{};
    std::memcpy(&api_, table, std::min<size_t>(table->struct_size, sizeof(api_)));
    return absl::OkStatus();
  }
  if (void* entry = dlsym(library_, RDV_TRANSPORT_ENTRY_V2)) {
    RDV_ASSIGN_OR_RETURN(const rdv_transport_v2_t* table,
                         TableOf<rdv_transport_v2_t>(entry, path_, RDV_TRANSPORT_ENTRY_V2, 2));
    api_ = FromV2(*table);
    RDV_LOG(Warning) << path_ << " speaks transport ABI v2: it takes no settings (it reads its "
                     << "environment itself); rebuild it against rdv_transport_v3.h";
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      path_, " has no symbol ", RDV_TRANSPORT_ENTRY_V3, " or ", RDV_TRANSPORT_ENTRY_V2,
      " (rdv takes transport ABI ", RDV_TRANSPORT_ABI_VERSION, " and ",
      RDV_TRANSPORT_OLDEST_ABI_VERSION, "; see plugin/rdv_transport.h)"));
}

absl::Status Transport::ResolveSettings(const TransportSettings& given) {
  if (api_.settings == nullptr) {
    if (given.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        path_, " speaks transport ABI v2, which takes no settings; cannot pass '",
        given.begin()->first, "' (set the plugin's own environment variable, or rebuild it "
        "against rdv_transport_v3.h)"));
  }
  size_t count = 0;
  const rdv_transport_setting_info_t* table = api_.settings(&count);
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const rdv_transport_setting_info_t& info = table[i];
    TransportSetting setting;
    setting.name = info.name;
    setting.environment = info.environment ? info.environment : "";
    setting.default_value = info.default_value ? info.default_value : "";
    setting.description = info.description ? info.description : "";
    if (auto it = given.find(setting.name); it != given.end()) {
      setting.value = it->second;
    } else if (!setting.environment.empty()) {
      env::ReadText(setting.environment.c_str(), &setting.value);
      setting.from_environment = !setting.value.empty();
    }
    names.push_back(setting.name);
    settings_.push_back(std::move(setting));
  }
  for (const auto& [name, value] : given) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("transport '", name_, "' has no setting '",
                                                     name, "'; it takes: ",
                                                     absl::StrJoin(names, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::Status Transport::Initialize() {
  std::vector<rdv_transport_setting_t> values;
  for (const TransportSetting& setting : settings_) {
    if (!setting.value.empty()) values.push_back({setting.name.c_str(), setting.value.c_str()});
  }
  rdv_transport_init_params_t params{};
  params.field_mask = RDV_TRANSPORT_INIT_FIELD_LOG | RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL;
  params.log = LogFromPlugin;
  params.log_user = &name_;
  params.log_level = static_cast<int>(CurrentLogLevel());
  if (api_.settings != nullptr) {
    params.field_mask |= RDV_TRANSPORT_INIT_FIELD_SETTINGS;
    params.settings = values.data();
    params.num_settings = values.size();
  }
  if (on_message_ != nullptr && api_.post_message != nullptr) {
    params.field_mask |= RDV_TRANSPORT_INIT_FIELD_MESSAGES;
    params.on_message = DeliverMessage;
    params.on_message_user = &on_message_;
  }
  rdv_transport_error_t error{};
  if (int code = api_.init(&params, &context_, &error); code != 0) {
    context_ = nullptr;
    return TransportStatus(code, error.message, absl::StrCat("initializing ", path_));
  }
  rdv_transport_attributes_t attributes{};
  attributes.field_mask = RDV_TRANSPORT_ATTR_FIELD_OPS | RDV_TRANSPORT_ATTR_FIELD_DESCRIPTION |
                          RDV_TRANSPORT_ATTR_FIELD_MEMORY_TYPES;
  if (api_.post_message != nullptr) {
    attributes.field_mask |=
        RDV_TRANSPORT_ATTR_FIELD_MAX_MESSAGE | RDV_TRANSPORT_ATTR_FIELD_MESSAGES_FOLLOW_PUTS;
  }
  // A plugin whose table ends before mem_query has no memory read by copy.
  if (api_.mem_query != nullptr) attributes.field_mask |= RDV_TRANSPORT_ATTR_FIELD_PEER_COPY_FROM;
  if (int code = api_.query(context_, &attributes, &error); code != 0) {
    return TransportStatus(code, error.message, absl::StrCat("querying ", path_));
  }
  preferred_op_ = attributes.preferred_op;
  supported_ops_ = attributes.ops;
  description_ = attributes.description;
  reaches_cuda_memory_ = (attributes.memory_types & RDV_TRANSPORT_MEMORY_CUDA) != 0;
  if (api_.post_message != nullptr && (attributes.ops & RDV_TRANSPORT_OP_MESSAGE)) {
    max_message_bytes_ = attributes.max_message_bytes;
    messages_follow_puts_ = attributes.messages_follow_puts != 0 &&
                            (attributes.ops & RDV_TRANSPORT_OP_PUT) != 0;
  }
  // Zero where it was not asked for: `attributes` started zeroed.
  peer_copy_from_bytes_ = attributes.peer_copy_from_bytes;
  return absl::OkStatus();
}

Transport::~Transport() {
  if (context_ == nullptr) return;
  if (callbacks_running > 0) {
    Finalizer().Finalize(api_.finalize, context_);
  } else {
    api_.finalize(context_);
  }
  // The library stays mapped: its code may still be on a stack unwinding
  // from the progress thread's last callback.
}

absl::StatusOr<std::string> Transport::LocalAddress() const {
  std::string address(4096, '\0');
  size_t length = address.size();
  rdv_transport_error_t error{};
  int code = api_.local_address(context_, address.data(), &length, &error);
  if (code == RDV_TRANSPORT_RESOURCE_EXHAUSTED) {
    address.resize(length);
    code = api_.local_address(context_, address.data(), &length, &error);
  }
  RDV_RETURN_IF_ERROR(TransportStatus(code, error.message, absl::StrCat(name_, " local address")));
  address.resize(length);
  return address;
}

absl::StatusOr<std::unique_ptr<TransportEndpoint>> Transport::Connect(
    absl::string_view peer_address) const {
  rdv_transport_endpoint_t handle = nullptr;
  rdv_transport_error_t error{};
  const int code = api_.connect(context_, peer_address.data(), peer_address.size(), &handle, &error);
  RDV_RETURN_IF_ERROR(TransportStatus(code, error.message, absl::StrCat(name_, " connect")));
  return std::unique_ptr<TransportEndpoint>(new TransportEndpoint(shared_from_this(), handle));
}

absl::Status Transport::Pack(TransportMemory* memory) const {
  std::string key(1024, '\0');
  size_t length = key.size();
  rdv_transport_error_t error{};
  int code = api_.mem_pack(memory->handle_, key.data(), &length, &error);
  if (code == RDV_TRANSPORT_RESOURCE_EXHAUSTED) {
    key.resize(length);
    code = api_.mem_pack(memory->handle_, key.data(), &length, &error);
  }
  RDV_RETURN_IF_ERROR(TransportStatus(code, error.message, absl::StrCat(name_, " remote key")));
  key.resize(length);
  memory->remote_key_ = std::move(key);
  return absl::OkStatus();
}

absl::Status Transport::Query(TransportMemory* memory) const {
  if (api_.mem_query == nullptr) return absl::OkStatus();
  rdv_transport_memory_attributes_t attributes{};
  attributes.field_mask = RDV_TRANSPORT_MEMORY_ATTR_FIELD_READ_BY_PEER_COPY;
  rdv_transport_error_t error{};
  const int code = api_.mem_query(memory->handle_, &attributes, &error);
  RDV_RETURN_IF_ERROR(TransportStatus(code, error.message, absl::StrCat(name_, " memory query")));
  memory->read_by_peer_copy_ = attributes.read_by_peer_copy != 0;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TransportMemory>> Transport::Allocate(size_t length) const {
  rdv_transport_memory_t handle = nullptr;
  void* address = nullptr;
  rdv_transport_error_t error{};
  const int code = api_.mem_alloc(context_, length, &handle, &address, &error);
  RDV_RETURN_IF_ERROR(TransportStatus(code, error.message, absl::StrCat(name_, " allocate")));
  std::unique_ptr<TransportMemory> memory(
      new TransportMemory(shared_from_this(), handle, address, length));
  RDV_RETURN_IF_ERROR(Pack(memory.get()));
  RDV_RETURN_IF_ERROR(Query(memory.get()));
  return memory;
}

absl::StatusOr<std::unique_ptr<TransportMemory>> Transport::Register(
    void* address, size_t length, MemoryLocation location) const {
  rdv_transport_memory_t handle = nullptr;
  rdv_transport_error_t error{};
  const bool cuda = location.kind == MemoryKind::kCudaDevice;
  const int code = api_.mem_register(
      context_, address, length, cuda ? RDV_TRANSPORT_MEMORY_CUDA : RDV_TRANSPORT_MEMORY_HOST,
      cuda ? location.device : 0, &handle, &error);
  RDV_RETURN_IF_ERROR(TransportStatus(code, error.message, absl::StrCat(name_, " register")));
  std::unique_ptr<TransportMemory> memory(
      new TransportMemory(shared_from_this(), handle, address, length));
  RDV_RETURN_IF_ERROR(Pack(memory.get()));
  RDV_RETURN_IF_ERROR(Query(memory.get()));
  return memory;
}

template <typename PostFn>
void Transport::Post(absl::string_view what, TransportDone done, PostFn post) const {
  auto* user = new TransportDone(std::move(done));
  rdv_transport_error_t error{};
  const int code = post(user, &error);
  if (code == RDV_TRANSPORT_OK) return;
  TransportDone refused = std::move(*user);
  delete user;
  std::move(refused)(TransportStatus(code, error.message, absl::StrCat(name_, " ", what)));
}

void Transport::Get(const TransportEndpoint& endpoint, void* local, const TransportMemory& memory,
                    uint64_t remote_address, absl::string_view remote_key, size_t length,
                    TransportDone done) const {
  Post("get", std::move(done), [&](TransportDone* user, rdv_transport_error_t* error) {
    return api_.post_get(endpoint.handle(), local, memory.handle(), remote_address,
                          remote_key.data(), remote_key.size(), length, Trampoline, user, error);
  });
}

void Transport::Put(const TransportEndpoint& endpoint, const void* local,
                    const TransportMemory& memory, uint64_t remote_address,
                    absl::string_view remote_key, size_t length, TransportDone done) const {
  Post("put", std::move(done), [&](TransportDone* user, rdv_transport_error_t* error) {
    return api_.post_put(endpoint.handle(), local, memory.handle(), remote_address,
                          remote_key.data(), remote_key.size(), length, Trampoline, user, error);
  });
}

void Transport::Send(const TransportEndpoint& endpoint, const void* local, size_t length,
                     uint64_t tag, TransportDone done) const {
  Post("send", std::move(done), [&](TransportDone* user, rdv_transport_error_t* error) {
    return api_.post_send(endpoint.handle(), local, nullptr, length, tag, Trampoline, user, error);
  });
}

void Transport::Recv(void* local, size_t length, uint64_t tag, TransportDone done) const {
  Post("recv", std::move(done), [&](TransportDone* user, rdv_transport_error_t* error) {
    return api_.post_recv(context_, local, nullptr, length, tag, Trampoline, user, error);
  });
}

void Transport::SendMessage(const TransportEndpoint& endpoint, absl::string_view message,
                            TransportDone done) const {
  if (!carries_messages()) {
    std::move(done)(absl::UnimplementedError(absl::StrCat(
        "transport ", name_, " carries no messages (", path_, ", ABI v", abi_version(), ")")));
    return;
  }
  Post("message", std::move(done), [&](TransportDone* user, rdv_transport_error_t* error) {
    return api_.post_message(endpoint.handle(), message.data(), message.size(), Trampoline, user,
                             error);
  });
}

absl::Status Transport::CancelRecv(uint64_t tag) const {
  rdv_transport_error_t error{};
  const int code = api_.cancel_recv(context_, tag, &error);
  if (code == RDV_TRANSPORT_OK) return absl::OkStatus();
  return TransportStatus(code, error.message, absl::StrCat(name_, " cancel of a tagged recv"));
}

void TransportEndpoint::Abort() const { transport_->api_.abort(handle_); }

TransportMemory::~TransportMemory() { transport_->api_.mem_release(handle_); }
TransportEndpoint::~TransportEndpoint() { transport_->api_.disconnect(handle_); }

}  // namespace rdv::plugin
