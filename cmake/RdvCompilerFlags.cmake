# Warnings, warnings-as-errors and sanitizers, applied to every rdv target
# through the rdv_build_flags interface target.

option(RDV_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)
set(RDV_SANITIZE "" CACHE STRING
    "Sanitizers to build with: empty, 'address,undefined' or 'thread'")
option(RDV_BUILD_TESTS "Build the GoogleTest suites" ON)
option(RDV_BUILD_BENCHMARKS "Build the Google Benchmark suites" ON)

add_library(rdv_build_flags INTERFACE)
target_compile_options(rdv_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wimplicit-fallthrough
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>
  $<$<BOOL:${RDV_WARNINGS_AS_ERRORS}>:-Werror>)

if(RDV_SANITIZE)
  if(NOT RDV_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "RDV_SANITIZE='${RDV_SANITIZE}': use 'address,undefined' or 'thread'")
  endif()
  target_compile_options(rdv_build_flags INTERFACE
    -fsanitize=${RDV_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(rdv_build_flags INTERFACE -fsanitize=${RDV_SANITIZE})
endif()
