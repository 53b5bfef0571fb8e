/* rdv's transport plugin ABI, version 3: version 2's table (whose comments
 * in rdv_transport_v2.h hold for every function here) and
 *  - `settings`, the plugin's list of what it can be configured with: the
 *    host passes every setting through init's params, and the plugin reads
 *    no environment variable of rdv's;
 *  - post_message, small messages that arrive at the peer context's
 *    on_message (init's MESSAGES field): the control traffic of a transfer
 *    (a request, a notice that bytes landed) without the control plane;
 *  - mem_query (appended later; see the table's end), what a memory handle
 *    is to its peers.
 *
 * Growth: functions are appended at the table's end only. A host reads one
 * only when the plugin's struct_size covers it, and takes a table as short
 * as RDV_TRANSPORT_V3_BASE_SIZE (everything up to post_message).
 *
 * A v3 plugin exports
 *     const rdv_transport_v3_t* rdv_transport_v3(void);
 */
#ifndef RDV_PLUGIN_RDV_TRANSPORT_V3_H_
#define RDV_PLUGIN_RDV_TRANSPORT_V3_H_

#include "rdv_transport_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RDV_TRANSPORT_ENTRY_V3 "rdv_transport_v3"

typedef struct rdv_transport_v3_ops {
  uint32_t abi_version; /* 3 */
  uint32_t struct_size; /* sizeof(rdv_transport_v3_t) as the plugin saw it */
  const char* name;

  int (*init)(const rdv_transport_init_params_t* params, rdv_transport_context_t* context,
              rdv_transport_error_t* error);
  void (*finalize)(rdv_transport_context_t context);
  int (*query)(rdv_transport_context_t context, rdv_transport_attributes_t* attributes,
               rdv_transport_error_t* error);
  int (*local_address)(rdv_transport_context_t context, void* buffer, size_t* length,
                       rdv_transport_error_t* error);
  int (*connect)(rdv_transport_context_t context, const void* peer_address, size_t length,
                 rdv_transport_endpoint_t* endpoint, rdv_transport_error_t* error);
  void (*disconnect)(rdv_transport_endpoint_t endpoint);
  int (*mem_alloc)(rdv_transport_context_t context, size_t length, rdv_transport_memory_t* memory,
                   void** address, rdv_transport_error_t* error);
  int (*mem_register)(rdv_transport_context_t context, void* address, size_t length,
                      uint32_t memory_type, int device, rdv_transport_memory_t* memory,
                      rdv_transport_error_t* error);
  void (*mem_release)(rdv_transport_memory_t memory);
  int (*mem_pack)(rdv_transport_memory_t memory, void* buffer, size_t* length,
                  rdv_transport_error_t* error);
  int (*post_get)(rdv_transport_endpoint_t endpoint, void* local,
                  rdv_transport_memory_t local_memory, uint64_t remote_address,
                  const void* remote_key, size_t remote_key_length, size_t length,
                  rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
  int (*post_put)(rdv_transport_endpoint_t endpoint, const void* local,
                  rdv_transport_memory_t local_memory, uint64_t remote_address,
                  const void* remote_key, size_t remote_key_length, size_t length,
                  rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
  int (*post_send)(rdv_transport_endpoint_t endpoint, const void* local,
                   rdv_transport_memory_t local_memory, size_t length, uint64_t tag,
                   rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
  int (*post_recv)(rdv_transport_context_t context, void* local,
                   rdv_transport_memory_t local_memory, size_t length, uint64_t tag,
                   rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
  void (*abort)(rdv_transport_endpoint_t endpoint);
  int (*cancel_recv)(rdv_transport_context_t context, uint64_t tag, rdv_transport_error_t* error);

  /* The settings init takes: a static table of `*count` entries, valid as
   * long as the library is loaded. Callable before init, from any thread. */
  const rdv_transport_setting_info_t* (*settings)(size_t* count);

  /* Sends `length` bytes (at most the attributes' max_message_bytes) to the
   * peer's on_message. The bytes are copied before it returns; `done` runs
   * once on the progress thread when they have left, or failed. Messages
   * may arrive in another order than posted: one that must follow another
   * says so itself. UNIMPLEMENTED where the plugin does not offer
   * RDV_TRANSPORT_OP_MESSAGE. */
  int (*post_message)(rdv_transport_endpoint_t endpoint, const void* message, size_t length,
                      rdv_transport_completion_fn done, void* user,
                      rdv_transport_error_t* error);

  /* Appended: what `memory` (from mem_alloc or mem_register) is to peers,
   * for the fields `attributes->field_mask` asks; only those are set, and
   * only on success. Any thread; does not block. May be NULL: then no
   * memory is read by a peer's copy. */
  int (*mem_query)(rdv_transport_memory_t memory, rdv_transport_memory_attributes_t* attributes,
                   rdv_transport_error_t* error);
} rdv_transport_v3_t;

/* The size of a v3 table before anything was appended to it. */
#define RDV_TRANSPORT_V3_BASE_SIZE \
  (offsetof(rdv_transport_v3_t, post_message) + sizeof(void (*)(void)))

typedef const rdv_transport_v3_t* (*rdv_transport_entry_v3_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* RDV_PLUGIN_RDV_TRANSPORT_V3_H_ */
