// The UCX plugin's memory: the ABI's mem_alloc (anonymous memory, or with
// memory `mapped` a System V segment per large tensor), mem_register,
// mem_release, mem_pack (the sealed remote key, with the segment's id) and
// mem_query (whether peers read it by a copy of their own).
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"
#include "ucx/ucx_context.h"
#include "ucx/ucx_segment_sizes.h"

namespace rdv::ucx_plugin {

using plugin_support::CopyOut;
using plugin_support::Seal;
using plugin_support::SetError;

namespace {

int MapMemory(Context* context, ucp_mem_map_params_t* params, rdv_transport_memory_t* out,
              rdv_transport_error_t* error, const char* what) {
  auto* memory = new Memory;
  memory->context = context;
  const ucs_status_t status = ucp_mem_map(context->ucp, params, &memory->memh);
  if (status != UCS_OK) {
    delete memory;
    return SetError(error, CodeOf(status), "UCX %s of %zu bytes: %s (check `ulimit -l`)", what,
                    params->length, ucs_status_string(status));
  }
  *out = reinterpret_cast<rdv_transport_memory_t>(memory);
  return RDV_TRANSPORT_OK;
}

constexpr size_t kHugePageBytes = size_t{2} << 20;

// Memory `mapped`: a System V segment of this plugin's, registered, which
// a peer on the same host copies through (ucx_shared_memory.h).
int MapSegment(Context* context, size_t length, rdv_transport_memory_t* out, void** address,
               rdv_transport_error_t* error) {
  SharedSegment segment;
  if (const int code = AllocateSegment(length, &segment, error); code != RDV_TRANSPORT_OK) {
    return code;
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = segment.address;
  params.length = length;
  rdv_transport_memory_t memory = nullptr;
  const int code = MapMemory(context, &params, &memory, error, "registration");
  if (code != RDV_TRANSPORT_OK) {
    FreeSegment(segment);
    return code;
  }
  reinterpret_cast<Memory*>(memory)->segment = segment;
  *out = memory;
  *address = segment.address;
  return RDV_TRANSPORT_OK;
}

}  // namespace

// By default plain anonymous memory, registered, rather than UCX's own
// allocation: tagged sends from UCX's allocation moved at less than half
// the speed here (docs/plugins.md), and anonymous memory keeps every byte
// of the producer out of its consumers' address spaces. A get of anonymous
// memory travels as shared-memory active messages (kTunedDefaults).
int MemAlloc(rdv_transport_context_t handle, size_t length, rdv_transport_memory_t* out,
             void** address, rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  if (context->mapped_memory && length >= kMinSegmentBytes &&
      context->segments.fetch_add(1) < kMaxSegments) {
    const int code = MapSegment(context, length, out, address, error);
    if (code == RDV_TRANSPORT_OK) return code;
    context->segments.fetch_sub(1);
    if (!context->segments_short.exchange(true)) {
      context->log(1, std::string("memory mapped: a shared-memory segment was refused (") +
                          (error != nullptr ? error->message : "") +
                          "); such tensors take anonymous memory");
    }
  } else if (context->mapped_memory && length >= kMinSegmentBytes) {
    context->segments.fetch_sub(1);
  }
  void* mapped = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "mmap of %zu bytes: %s", length,
                    std::strerror(errno));
  }
  // Huge pages where the kernel gives them on request: fewer pages for the
  // copies to walk (64 MiB moves about 6% faster here).
  if (length >= kHugePageBytes) madvise(mapped, length, MADV_HUGEPAGE);
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = mapped;
  params.length = length;
  rdv_transport_memory_t memory = nullptr;
  const int code = MapMemory(context, &params, &memory, error, "registration");
  if (code != RDV_TRANSPORT_OK) {
    munmap(mapped, length);
    return code;
  }
  reinterpret_cast<Memory*>(memory)->mapped = mapped;
  reinterpret_cast<Memory*>(memory)->mapped_length = length;
  *out = memory;
  *address = mapped;
  return RDV_TRANSPORT_OK;
}

int MemRegister(rdv_transport_context_t handle, void* address, size_t length,
                uint32_t memory_type, int, rdv_transport_memory_t* out,
                rdv_transport_error_t* error) {
  const bool cuda = memory_type == RDV_TRANSPORT_MEMORY_CUDA;
  if (cuda && !ContextOf(handle)->cuda_memory) {
    return SetError(error, RDV_TRANSPORT_FAILED_PRECONDITION,
                    "this UCX build has no CUDA support (ucx_info -d lists no cuda memory "
                    "domain); stage GPU memory through host memory");
  }
  if (!cuda && memory_type != RDV_TRANSPORT_MEMORY_HOST) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT, "unknown memory type %u", memory_type);
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = address;
  params.length = length;
  params.memory_type = cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  return MapMemory(ContextOf(handle), &params, out, error, "registration");
}

void MemRelease(rdv_transport_memory_t handle) {
  auto* memory = reinterpret_cast<Memory*>(handle);
  ucp_mem_unmap(memory->context->ucp, memory->memh);
  if (memory->mapped != nullptr) munmap(memory->mapped, memory->mapped_length);
  if (memory->segment.id >= 0) {
    FreeSegment(memory->segment);
    memory->context->segments.fetch_sub(1);
  }
  delete memory;
}

int MemPack(rdv_transport_memory_t handle, void* buffer, size_t* length,
            rdv_transport_error_t* error) {
  auto* memory = reinterpret_cast<Memory*>(handle);
  ucp_mem_attr_t attributes{};
  attributes.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  ucs_status_t status = ucp_mem_query(memory->memh, &attributes);
  if (status != UCS_OK) return UcxError(error, status, "ucp_mem_query");
  void* key = nullptr;
  size_t size = 0;
  status = ucp_rkey_pack(memory->context->ucp, memory->memh, &key, &size);
  if (status != UCS_OK) return UcxError(error, status, "ucp_rkey_pack");
  KeyRegion region{};
  region.address = reinterpret_cast<uint64_t>(attributes.address);
  // UCX rounds a registration to pages; a segment's key reaches its bytes.
  region.length = memory->segment.id >= 0 ? memory->segment.length : attributes.length;
  region.segment_id = memory->segment.id;
  region.scope = ThisIpcScope();
  std::string blob(reinterpret_cast<const char*>(&region), sizeof(region));
  blob.append(static_cast<const char*>(key), size);
  ucp_rkey_buffer_release(key);
  const std::string packed = Seal(blob.data(), blob.size());
  return CopyOut(packed.data(), packed.size(), buffer, length, error);
}

int MemQuery(rdv_transport_memory_t handle, rdv_transport_memory_attributes_t* attributes,
             rdv_transport_error_t*) {
  const auto* memory = reinterpret_cast<const Memory*>(handle);
  if (attributes->field_mask & RDV_TRANSPORT_MEMORY_ATTR_FIELD_READ_BY_PEER_COPY) {
    attributes->read_by_peer_copy =
        memory->segment.id >= 0 && memory->context->segments_read_by_peer_copy;
  }
  return RDV_TRANSPORT_OK;
}

}  // namespace rdv::ucx_plugin
