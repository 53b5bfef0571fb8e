# Warnings, warnings-as-errors and sanitizers, applied to every rdv target
# through the rdv_build_flags interface target.

option(RDV_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)
set(RDV_SANITIZE "" CACHE STRING
    "Sanitizers to build with: empty, 'address,undefined' or 'thread'")
option(RDV_BUILD_TESTS "Build the GoogleTest suites" ON)
option(RDV_BUILD_BENCHMARKS "Build the Google Benchmark suites" ON)
option(RDV_BUILD_FUZZERS "Build the libFuzzer targets in fuzz/ (clang, with RDV_SANITIZE)" OFF)

add_library(rdv_build_flags INTERFACE)
target_compile_options(rdv_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wimplicit-fallthrough
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>
  $<$<BOOL:${RDV_WARNINGS_AS_ERRORS}>:-Werror>)

if(RDV_SANITIZE)
  if(NOT RDV_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "RDV_SANITIZE='${RDV_SANITIZE}': use 'address,undefined' or 'thread'")
  endif()
endif()

# The sanitizer alone, for code built without rdv's warnings (generated
# protobuf code): the same instrumentation on both sides of every inline
# protobuf function.
add_library(rdv_sanitize_flags INTERFACE)
if(RDV_SANITIZE)
  target_compile_options(rdv_sanitize_flags INTERFACE
    -fsanitize=${RDV_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(rdv_sanitize_flags INTERFACE -fsanitize=${RDV_SANITIZE})
  target_link_libraries(rdv_build_flags INTERFACE rdv_sanitize_flags)
endif()

# Fuzzers: every library they link is built with libFuzzer's coverage.
if(RDV_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT RDV_SANITIZE)
    message(FATAL_ERROR "RDV_BUILD_FUZZERS needs clang and RDV_SANITIZE (scripts/build fuzz)")
  endif()
  target_compile_options(rdv_sanitize_flags INTERFACE -fsanitize=fuzzer-no-link)
endif()
