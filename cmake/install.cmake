# What `cmake --install <build> --prefix P` puts under P:
#
#   bin/uroce                          the command line (uroce exec, demo, ...)
#   <libdir>/uroce/libibverbs.so.1 ... the drop-in libibverbs.so.1,
#                                      librdmacm.so.1 and the libmlx5/libefa
#                                      stand-ins: a private directory, out of
#                                      the default library path (`uroce exec`
#                                      puts it in LD_LIBRARY_PATH)
#   <libdir>/liburoce.a (or .so)       the C++ API ...
#   include/uroce/*.hpp                ... and its headers
#   <libdir>/uroce/liburoce_*.a        the layers a static liburoce.a needs
#                                      at link time (internal, link-only)
#   <libdir>/cmake/uroce/              uroceConfig.cmake, its version file
#                                      and the exported targets: a project
#                                      does find_package(uroce) and links
#                                      uroce::uroce
#
# Nothing of the test suite is installed.
include(CMakePackageConfigHelpers)

set(UROCE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/uroce)

# ---- the command line
install(TARGETS uroce_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- the drop-in libraries (src/compat).  The runtime names only
# (libibverbs.so.1 -> libibverbs.so.1.14.0): no development namelinks, a
# program is built against rdma-core's and run on ours.
foreach(t uroce_ibverbs uroce_rdmacm uroce_mlx5_stub uroce_efa_stub)
  if(TARGET ${t})
    install(TARGETS ${t} LIBRARY DESTINATION ${UROCE_INSTALL_PRIVATE_LIBDIR} NAMELINK_SKIP)
  endif()
endforeach()
# `cmake --build <dir> --target uroce_installable` builds what `cmake --install`
# installs and nothing of the test suite (./run.sh test's release stage).
add_custom_target(uroce_installable)
add_dependencies(uroce_installable uroce_tool uroce)
foreach(t uroce_ibverbs uroce_rdmacm uroce_mlx5_stub uroce_efa_stub)
  if(TARGET ${t})
    add_dependencies(uroce_installable ${t})
  endif()
endforeach()
if(TARGET uroce_rdmacm)
  # librdmacm.so.1 needs our libibverbs.so.1, which lies beside it.
  set_target_properties(uroce_rdmacm PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()

# ---- the C++ API and its package
install(TARGETS uroce EXPORT uroceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/uroce DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")

get_target_property(uroce_api_type uroce TYPE)
if(uroce_api_type STREQUAL "STATIC_LIBRARY")
  # A static liburoce.a holds the API only; the layers under it (linked
  # privately, so link-only for a user: none of their headers is installed)
  # and ISA-L come along in the export.
  set(UROCE_PACKAGE_STATIC TRUE)
  install(TARGETS uroce_core uroce_net uroce_wire uroce_common EXPORT uroceTargets
          ARCHIVE DESTINATION ${UROCE_INSTALL_PRIVATE_LIBDIR})
else()
  # liburoce.so carries the layers.  The tool links it.
  set(UROCE_PACKAGE_STATIC FALSE)
  file(RELATIVE_PATH uroce_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(uroce_tool PROPERTIES INSTALL_RPATH "$ORIGIN/${uroce_bin_to_lib}")
endif()

install(EXPORT uroceTargets NAMESPACE uroce:: FILE uroceTargets.cmake DESTINATION ${UROCE_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/uroceConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/uroceConfig.cmake
                              INSTALL_DESTINATION ${UROCE_INSTALL_CMAKEDIR})
# 0.x: only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/uroceConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/uroceConfig.cmake ${PROJECT_BINARY_DIR}/cmake/uroceConfigVersion.cmake
        DESTINATION ${UROCE_INSTALL_CMAKEDIR})
