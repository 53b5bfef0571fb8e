// Cuts a graph into one graph per device (or per worker), as TensorFlow's
// graph_partition.cc does. Every edge between partitions becomes a _Send in
// the source's partition and a _Recv in the destination's, sharing the
// rendezvous key the two ops build from their attrs:
//   tensor_name "edge_<edge id>_<source node>", send_device,
//   send_device_incarnation, recv_device, client_terminated = false,
//   and on the _Recv tensor_type; the devices spelled as the nodes were
//   assigned them. Partitions are named by canonical device (or worker).
// Edge ids count every input (data and control) in node order, then input
// order. One output is received once per destination partition and memory
// space however many consumers it has there. A control edge crosses as a
// Const "<source>/ctrl" (float, shape {0}) with a control input from the
// source, sent to a _Recv that feeds an Identity (T = float), which becomes
// the control input of the destination. An int32 tensor on a GPU device lives in host
// memory and crosses as _HostSend / _HostRecv.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/device_name.h"
#include "graph/graph.h"

namespace rdv::graph {

struct PartitionOptions {
  enum class By { kDevice, kWorker };
  By by = By::kDevice;
  // The incarnation of the worker a device belongs to, which
  // send_device_incarnation carries into the key. Unset: 1 for every device
  // (one process, IntraProcessRendezvous).
  std::function<uint64_t(const DeviceName&)> incarnation;
};

// Partition key (a full device name, or a worker name) to its graph.
absl::StatusOr<std::map<std::string, GraphDef>> Partition(const Graph& graph,
                                                          const PartitionOptions& options);

// The rendezvous key a _Send or _Recv node builds from its attrs, outside
// any loop (frame and iteration 0:0).
absl::StatusOr<std::string> SendRecvKey(const NodeDef& node);

}  // namespace rdv::graph
