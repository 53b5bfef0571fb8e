// What RDV_TEST_SANITIZER_ENV (tests/CMakeLists.txt) sets, as the
// sanitizers' built-in defaults of every test program, which hold even when
// ctest passes a test less than the whole environment; a variable set
// still wins. Unused in a build without sanitizers.

extern "C" {

const char* __asan_default_options() {
  return "protect_shadow_gap=0:detect_leaks=1:intercept_tls_get_addr=0";
}

const char* __lsan_default_options() { return "suppressions=" RDV_LSAN_SUPPRESSIONS; }

const char* __ubsan_default_options() { return "print_stacktrace=1"; }

const char* __tsan_default_options() { return "second_deadlock_stack=1"; }

}  // extern "C"
