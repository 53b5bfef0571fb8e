/* The types every version of rdv's transport plugin ABI shares: status
 * codes, callbacks, handles, and the params and attribute structs, which
 * grow only by new fields under new field-mask bits. Plain C.
 *
 * Extensibility: every params/attributes struct starts with a field mask;
 * a plugin reads only the fields whose bits are set and sets only the output
 * fields whose bits the caller asked for.
 *
 * Ownership: the caller owns every buffer it passes in; the plugin owns the
 * opaque handles it returns until the matching close/free call. Outputs are
 * written only on success. Errors return a non-zero code (absl::StatusCode
 * numbering) and, when `error` is non-null, a message in it.
 */
#ifndef RDV_PLUGIN_RDV_TRANSPORT_TYPES_H_
#define RDV_PLUGIN_RDV_TRANSPORT_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the same numbers as absl::StatusCode. */
enum {
  RDV_TRANSPORT_OK = 0,
  RDV_TRANSPORT_CANCELLED = 1,
  RDV_TRANSPORT_INVALID_ARGUMENT = 3,
  RDV_TRANSPORT_NOT_FOUND = 5,
  RDV_TRANSPORT_RESOURCE_EXHAUSTED = 8,
  RDV_TRANSPORT_FAILED_PRECONDITION = 9,
  RDV_TRANSPORT_ABORTED = 10,
  RDV_TRANSPORT_UNIMPLEMENTED = 12,
  RDV_TRANSPORT_INTERNAL = 13,
  RDV_TRANSPORT_UNAVAILABLE = 14,
};

typedef struct rdv_transport_error {
  char message[512];
} rdv_transport_error_t;

/* Log levels: 0 error, 1 warning, 2 info, 3 debug, 4 trace. */
typedef void (*rdv_transport_log_fn)(void* user, int level, const char* message);

/* `code` 0 on success; `message` null on success, else valid only during
 * the call. */
typedef void (*rdv_transport_completion_fn)(void* user, int code, const char* message);

typedef struct rdv_transport_context* rdv_transport_context_t;
typedef struct rdv_transport_endpoint* rdv_transport_endpoint_t;
typedef struct rdv_transport_memory* rdv_transport_memory_t;

/* A setting a plugin takes, as it lists them (ABI v3's `settings`). The
 * host fills a setting its caller did not give from `environment`, so the
 * plugin itself reads no environment variable. */
typedef struct rdv_transport_setting_info {
  const char* name;          /* "progress" */
  const char* environment;   /* "RDV_UCX_PROGRESS"; NULL when none */
  const char* default_value; /* as text; "" when the plugin derives it */
  const char* description;   /* one line: the values and what they do */
} rdv_transport_setting_info_t;

/* A message arrived (ABI v3): runs on the progress thread, must not block,
 * may post operations. `message` is valid during the call only. It does not
 * name its sender: a message that needs to carries it. */
typedef void (*rdv_transport_message_fn)(void* user, const void* message, size_t length);

/* One setting's value, by the name the plugin lists. */
typedef struct rdv_transport_setting {
  const char* name;
  const char* value;
} rdv_transport_setting_t;

enum {
  RDV_TRANSPORT_INIT_FIELD_LOG = 1u << 0,       /* log, log_user */
  RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL = 1u << 1, /* log_level */
  RDV_TRANSPORT_INIT_FIELD_SETTINGS = 1u << 2,  /* settings, num_settings (ABI v3) */
  RDV_TRANSPORT_INIT_FIELD_MESSAGES = 1u << 3,  /* on_message, on_message_user (ABI v3) */
};

typedef struct rdv_transport_init_params {
  uint64_t field_mask;
  rdv_transport_log_fn log;
  void* log_user; /* handed back to `log`; must outlive the context */
  int log_level;  /* the most verbose level worth calling `log` for */
  /* Values for settings the plugin lists, valid during init only. A name it
   * does not list, or a value it cannot take, fails init with
   * INVALID_ARGUMENT naming the setting. Settings not given take their
   * defaults. */
  const rdv_transport_setting_t* settings;
  size_t num_settings;
  /* Where messages posted to this context by peers arrive (ABI v3). Without
   * it, a plugin drops them. */
  rdv_transport_message_fn on_message;
  void* on_message_user; /* handed back to `on_message`; must outlive the context */
} rdv_transport_init_params_t;

enum {
  RDV_TRANSPORT_MEMORY_HOST = 1u << 0,
  RDV_TRANSPORT_MEMORY_CUDA = 1u << 1,
};

enum {
  RDV_TRANSPORT_OP_GET = 1u << 0, /* the consumer reads the producer's buffer */
  RDV_TRANSPORT_OP_PUT = 1u << 1, /* the producer writes the consumer's buffer */
  RDV_TRANSPORT_OP_TAG = 1u << 2, /* the producer sends, the consumer receives by tag */
  RDV_TRANSPORT_OP_MESSAGE = 1u << 3, /* small messages to a context's on_message (ABI v3) */
};

enum {
  RDV_TRANSPORT_ATTR_FIELD_NAME = 1u << 0,
  RDV_TRANSPORT_ATTR_FIELD_MEMORY_TYPES = 1u << 1,
  RDV_TRANSPORT_ATTR_FIELD_GPUDIRECT = 1u << 2,
  RDV_TRANSPORT_ATTR_FIELD_OPS = 1u << 3,
  RDV_TRANSPORT_ATTR_FIELD_DESCRIPTION = 1u << 4,
  RDV_TRANSPORT_ATTR_FIELD_MAX_MESSAGE = 1u << 5,
  RDV_TRANSPORT_ATTR_FIELD_MESSAGES_FOLLOW_PUTS = 1u << 6,
  RDV_TRANSPORT_ATTR_FIELD_PEER_COPY_FROM = 1u << 7,
};

typedef struct rdv_transport_attributes {
  uint64_t field_mask;      /* which fields the caller wants */
  const char* name;         /* "ucx"; static storage */
  uint32_t memory_types;    /* RDV_TRANSPORT_MEMORY_* it can reach */
  int gpudirect;            /* non-zero: CUDA memory moves without staging */
  uint32_t ops;             /* RDV_TRANSPORT_OP_* supported */
  uint32_t preferred_op;    /* the faster one on this configuration */
  char description[256];    /* e.g. the transports UCX chose */
  size_t max_message_bytes; /* the longest message post_message takes; 0: none */
  /* Non-zero: a message posted on an endpoint after a put on that endpoint
   * reaches the peer's on_message only once the put's bytes are in the
   * peer's memory, and never when the put failed there (verbs: SEND after
   * RDMA WRITE on one reliable-connected QP). The writer may then post
   * both at once instead of waiting for the put to complete. */
  int messages_follow_puts;
  /* Appended (v3): mem_alloc gives memory read by a peer's copy (mem_query's
   * read_by_peer_copy) to allocations of at least this many bytes, while
   * it has such memory left; 0: to none. A host asks before allocating
   * memory it means to offer to be read, so that it spares the allocation
   * where none would be. */
  size_t peer_copy_from_bytes;
} rdv_transport_attributes_t;

enum {
  RDV_TRANSPORT_MEMORY_ATTR_FIELD_READ_BY_PEER_COPY = 1u << 0,
};

/* What a memory handle is to peers (ABI v3's mem_query). */
typedef struct rdv_transport_memory_attributes {
  uint64_t field_mask; /* which fields the caller wants */
  /* Non-zero: every peer of this context reads this memory (post_get) by a
   * copy it makes itself, through a mapping of its own, with no work of
   * this context's progress thread, and a reader's get succeeds or fails on
   * its own even when this process dies meanwhile (UCX: a `mapped`
   * System V segment where UCX_TLS names same-host transports only). A
   * producer may then offer such memory to be read rather than send it. */
  int read_by_peer_copy;
} rdv_transport_memory_attributes_t;

#ifdef __cplusplus
}
#endif

#endif /* RDV_PLUGIN_RDV_TRANSPORT_TYPES_H_ */
