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
  rdv_transport_entry_v3_fn entry_v3;
  rdv_transport_entry_v2_fn entry_v2;
  /* POSIX's way to turn dlsym's object pointer into a function pointer. */
  *(void**)(&entry_v3) = dlsym(library, RDV_TRANSPORT_ENTRY_V3);
  *(void**)(&entry_v2) = dlsym(library, RDV_TRANSPORT_ENTRY_V2);
  if (entry_v3 != NULL) {
    const rdv_transport_v3_t* api = entry_v3();
    size_t count = 0;
    if (api == NULL || api->abi_version != 3 || api->struct_size != sizeof(rdv_transport_v3_t) ||
        api->name == NULL || api->init == NULL || api->post_get == NULL ||
        api->post_recv == NULL || api->abort == NULL || api->cancel_recv == NULL ||
        api->settings == NULL || api->settings(&count) == NULL || count == 0) {
      fprintf(stderr, "FAIL %s: the entry point returned an incomplete v3 table\n", path);
      return 1;
    }
    printf("ok %s: transport '%s', ABI v3, %zu settings\n", path, api->name, count);
    return 0;
  }
  if (entry_v2 == NULL) {
    fprintf(stderr, "FAIL %s: no symbol %s or %s\n", path, RDV_TRANSPORT_ENTRY_V3,
            RDV_TRANSPORT_ENTRY_V2);
    return 1;
  }
  const rdv_transport_v2_t* api = entry_v2();
  if (api == NULL || api->abi_version != 2 || api->struct_size != sizeof(rdv_transport_v2_t) ||
      api->name == NULL || api->init == NULL || api->post_get == NULL ||
      api->post_recv == NULL || api->abort == NULL || api->cancel_recv == NULL) {
    fprintf(stderr, "FAIL %s: the entry point returned an incomplete v2 table\n", path);
    return 1;
  }
  printf("ok %s: transport '%s', ABI v2\n", path, api->name);
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
