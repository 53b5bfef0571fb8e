/* Deliberately broken plugins, built only to prove that the loader refuses
 * them with a clear message: one reports another ABI version, one exports
 * no entry point, one a v3 table shorter than v3 ever was. And one whose v3
 * table ends before the functions appended to v3 (as a plugin built before
 * them), which the loader takes: its init then refuses, so that the test
 * sees how far loading went. */
#include <stdio.h>

#include "plugin/rdv_transport.h"

#if defined(RDV_BROKEN_SHORT_V3) || defined(RDV_BROKEN_BASE_V3)
static int RefuseInit(const rdv_transport_init_params_t* params,
                      rdv_transport_context_t* context, rdv_transport_error_t* error) {
  (void)params;
  (void)context;
  snprintf(error->message, sizeof(error->message), "init reached");
  return RDV_TRANSPORT_UNIMPLEMENTED;
}
#ifdef RDV_BROKEN_SHORT_V3
#define TABLE_SIZE (RDV_TRANSPORT_V3_BASE_SIZE - sizeof(void*))
#else
#define TABLE_SIZE RDV_TRANSPORT_V3_BASE_SIZE
#endif
static const rdv_transport_v3_t kTable = {
    .abi_version = 3, .struct_size = TABLE_SIZE, .name = "basev3", .init = RefuseInit};
__attribute__((visibility("default"))) const rdv_transport_v3_t* rdv_transport_v3(void) {
  return &kTable;
}
#elif defined(RDV_BROKEN_WRONG_ABI)
static const rdv_transport_v2_t kWrongAbi = {.abi_version = 99,
                                             .struct_size = sizeof(rdv_transport_v2_t),
                                             .name = "wrongabi"};
__attribute__((visibility("default"))) const rdv_transport_v2_t* rdv_transport_v2(void) {
  return &kWrongAbi;
}
#else
__attribute__((visibility("default"))) int rdv_transport_v0(void) { return 0; }
#endif
