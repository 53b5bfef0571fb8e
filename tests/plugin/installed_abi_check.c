/* Compiled against the installed headers only (rdv_installed_abi_headers):
 * a plugin author's view of the ABI, in plain C. */
#include <rdv/rdv_transport.h>

const rdv_transport_v3_t* rdv_transport_v3(void) { return 0; }
int main(void) { return RDV_TRANSPORT_ABI_VERSION == 3 && rdv_transport_v3() == 0 ? 0 : 1; }
