/* rdv's transport plugin ABI, version 2: frozen. It never changes; a new
 * capability is a new version (rdv_transport_v3.h), and rdv's loader still
 * takes a plugin that exports only this one.
 *
 * A v2 plugin exports
 *     const rdv_transport_v2_t* rdv_transport_v2(void);
 *
 * Threads: every function is thread-safe. Only init, finalize, connect and
 * the memory calls may block (briefly); post_get/post_put never block.
 * Completion callbacks run on the plugin's progress thread, exactly once per
 * posted operation, and must not block; they may post further operations.
 *
 * Version 2 added abort and cancel_recv to version 1: a posted operation
 * can always be ended, also when its peer died where the transport cannot
 * notice it.
 */
#ifndef RDV_PLUGIN_RDV_TRANSPORT_V2_H_
#define RDV_PLUGIN_RDV_TRANSPORT_V2_H_

#include "rdv_transport_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RDV_TRANSPORT_ENTRY_V2 "rdv_transport_v2"

typedef struct rdv_transport_v2_ops {
  uint32_t abi_version; /* 2 */
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

#endif /* RDV_PLUGIN_RDV_TRANSPORT_V2_H_ */
