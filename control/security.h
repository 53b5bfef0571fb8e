// The door of control/security_options.h on gRPC: the credentials a worker
// listens and dials with, and the check every RPC passes first.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>

#include "control/security_options.h"
#include "core/status.h"

namespace rdv::control {

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
