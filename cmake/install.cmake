# What `cmake --install` puts under the prefix:
#   include/ramferry/*.h                 the C API (ramferry.h) and the C++ API
#   lib/libramferry.so.0 (+ links)       the shared library
#   lib/libramferry.a, libramferry_channels.a, libramferry_proto.a
#                                        the static library and the two it
#                                        needs (pkg-config --static lists them)
#   lib/pkgconfig/ramferry.pc            pkg-config (shared; --static: static)
#   lib/cmake/ramferry/                  find_package(ramferry): ramferry::ramferry
#   bin/ramferry-migrate, bin/ramferry-bench
#   share/man/man1, man3                 ramferry-migrate(1), ramferry-bench(1),
#                                        ramferry(3) (man/CMakeLists.txt)
#   lib/python3/dist-packages/ramferry  the Python package (ctypes over
#                                        lib/libramferry.so.0, found from there)
# tests/install/install_test.sh installs into a temporary prefix and builds
# examples/c against it both ways, so these rules cannot rot.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ramferry
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

set_target_properties(ramferry_shared PROPERTIES EXPORT_NAME ramferry)
install(TARGETS ramferry_shared EXPORT ramferryTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ramferry ramferry_channels ramferry_proto
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ramferry-migrate ramferry-bench
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The Python package sits three levels below the library it loads
# (python/ramferry/_lib.py looks there first).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/ramferry
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/python3/dist-packages
  FILES_MATCHING PATTERN "*.py" PATTERN "py.typed")

set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/ramferry)
install(EXPORT ramferryTargets NAMESPACE ramferry:: DESTINATION ${cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ramferryConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/ramferryConfig.cmake
  INSTALL_DESTINATION ${cmake_dir})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/ramferryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ramferryConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/ramferryConfigVersion.cmake
  DESTINATION ${cmake_dir})

# pkg-config: the static libraries' dependencies, from the targets' own link
# lists, as Requires.private modules (and -pthread, -lstdc++ for a static
# link from C).
set(pc_requires)
set(pc_libs_private "-lramferry_channels -lramferry_proto")
set(pc_pkgconfig_names
  "PkgConfig::XXHASH=libxxhash" "PkgConfig::ZSTD=libzstd"
  "PkgConfig::URING=liburing" "PkgConfig::IBVERBS=libibverbs"
  "PkgConfig::RDMACM=librdmacm" "OpenSSL::Crypto=libcrypto")
foreach(lib ramferry ramferry_channels ramferry_proto)
  get_target_property(libs ${lib} LINK_LIBRARIES)
  foreach(dep IN LISTS libs)
    if(dep MATCHES "^absl::(.*)$")
      list(APPEND pc_requires absl_${CMAKE_MATCH_1})
    elseif(dep STREQUAL "Threads::Threads" OR dep MATCHES "^ramferry")
    else()
      set(found FALSE)
      foreach(pair IN LISTS pc_pkgconfig_names)
        if(pair MATCHES "^(.*)=(.*)$" AND dep STREQUAL CMAKE_MATCH_1)
          list(APPEND pc_requires ${CMAKE_MATCH_2})
          set(found TRUE)
        endif()
      endforeach()
      if(NOT found)
        message(FATAL_ERROR "ramferry.pc: no pkg-config module for ${dep} "
          "(add it to pc_pkgconfig_names in cmake/install.cmake)")
      endif()
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES pc_requires)
list(JOIN pc_requires " " pc_requires)
# The prefix from the .pc file's own place, so a tree installed with
# `cmake --install --prefix DIR` (or moved) still resolves.
file(RELATIVE_PATH pc_to_prefix
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/ramferry.pc.in
  ${CMAKE_CURRENT_BINARY_DIR}/ramferry.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ramferry.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
