// Who may call a worker (docs/security.md): the members of its cluster,
// proven by mutual TLS (a certificate signed by the cluster's CA) and by
// the cluster token, which every call carries in its metadata
// (kTokenMetadataKey). A stranger gets UNAUTHENTICATED from every RPC.
// Both are optional on loopback; a worker reachable from the network
// refuses to start without them unless told that insecure is intended.
// These are the settings; control/security.h applies them to gRPC.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace rdv::control {

inline constexpr char kTokenMetadataKey[] = "rdv-cluster-token";
// A token shorter than this is refused: it would be guessable.
inline constexpr size_t kMinTokenBytes = 16;

// Where the secrets come from: files, each named by a variable (or a flag
// of rdv-worker, which wins), and the token itself in RDV_CLUSTER_TOKEN.
struct SecurityFiles {
  std::string token_file;  // RDV_CLUSTER_TOKEN_FILE: its first line is the token
  std::string tls_cert;    // RDV_TLS_CERT: this member's certificate (PEM)
  std::string tls_key;     // RDV_TLS_KEY: its private key (PEM)
  std::string tls_ca;      // RDV_TLS_CA: the cluster's CA certificate (PEM)

  static SecurityFiles FromEnvironment();
};

struct SecurityOptions {
  std::string token;     // empty: no token is sent or asked for
  std::string tls_cert;  // PEM contents; all three or none
  std::string tls_key;
  std::string tls_ca;
  // RDV_ALLOW_INSECURE=1 (or rdv-worker --allow_insecure): listen on a
  // non-loopback address without TLS and a token.
  bool allow_insecure = false;

  bool tls() const { return !tls_cert.empty(); }

  // Reads the files; RDV_CLUSTER_TOKEN applies when no token file is named.
  // INVALID_ARGUMENT naming the variable for a file that cannot be read, a
  // short token, or TLS files that do not come as all three.
  static absl::StatusOr<SecurityOptions> Load(const SecurityFiles& files);
  static absl::StatusOr<SecurityOptions> FromEnvironment();
};

}  // namespace rdv::control
