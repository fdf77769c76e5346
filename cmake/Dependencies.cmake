# Debian-packaged dependencies (deploy/install-deps.sh installs them all).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(FlatBuffers CONFIG REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(cppzmq REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)  # JSON: stats, events, safetensors headers
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

find_package(BLAS REQUIRED)  # OpenBLAS from Debian: the worker's CPU matrix products
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread
          HINTS /usr/include/x86_64-linux-gnu/openblas-pthread)
find_library(OPENBLAS_LIBRARY NAMES openblas)
add_library(diloco_blas INTERFACE)
target_include_directories(diloco_blas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(diloco_blas INTERFACE ${OPENBLAS_LIBRARY})

pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # Prometheus endpoint
