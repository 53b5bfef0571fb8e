// The settings of RDV_TEST_SANITIZER_ENV (tests/CMakeLists.txt, which
// defines these macros from the same variables) as the sanitizers'
// built-in defaults of every test program: they hold even when ctest
// passes a test less than the whole environment; a variable set still
// wins. Unused in a build without sanitizers.

extern "C" {

const char* __asan_default_options() { return RDV_ASAN_OPTIONS; }
const char* __lsan_default_options() { return RDV_LSAN_OPTIONS; }
const char* __ubsan_default_options() { return RDV_UBSAN_OPTIONS; }
const char* __tsan_default_options() { return RDV_TSAN_OPTIONS; }

}  // extern "C"
