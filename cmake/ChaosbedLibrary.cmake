# chaosbed_layer(NAME EXPORT_NAME name SOURCES ... [NCCL_SOURCES ...] DEPS ...): one static library of a
# top-level folder, from the sources it lists (relative to that folder). NCCL_SOURCES are built only when CUDA
# and NCCL were found. Its headers are included as "<folder>/<file>.h" from the source tree, or from
# <prefix>/include/chaosbed when installed; chaosbed::<EXPORT_NAME> names it here and in the export set.
function(chaosbed_layer name)
  cmake_parse_arguments(ARG "" "EXPORT_NAME" "SOURCES;NCCL_SOURCES;DEPS" ${ARGN})
  set(sources ${ARG_SOURCES})
  if(CHAOSBED_HAVE_NCCL)
    list(APPEND sources ${ARG_NCCL_SOURCES})
  endif()
  add_library(${name} STATIC ${sources})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
                                            $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/chaosbed>)
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${ARG_EXPORT_NAME})
  add_library(chaosbed::${ARG_EXPORT_NAME} ALIAS ${name})
endfunction()
