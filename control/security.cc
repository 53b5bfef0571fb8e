#include "control/security.h"

#include <fstream>
#include <sstream>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/environment.h"

namespace rdv::control {
namespace {

std::string Variable(const char* name) {
  std::string value;
  env::ReadText(name, &value);
  return value;
}

absl::StatusOr<std::string> ReadSecret(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  if (!in || !(contents << in.rdbuf())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", Excerpt(path), "' cannot be read"));
  }
  return contents.str();
}

// Adds the token to the initial metadata of every call on a channel.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::string token) : token_(std::move(token)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kTokenMetadataKey, token_);
    }
    methods->Proceed();
  }

 private:
  const std::string token_;
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token) : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(token_);
  }

 private:
  const std::string token_;
};

// Compares in time that depends only on the lengths, so that a stranger
// cannot learn the token a byte at a time.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

bool IsLoopback(absl::string_view listen_address) {
  if (absl::StartsWith(listen_address, "unix:")) return true;
  absl::string_view host = listen_address.substr(0, listen_address.rfind(':'));
  return absl::StartsWith(host, "127.") || host == "localhost" || host == "[::1]";
}

}  // namespace

SecurityFiles SecurityFiles::FromEnvironment() {
  return {.token_file = Variable("RDV_CLUSTER_TOKEN_FILE"),
          .tls_cert = Variable("RDV_TLS_CERT"),
          .tls_key = Variable("RDV_TLS_KEY"),
          .tls_ca = Variable("RDV_TLS_CA")};
}

absl::StatusOr<SecurityOptions> SecurityOptions::Load(const SecurityFiles& files) {
  SecurityOptions options;
  options.allow_insecure = Variable("RDV_ALLOW_INSECURE") == "1";
  if (!files.token_file.empty()) {
    RDV_ASSIGN_OR_RETURN(std::string contents,
                         ReadSecret(files.token_file, "the cluster token file"));
    options.token = std::string(absl::StripAsciiWhitespace(contents.substr(0, contents.find('\n'))));
  } else {
    options.token = Variable("RDV_CLUSTER_TOKEN");
  }
  if (!options.token.empty() && options.token.size() < kMinTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cluster token has ", options.token.size(), " characters; use at least ",
                     kMinTokenBytes, " random ones (openssl rand -hex 32)"));
  }
  const int tls_files = !files.tls_cert.empty() + !files.tls_key.empty() + !files.tls_ca.empty();
  if (tls_files == 0) return options;
  if (tls_files != 3) {
    return absl::InvalidArgumentError(
        "TLS needs a certificate, its key and the cluster's CA together (RDV_TLS_CERT, "
        "RDV_TLS_KEY, RDV_TLS_CA or --tls_cert, --tls_key, --tls_ca)");
  }
  RDV_ASSIGN_OR_RETURN(options.tls_cert, ReadSecret(files.tls_cert, "the TLS certificate"));
  RDV_ASSIGN_OR_RETURN(options.tls_key, ReadSecret(files.tls_key, "the TLS key"));
  RDV_ASSIGN_OR_RETURN(options.tls_ca, ReadSecret(files.tls_ca, "the TLS CA certificate"));
  return options;
}

absl::StatusOr<SecurityOptions> SecurityOptions::FromEnvironment() {
  return Load(SecurityFiles::FromEnvironment());
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const SecurityOptions& security) {
  if (!security.tls()) return grpc::InsecureServerCredentials();
  // Requested, not required, at the handshake: a caller without a
  // certificate then gets UNAUTHENTICATED from AdmitCaller, which says
  // why, instead of a connection that fails without a word.
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.tls_ca;
  options.pem_key_cert_pairs.push_back({security.tls_key, security.tls_cert});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::Channel> CreateMemberChannel(const std::string& address,
                                                   const SecurityOptions& security,
                                                   const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security.tls()) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = security.tls_ca;
    options.pem_private_key = security.tls_key;
    options.pem_cert_chain = security.tls_cert;
    credentials = grpc::SslCredentials(options);
  }
  if (security.token.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<TokenInterceptorFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                std::move(interceptors));
}

absl::Status AdmitCaller(const grpc::ServerContextBase& context, const SecurityOptions& security) {
  if (security.tls()) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      return absl::UnauthenticatedError(
          "this worker admits only members of its cluster: connect with TLS and a client "
          "certificate signed by the cluster's CA (RDV_TLS_CERT, RDV_TLS_KEY, RDV_TLS_CA)");
    }
  }
  if (security.token.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto sent = metadata.find(kTokenMetadataKey);
  if (sent == metadata.end()) {
    return absl::UnauthenticatedError(
        "this worker admits only members of its cluster: the call carried no cluster token "
        "(RDV_CLUSTER_TOKEN_FILE or RDV_CLUSTER_TOKEN)");
  }
  if (!SameSecret(absl::string_view(sent->second.data(), sent->second.size()), security.token)) {
    return absl::UnauthenticatedError(
        "this worker admits only members of its cluster: the call's cluster token is wrong");
  }
  return absl::OkStatus();
}

absl::Status CheckExposure(absl::string_view listen_address, const SecurityOptions& security,
                           absl::string_view who) {
  if (IsLoopback(listen_address) || (security.tls() && !security.token.empty()) ||
      security.allow_insecure) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      who, " would listen on ", listen_address,
      ", reachable from other hosts, without mutual TLS and a cluster token: anyone who "
      "reaches it could read and inject tensors. Give it RDV_TLS_CERT, RDV_TLS_KEY, RDV_TLS_CA "
      "and RDV_CLUSTER_TOKEN_FILE (docs/security.md; scripts/make-test-ca makes a test CA), "
      "listen on 127.0.0.1, or set RDV_ALLOW_INSECURE=1 (--allow_insecure) on a network you "
      "trust"));
}

}  // namespace rdv::control
