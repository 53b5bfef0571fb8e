# What `cmake --install` gives an embedder: librdv.so (the rendezvous, the
# worker server and everything below them in one shared library), the
# public headers of that API under include/rdv/, the CMake package
# (find_package(rdv) -> rdv::rdv) and a pkg-config file (rdv.pc). The other
# headers stay private: they change without notice.

set(RDV_PUBLIC_HEADERS
  core/allocator.h core/buffer.h core/cancellation.h core/device_name.h core/dtype.h
  core/memory.h core/rendezvous.h core/rendezvous_key.h core/status.h core/tensor.h
  core/tensor_shape.h core/version.h
  control/cluster.h control/options.h control/rendezvous_mgr.h control/security_options.h
  control/worker_server.h)

# The static parts, whole: an embedder links one library, and the worker
# server reaches every part of it. Its own source says which version it is.
add_library(rdv_shared SHARED core/version.cc)
target_compile_definitions(rdv_shared PRIVATE RDV_VERSION="${PROJECT_VERSION}")
add_library(rdv::rdv ALIAS rdv_shared)
# (CMake's WHOLE_ARCHIVE feature refuses archives that also come in as
# dependencies of each other, so the linker is told directly; the targets
# named after it bring their own dependencies.)
set(rdv_parts rdv_control rdv_graph rdv_plugin rdv_core rdv_worker_proto rdv_graph_proto)
set(whole_parts)
foreach(part IN LISTS rdv_parts)
  list(APPEND whole_parts $<TARGET_FILE:${part}>)
endforeach()
target_link_libraries(rdv_shared
  PRIVATE
    -Wl,--whole-archive ${whole_parts} -Wl,--no-whole-archive ${rdv_parts} rdv_build_flags
  PUBLIC
    absl::status absl::statusor absl::strings absl::synchronization absl::time
    absl::flat_hash_map absl::inlined_vector absl::span absl::any_invocable Threads::Threads)
target_include_directories(rdv_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/rdv>)
# A sanitized build's library needs the sanitizer's runtime in the program.
if(RDV_SANITIZE)
  set(RDV_SANITIZE_LINK_FLAG -fsanitize=${RDV_SANITIZE})
  target_link_options(rdv_shared INTERFACE ${RDV_SANITIZE_LINK_FLAG})
endif()
set_target_properties(rdv_shared PROPERTIES
  OUTPUT_NAME rdv EXPORT_NAME rdv
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  INSTALL_RPATH "$<$<BOOL:${RDV_HAVE_CUDA}>:${CUDAToolkit_LIBRARY_DIR}>")

install(TARGETS rdv_shared EXPORT rdvTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rdv)
foreach(header IN LISTS RDV_PUBLIC_HEADERS)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rdv/${folder})
endforeach()

include(CMakePackageConfigHelpers)
set(package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/rdv)
install(EXPORT rdvTargets NAMESPACE rdv:: DESTINATION ${package_dir})
configure_package_config_file(cmake/rdvConfig.cmake.in ${PROJECT_BINARY_DIR}/rdvConfig.cmake
                              INSTALL_DESTINATION ${package_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rdvConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rdvConfig.cmake ${PROJECT_BINARY_DIR}/rdvConfigVersion.cmake
        DESTINATION ${package_dir})

# Relative to the .pc file, so that a prefix given to `cmake --install
# --prefix` (or moved) still works.
file(RELATIVE_PATH RDV_PC_PREFIX_FROM_PCFILEDIR
     /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/rdv.pc.in ${PROJECT_BINARY_DIR}/rdv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/rdv.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
