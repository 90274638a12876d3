# Installs the library, headers and the meshcast command, and exports meshcast::meshcast for
# find_package(meshcast).
include(CMakePackageConfigHelpers)

get_property(layers GLOBAL PROPERTY MESHCAST_LAYERS)
install(TARGETS meshcast ${layers} EXPORT meshcastTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS meshcast_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/meshcast DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/meshcast/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/meshcast)
install(EXPORT meshcastTargets NAMESPACE meshcast::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/meshcast)
configure_package_config_file(cmake/meshcastConfig.cmake.in
  ${PROJECT_BINARY_DIR}/meshcastConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/meshcast)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshcastConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/meshcastConfig.cmake
              ${PROJECT_BINARY_DIR}/meshcastConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/meshcast)
