// RDV_IB_* (docs/configuration.md).
#include "verbs/verbs_context.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "plugin/plugin_support.h"

namespace rdv::verbs {

using plugin_support::SetError;

namespace {

int ReadIntSetting(const char* name, long low, long high, long* value,
                   rdv_transport_error_t* error) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return RDV_TRANSPORT_OK;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < low || parsed > high) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "%s='%s': expected an integer in [%ld, %ld]", name, text, low, high);
  }
  *value = parsed;
  return RDV_TRANSPORT_OK;
}

}  // namespace

int ReadSettings(Settings* settings, rdv_transport_error_t* error) {
  if (const char* device = std::getenv("RDV_IB_DEVICE")) settings->device = device;
  long port = settings->port, gid = settings->gid_index, timeout = settings->qp_timeout,
       retry = settings->retry_count, depth = settings->queue_depth,
       chunk = static_cast<long>(settings->chunk_bytes);
  int code = RDV_TRANSPORT_OK;
  if ((code = ReadIntSetting("RDV_IB_PORT", 1, 255, &port, error)) ||
      (code = ReadIntSetting("RDV_IB_GID_INDEX", 0, 1 << 16, &gid, error)) ||
      (code = ReadIntSetting("RDV_IB_QP_TIMEOUT", 1, 31, &timeout, error)) ||
      (code = ReadIntSetting("RDV_IB_RETRY_COUNT", 0, 7, &retry, error)) ||
      (code = ReadIntSetting("RDV_IB_QUEUE_DEPTH", 1, 16384, &depth, error)) ||
      (code = ReadIntSetting("RDV_IB_CHUNK_BYTES", 4096, 1l << 30, &chunk, error))) {
    return code;
  }
  // "event" is the spelling before RDV_UCX_PROGRESS's "wait" was shared.
  const char* progress = std::getenv("RDV_IB_PROGRESS");
  if (progress != nullptr && *progress != '\0' && std::strcmp(progress, "poll") != 0 &&
      std::strcmp(progress, "wait") != 0 && std::strcmp(progress, "event") != 0) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "RDV_IB_PROGRESS='%s': expected 'wait' (default) or 'poll'", progress);
  }
  settings->busy_poll = progress != nullptr && std::strcmp(progress, "poll") == 0;
  settings->port = static_cast<int>(port);
  settings->gid_index = static_cast<int>(gid);
  settings->qp_timeout = static_cast<int>(timeout);
  settings->retry_count = static_cast<int>(retry);
  settings->queue_depth = static_cast<int>(depth);
  settings->chunk_bytes = static_cast<size_t>(chunk);
  return RDV_TRANSPORT_OK;
}

}  // namespace rdv::verbs
