# The packages that chaosbed's libraries link, found by the build (CMakeLists.txt) and again by a project
# that uses the installed libraries (chaosbedConfig.cmake), so that both resolve the same targets.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
find_package(glog REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)  # HMAC-SHA256 for the control plane's authentication
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(prometheus-cpp REQUIRED)
# OpenBLAS's cblas; Debian's alternatives make libopenblas the system BLAS as well.
find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas
          PATHS /usr/include/x86_64-linux-gnu /usr/include REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas PATH_SUFFIXES openblas-pthread REQUIRED)
if(NOT TARGET chaosbed::blas)
  add_library(chaosbed::blas INTERFACE IMPORTED)
  target_include_directories(chaosbed::blas INTERFACE ${CBLAS_INCLUDE_DIR})
  target_link_libraries(chaosbed::blas INTERFACE ${OPENBLAS_LIBRARY})
endif()
