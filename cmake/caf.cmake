# CAF 0.17 (libcaf-dev): headers under caf/, libraries caf_core and caf_io.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(illm::caf_core UNKNOWN IMPORTED)
set_target_properties(illm::caf_core PROPERTIES
  IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(illm::caf_io UNKNOWN IMPORTED)
set_target_properties(illm::caf_io PROPERTIES
  IMPORTED_LOCATION ${CAF_IO_LIBRARY}
  INTERFACE_LINK_LIBRARIES illm::caf_core)
