/* Opens each plugin named on the command line the way any runtime would
 * (dlopen, then the ABI entry point) and checks what the entry returns.
 * Plain C, so that the ABI header is proven to be C. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "plugin/rdv_transport.h"

static int check(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "FAIL %s: dlopen: %s\n", path, dlerror());
    return 1;
  }
  rdv_transport_entry_v2_fn entry;
  /* POSIX's way to turn dlsym's object pointer into a function pointer. */
  *(void**)(&entry) = dlsym(library, RDV_TRANSPORT_ENTRY_V2);
  if (entry == NULL) {
    fprintf(stderr, "FAIL %s: no symbol %s\n", path, RDV_TRANSPORT_ENTRY_V2);
    return 1;
  }
  const rdv_transport_v2_t* api = entry();
  if (api == NULL || api->abi_version != RDV_TRANSPORT_ABI_VERSION ||
      api->struct_size != sizeof(rdv_transport_v2_t) || api->name == NULL || api->init == NULL ||
      api->post_get == NULL || api->post_recv == NULL || api->abort == NULL ||
      api->cancel_recv == NULL) {
    fprintf(stderr, "FAIL %s: the entry point returned an incomplete v%d table\n", path,
            RDV_TRANSPORT_ABI_VERSION);
    return 1;
  }
  printf("ok %s: transport '%s', ABI v%u\n", path, api->name, api->abi_version);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s librdv_transport_<name>.so...\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (int i = 1; i < argc; ++i) failures += check(argv[i]);
  return failures == 0 ? 0 : 1;
}
