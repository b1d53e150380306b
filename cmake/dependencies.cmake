# Imported targets for every dependency, named illm::<dep>. Debian 12 packages provide all of them
# (deploy/install-deps.sh installs them); CAF 0.17 ships no CMake config, so its targets are made here.

include(${CMAKE_CURRENT_LIST_DIR}/deps_root.cmake)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)

# OpenBLAS: its config gives variables only.
find_package(OpenBLAS REQUIRED CONFIG)
illm_reroot(OpenBLAS_INCLUDE_DIRS)
illm_reroot(OpenBLAS_LIBRARIES)
add_library(illm::openblas INTERFACE IMPORTED)
target_include_directories(illm::openblas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(illm::openblas INTERFACE ${OpenBLAS_LIBRARIES})

include(${CMAKE_CURRENT_LIST_DIR}/caf.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/unicode.cmake)
# OpenSSL (libssl-dev): mutual TLS on the control plane, under CAF's middleman (actors/cluster/tls_transport.hpp).
find_package(OpenSSL REQUIRED)

# UCX 1.13: Debian's config defines ucx::ucp.
if(ILLM_ENABLE_UCX)
  find_package(ucx REQUIRED CONFIG)
  foreach(target ucx::ucs ucx::ucp ucx::uct)  # Debian's config names /usr
    illm_reroot_target(${target})
  endforeach()
  add_library(illm::ucx INTERFACE IMPORTED)
  target_link_libraries(illm::ucx INTERFACE ucx::ucp ucx::ucs)
endif()

if(ILLM_BUILD_TESTS)
  find_package(doctest REQUIRED)
  include(doctest)
endif()
