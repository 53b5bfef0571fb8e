/* rdv's data-plane transport plugin ABI. Plain C: no C++ types, no gRPC, no
 * protobuf cross this boundary.
 *
 * A plugin is a shared library librdv_transport_<name>.so exporting one
 * symbol per ABI version it implements, and nothing else (hidden
 * visibility for the rest). A new plugin implements the newest version,
 * RDV_TRANSPORT_ABI_VERSION. rdv's loader looks for the newest entry
 * first and falls back to older ones, so a plugin built against an older,
 * frozen version keeps loading:
 *   rdv_transport_v2.h  frozen: cancellation (abort, cancel_recv)
 *   rdv_transport_v3.h  settings listed by the plugin, passed in at init;
 *                       small messages (post_message, init's on_message)
 * rdv_transport_types.h holds what every version shares.
 */
#ifndef RDV_PLUGIN_RDV_TRANSPORT_H_
#define RDV_PLUGIN_RDV_TRANSPORT_H_

#include "rdv_transport_types.h"
#include "rdv_transport_v2.h"
#include "rdv_transport_v3.h"

#define RDV_TRANSPORT_ABI_VERSION 3
/* The oldest version rdv's loader still takes. */
#define RDV_TRANSPORT_OLDEST_ABI_VERSION 2

#endif /* RDV_PLUGIN_RDV_TRANSPORT_H_ */
