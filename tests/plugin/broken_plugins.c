/* Deliberately broken plugins, built only to prove that the loader refuses
 * them with a clear message: one reports another ABI version, one exports
 * no entry point. */
#include "plugin/rdv_transport.h"

#ifdef RDV_BROKEN_WRONG_ABI
static const rdv_transport_v2_t kWrongAbi = {.abi_version = 99,
                                             .struct_size = sizeof(rdv_transport_v2_t),
                                             .name = "wrongabi"};
__attribute__((visibility("default"))) const rdv_transport_v2_t* rdv_transport_v2(void) {
  return &kWrongAbi;
}
#else
__attribute__((visibility("default"))) int rdv_transport_v0(void) { return 0; }
#endif
