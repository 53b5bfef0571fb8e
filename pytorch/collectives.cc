// The collectives rdv does not implement: each raises, naming the operation
// and the backend that has it.
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "pytorch/process_group.h"

namespace rdv::pytorch {

void ProcessGroupRdv::Unsupported(const char* operation) const {
  throw std::runtime_error(absl::StrCat(
      "rdv: UNIMPLEMENTED: ", operation,
      ": the rdv backend moves point-to-point tensors only (send, recv, isend, irecv, barrier); "
      "run collectives on a gloo group, e.g. dist.new_group(backend=\"gloo\")"));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::broadcast(std::vector<at::Tensor>&,
                                                          const c10d::BroadcastOptions&) {
  Unsupported("broadcast");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::allreduce(std::vector<at::Tensor>&,
                                                          const c10d::AllreduceOptions&) {
  Unsupported("all_reduce");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::allreduce_coalesced(
    std::vector<at::Tensor>&, const c10d::AllreduceCoalescedOptions&) {
  Unsupported("all_reduce_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::reduce(std::vector<at::Tensor>&,
                                                       const c10d::ReduceOptions&) {
  Unsupported("reduce");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::allgather(std::vector<std::vector<at::Tensor>>&,
                                                          std::vector<at::Tensor>&,
                                                          const c10d::AllgatherOptions&) {
  Unsupported("all_gather");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::_allgather_base(at::Tensor&, at::Tensor&,
                                                                const c10d::AllgatherOptions&) {
  Unsupported("all_gather_into_tensor");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
    const c10d::AllgatherOptions&) {
  Unsupported("all_gather_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::gather(std::vector<std::vector<at::Tensor>>&,
                                                       std::vector<at::Tensor>&,
                                                       const c10d::GatherOptions&) {
  Unsupported("gather");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::scatter(std::vector<at::Tensor>&,
                                                        std::vector<std::vector<at::Tensor>>&,
                                                        const c10d::ScatterOptions&) {
  Unsupported("scatter");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::reduce_scatter(
    std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
    const c10d::ReduceScatterOptions&) {
  Unsupported("reduce_scatter");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::_reduce_scatter_base(
    at::Tensor&, at::Tensor&, const c10d::ReduceScatterOptions&) {
  Unsupported("reduce_scatter_tensor");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::alltoall_base(at::Tensor&, at::Tensor&,
                                                              std::vector<int64_t>&,
                                                              std::vector<int64_t>&,
                                                              const c10d::AllToAllOptions&) {
  Unsupported("all_to_all_single");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::alltoall(std::vector<at::Tensor>&,
                                                         std::vector<at::Tensor>&,
                                                         const c10d::AllToAllOptions&) {
  Unsupported("all_to_all");
}

}  // namespace rdv::pytorch
