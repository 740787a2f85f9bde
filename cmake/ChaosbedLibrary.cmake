# chaosbed_layer(NAME DEPS ...): one static library from every .cc under the current folder. Sources under
# a `nccl/` or `cuda/` folder are built only when CUDA and NCCL were found.
function(chaosbed_layer name)
  cmake_parse_arguments(ARG "" "" "DEPS;EXCLUDE" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  if(NOT CHAOSBED_HAVE_NCCL)
    list(FILTER sources EXCLUDE REGEX "/(nccl|cuda)/")
  endif()
  foreach(pattern IN LISTS ARG_EXCLUDE)
    list(FILTER sources EXCLUDE REGEX "${pattern}")
  endforeach()
  if(sources)
    add_library(${name} STATIC ${sources})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  else()  # a layer with no code yet
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()
