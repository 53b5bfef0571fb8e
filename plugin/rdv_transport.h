/* rdv's data-plane transport plugin ABI, version 2. Plain C: no C++ types,
 * no gRPC, no protobuf cross this boundary.
 *
 * A plugin is a shared library librdv_transport_<name>.so exporting one
 * symbol per ABI version it implements:
 *     const rdv_transport_v2_t* rdv_transport_v2(void);
 * Everything else in the library has hidden visibility.
 *
 * Extensibility: every params/attributes struct starts with a field mask;
 * a plugin reads only the fields whose bits are set and sets only the output
 * fields whose bits the caller asked for. New fields get new bits at the end.
 *
 * Ownership: the caller owns every buffer it passes in; the plugin owns the
 * opaque handles it returns until the matching close/free call. Outputs are
 * written only on success. Errors return a non-zero code (absl::StatusCode
 * numbering) and, when `error` is non-null, a message in it.
 *
 * Threads: every function is thread-safe. Only init, finalize, connect and
 * the memory calls may block (briefly); post_get/post_put never block.
 * Completion callbacks run on the plugin's progress thread, exactly once per
 * posted operation, and must not block; they may post further operations.
 */
#ifndef RDV_PLUGIN_RDV_TRANSPORT_H_
#define RDV_PLUGIN_RDV_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2 added abort and cancel_recv: a posted operation can always be
 * ended, also when its peer died where the transport cannot notice it. */
#define RDV_TRANSPORT_ABI_VERSION 2
#define RDV_TRANSPORT_ENTRY_V2 "rdv_transport_v2"

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

enum {
  RDV_TRANSPORT_INIT_FIELD_LOG = 1u << 0,       /* log, log_user */
  RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL = 1u << 1, /* log_level */
};

typedef struct rdv_transport_init_params {
  uint64_t field_mask;
  rdv_transport_log_fn log;
  void* log_user; /* handed back to `log`; must outlive the context */
  int log_level;  /* the most verbose level worth calling `log` for */
} rdv_transport_init_params_t;

enum {
  RDV_TRANSPORT_MEMORY_HOST = 1u << 0,
  RDV_TRANSPORT_MEMORY_CUDA = 1u << 1,
};

enum {
  RDV_TRANSPORT_OP_GET = 1u << 0, /* the consumer reads the producer's buffer */
  RDV_TRANSPORT_OP_PUT = 1u << 1, /* the producer writes the consumer's buffer */
  RDV_TRANSPORT_OP_TAG = 1u << 2, /* the producer sends, the consumer receives by tag */
};

enum {
  RDV_TRANSPORT_ATTR_FIELD_NAME = 1u << 0,
  RDV_TRANSPORT_ATTR_FIELD_MEMORY_TYPES = 1u << 1,
  RDV_TRANSPORT_ATTR_FIELD_GPUDIRECT = 1u << 2,
  RDV_TRANSPORT_ATTR_FIELD_OPS = 1u << 3,
  RDV_TRANSPORT_ATTR_FIELD_DESCRIPTION = 1u << 4,
};

typedef struct rdv_transport_attributes {
  uint64_t field_mask;      /* which fields the caller wants */
  const char* name;         /* "ucx"; static storage */
  uint32_t memory_types;    /* RDV_TRANSPORT_MEMORY_* it can reach */
  int gpudirect;            /* non-zero: CUDA memory moves without staging */
  uint32_t ops;             /* RDV_TRANSPORT_OP_* supported */
  uint32_t preferred_op;    /* the faster one on this configuration */
  char description[256];    /* e.g. the transports UCX chose */
} rdv_transport_attributes_t;

typedef struct rdv_transport_v2_ops {
  uint32_t abi_version; /* RDV_TRANSPORT_ABI_VERSION */
  uint32_t struct_size; /* sizeof(rdv_transport_v2_t) as the plugin saw it */
  const char* name;

  int (*init)(const rdv_transport_init_params_t* params, rdv_transport_context_t* context,
              rdv_transport_error_t* error);
  /* Every endpoint and memory handle must be released first. Blocks until
   * the progress thread has stopped; no callback runs afterwards. */
  void (*finalize)(rdv_transport_context_t context);
  int (*query)(rdv_transport_context_t context, rdv_transport_attributes_t* attributes,
               rdv_transport_error_t* error);

  /* This context's address for peers: copied into `buffer`, `*length` in
   * (capacity) and out (size). RESOURCE_EXHAUSTED with the needed size when
   * the buffer is too small. */
  int (*local_address)(rdv_transport_context_t context, void* buffer, size_t* length,
                       rdv_transport_error_t* error);
  /* An endpoint to the peer whose address blob is given. Operations on it
   * fail with UNAVAILABLE once the peer is lost; then make a new one. */
  int (*connect)(rdv_transport_context_t context, const void* peer_address, size_t length,
                 rdv_transport_endpoint_t* endpoint, rdv_transport_error_t* error);
  /* Returns at once; the endpoint handle is invalid afterwards. Operations
   * still in flight either finish (a graceful close flushes them) or fail
   * with CANCELLED; each callback still runs exactly once. May be called
   * from a completion callback. */
  void (*disconnect)(rdv_transport_endpoint_t endpoint);

  /* Memory the transport allocates itself (the fastest kind to move). */
  int (*mem_alloc)(rdv_transport_context_t context, size_t length, rdv_transport_memory_t* memory,
                   void** address, rdv_transport_error_t* error);
  /* Registers memory the caller owns. `memory_type` one of
   * RDV_TRANSPORT_MEMORY_*; `device` the CUDA ordinal for CUDA memory. */
  int (*mem_register)(rdv_transport_context_t context, void* address, size_t length,
                      uint32_t memory_type, int device, rdv_transport_memory_t* memory,
                      rdv_transport_error_t* error);
  /* Deregisters, or frees what mem_alloc allocated. */
  void (*mem_release)(rdv_transport_memory_t memory);
  /* A remote key that lets a peer reach this memory: copied into `buffer`,
   * `*length` in/out as for local_address. */
  int (*mem_pack)(rdv_transport_memory_t memory, void* buffer, size_t* length,
                  rdv_transport_error_t* error);

  /* Reads `length` bytes at `remote_address` of the peer (reachable with
   * `remote_key`) into `local` (inside `local_memory`). Returns at once;
   * `done` runs once on the progress thread. A non-zero return means the
   * operation was not posted and `done` will not run. */
  int (*post_get)(rdv_transport_endpoint_t endpoint, void* local,
                  rdv_transport_memory_t local_memory, uint64_t remote_address,
                  const void* remote_key, size_t remote_key_length, size_t length,
                  rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
  /* Writes `local` to the peer's `remote_address`; as post_get. */
  int (*post_put)(rdv_transport_endpoint_t endpoint, const void* local,
                  rdv_transport_memory_t local_memory, uint64_t remote_address,
                  const void* remote_key, size_t remote_key_length, size_t length,
                  rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);

  /* Tagged messages, where one-sided operations are emulated (UCX over
   * tcp): post_send sends `length` bytes to the peer under `tag`; the
   * peer's post_recv with the same tag receives them. Either may come
   * first. `local_memory` may be null (unregistered memory). */
  int (*post_send)(rdv_transport_endpoint_t endpoint, const void* local,
                   rdv_transport_memory_t local_memory, size_t length, uint64_t tag,
                   rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
  int (*post_recv)(rdv_transport_context_t context, void* local,
                   rdv_transport_memory_t local_memory, size_t length, uint64_t tag,
                   rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);

  /* Ends every operation in flight on the endpoint without waiting for the
   * peer: each callback runs exactly once, on the progress thread, with
   * CANCELLED (or its own result if it just finished); operations posted
   * afterwards fail with UNAVAILABLE. Returns at once. For a peer rdv learned is
   * lost (the control plane's liveness), over transports that cannot notice
   * it themselves (UCX's shared memory) and would wait for it forever. Not
   * for a live peer: the peer's side of a forced close may break. The
   * handle stays valid until disconnect. May be called from a callback. */
  void (*abort)(rdv_transport_endpoint_t endpoint);
  /* Cancels the tagged receive posted under `tag` that no send has matched
   * yet: its callback runs on the progress thread with CANCELLED (or its
   * own result, if a send matched it meanwhile). Returns at once.
   * NOT_FOUND when none waits (it completed, or its bytes are arriving: it
   * then ends by itself, with an error if the sender is lost). */
  int (*cancel_recv)(rdv_transport_context_t context, uint64_t tag, rdv_transport_error_t* error);
} rdv_transport_v2_t;

typedef const rdv_transport_v2_t* (*rdv_transport_entry_v2_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* RDV_PLUGIN_RDV_TRANSPORT_H_ */
