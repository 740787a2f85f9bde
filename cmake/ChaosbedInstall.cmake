# Installation: the chaosbed binary (with its man page and bash completion), and the libraries of the lower
# layers with their headers and an export set, so that another project embeds them with
#   find_package(chaosbed CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE chaosbed::chaos)   # or chaosbed::core, chaosbed::transports, chaosbed::base
# Headers go to <prefix>/include/chaosbed and are included as in the source tree ("transports/collective.h").
include(CMakePackageConfigHelpers)

# The binary, its man page and its completion: experiments/CMakeLists.txt.
install(TARGETS chaosbed_base chaosbed_transports chaosbed_core chaosbed_chaos EXPORT chaosbedTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(layer transports core chaos)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/chaosbed
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/generated/chaosbed/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/chaosbed/chaosbed)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/chaosbed)
install(EXPORT chaosbedTargets NAMESPACE chaosbed:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/chaosbedConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/generated/chaosbedConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/generated/chaosbedConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/generated/chaosbedConfig.cmake
              ${CMAKE_BINARY_DIR}/generated/chaosbedConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/ChaosbedDependencies.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake
        DESTINATION ${config_dir})
