// Who may call a worker (docs/security.md): the members of its cluster,
// proven by mutual TLS (a certificate signed by the cluster's CA) and by
// the cluster token, which every call carries in its metadata
// (kTokenMetadataKey). A stranger gets UNAUTHENTICATED from every RPC.
// Both are optional on loopback; a worker reachable from the network
// refuses to start without them unless told that insecure is intended.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>

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

// What a worker (or launcher) listens with: TLS that asks every client for
// a certificate signed by the CA, or plaintext.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const SecurityOptions& security);

// A channel to a member: TLS with this member's certificate when
// configured, and the token in every call's metadata when there is one.
std::shared_ptr<grpc::Channel> CreateMemberChannel(const std::string& address,
                                                   const SecurityOptions& security,
                                                   const grpc::ChannelArguments& args);

// OK when the caller proved membership: a verified client certificate
// (with TLS) and the token (when there is one). UNAUTHENTICATED otherwise,
// saying what was missing, never echoing what was sent.
absl::Status AdmitCaller(const grpc::ServerContextBase& context, const SecurityOptions& security);

// FAILED_PRECONDITION when `listen_address` is reachable from other hosts
// (not loopback) and the door is not shut (no TLS or no token), unless
// allow_insecure; `who` names the server in the message.
absl::Status CheckExposure(absl::string_view listen_address, const SecurityOptions& security,
                           absl::string_view who);

}  // namespace rdv::control
