// rdv_transport_peer: the far side of a test that needs its peer in another
// process, one that can vanish mid-transfer. It loads a transport plugin
// and holds `length` bytes with the pattern byte i = i * 7 + 1, then
//   serve: writes three lines to descriptor 3 (its address in hex, the
//          memory's address, its remote key in hex; UCX may log to
//          standard output) for a peer to get the bytes;
//   send:  writes its address in hex to descriptor 3, reads a peer's
//          address in hex from its first line of standard input and sends
//          the bytes there tagged 7;
// and exits as soon as its standard input closes, without any teardown
// (a test that wants it gone mid-transfer kills it).
//   rdv_transport_peer PLUGIN[:NAME=VALUE] LENGTH serve|send
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "plugin/transport.h"
#include "tests/plugin/transport_parameter.h"

namespace {

using rdv::plugin::Transport;
using rdv::plugin::TransportEndpoint;
using rdv::plugin::TransportMemory;

constexpr uint64_t kTag = 7;

int Fail(const std::string& why) {
  std::fprintf(stderr, "rdv_transport_peer: %s\n", why.c_str());
  return 1;
}

// Writes `lines` to descriptor 3.
int Tell(const std::string& lines) {
  FILE* channel = fdopen(3, "w");
  if (channel == nullptr) return Fail("descriptor 3 is not open for writing");
  std::fputs(lines.c_str(), channel);
  std::fflush(channel);
  return 0;
}

int Serve(const Transport& transport, const TransportMemory& memory) {
  auto address = transport.LocalAddress();
  if (!address.ok()) return Fail(address.status().ToString());
  return Tell(absl::StrCat(absl::BytesToHexString(*address), "\n",
                           reinterpret_cast<uintptr_t>(memory.address()), "\n",
                           absl::BytesToHexString(memory.remote_key()), "\n"));
}

int Send(const Transport& transport, const TransportMemory& memory,
         std::unique_ptr<TransportEndpoint>& endpoint) {
  auto address = transport.LocalAddress();
  if (!address.ok()) return Fail(address.status().ToString());
  if (const int told = Tell(absl::BytesToHexString(*address) + "\n"); told != 0) return told;
  std::string line;
  for (char c; read(STDIN_FILENO, &c, 1) == 1 && c != '\n';) line.push_back(c);
  auto connected = transport.Connect(absl::HexStringToBytes(line));
  if (!connected.ok()) return Fail(connected.status().ToString());
  endpoint = *std::move(connected);
  transport.Send(*endpoint, memory.address(), memory.length(), kTag, [](absl::Status) {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t length = 0;
  const std::string mode = argc == 4 ? argv[3] : "";
  if (!absl::SimpleAtoi(argc == 4 ? argv[2] : "", &length) || length == 0 ||
      (mode != "serve" && mode != "send")) {
    std::fprintf(stderr, "usage: %s PLUGIN[:NAME=VALUE] LENGTH serve|send\n", argv[0]);
    return 2;
  }
  auto transport = Transport::Load(rdv::plugin::conformance::PluginOf(argv[1]),
                                   rdv::plugin::conformance::SettingsOf(argv[1]));
  if (!transport.ok()) return Fail(transport.status().ToString());
  auto memory = (*transport)->Allocate(length);
  if (!memory.ok()) return Fail(memory.status().ToString());
  // The pattern repeats every 256 bytes: doubling copies fill it fast,
  // under the sanitizers too.
  auto* bytes = static_cast<unsigned char*>((*memory)->address());
  for (size_t i = 0; i < std::min<size_t>(length, 256); ++i) {
    bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  }
  for (size_t filled = 256; filled < length; filled *= 2) {
    std::memcpy(bytes + filled, bytes, std::min(filled, length - filled));
  }
  std::unique_ptr<TransportEndpoint> endpoint;  // open until the exit
  const int started =
      mode == "serve" ? Serve(**transport, **memory) : Send(**transport, **memory, endpoint);
  if (started != 0) return started;
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  _exit(0);
}
