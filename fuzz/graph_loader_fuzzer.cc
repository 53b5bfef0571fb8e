// The graph loader on any bytes, read as a serialized GraphDef (what
// RegisterGraph receives) and as JSON (what rdv-run reads): a graph is
// validated and turned into an executor, or refused with a status.
#include <cstddef>
#include <cstdint>

#include <google/protobuf/stubs/logging.h>

#include "graph/executor.h"
#include "graph/graph.h"

// Protobuf reports every string field that is not UTF-8 on stderr; a peer
// may send such bytes, and the fuzzer would spend its time printing.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdv::graph::GraphDef def;
  if (def.ParseFromArray(data, static_cast<int>(size))) {
    (void)rdv::graph::Executor::Create(def).ok();
  }
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  (void)rdv::graph::Graph::FromJson(json).ok();
  return 0;
}
