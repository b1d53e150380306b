# ILLM_DEPS_ROOT: a folder where Debian packages were unpacked (deploy/gpu-bundle.sh fetches them,
# deploy/gpu-check.sh unpacks them on a machine that lacks them). Every dependency it holds is found there first:
# CMake configs and headers under its usr/, pkg-config's files through its own pkgconf, the OpenBLAS and UCX configs
# (whose paths Debian writes absolute) re-rooted, and the binaries run from its libraries (their build RPATH).
set(ILLM_DEPS_ROOT "" CACHE PATH "Folder where the Debian packages of the dependencies were unpacked (empty: the system's)")
if(ILLM_DEPS_ROOT)
  set(illm_deps_usr ${ILLM_DEPS_ROOT}/usr)
  set(illm_deps_lib ${illm_deps_usr}/lib/${CMAKE_LIBRARY_ARCHITECTURE})
  list(PREPEND CMAKE_PREFIX_PATH ${illm_deps_usr})
  set(OpenBLAS_DIR ${illm_deps_lib}/openblas-pthread/cmake/openblas)
  set(OPENSSL_ROOT_DIR ${illm_deps_usr})
  set(ENV{PKG_CONFIG_LIBDIR} "${illm_deps_lib}/pkgconfig:${illm_deps_usr}/share/pkgconfig")
  set(ENV{PKG_CONFIG_SYSROOT_DIR} ${ILLM_DEPS_ROOT})
  if(EXISTS ${illm_deps_usr}/bin/pkgconf)  # the unpacked pkgconf runs on the unpacked libpkgconf
    set(illm_pkgconf ${CMAKE_BINARY_DIR}/deps-pkg-config)
    file(WRITE ${illm_pkgconf}
         "#!/bin/sh\nLD_LIBRARY_PATH=${illm_deps_lib}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec ${illm_deps_usr}/bin/pkgconf \"$@\"\n")
    file(CHMOD ${illm_pkgconf} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    set(PKG_CONFIG_EXECUTABLE ${illm_pkgconf} CACHE FILEPATH "pkg-config" FORCE)
  endif()
  # DT_RPATH rather than RUNPATH: the loader looks in the prefix for the libraries' own dependencies too (libuct
  # under libucp, libicudata under libicuuc, libgfortran under OpenBLAS), where a machine without them has none.
  list(APPEND CMAKE_BUILD_RPATH ${illm_deps_lib} ${illm_deps_lib}/openblas-pthread)
  add_link_options(LINKER:--disable-new-dtags)
  message(STATUS "dependencies from ${ILLM_DEPS_ROOT} first")
endif()

# Paths a config wrote absolute (/usr/...), under ILLM_DEPS_ROOT when it is set.
function(illm_reroot var)
  if(ILLM_DEPS_ROOT)
    list(TRANSFORM ${var} PREPEND ${ILLM_DEPS_ROOT})
    set(${var} ${${var}} PARENT_SCOPE)
  endif()
endfunction()

# An imported target whose config wrote its paths absolute (/usr/...), re-rooted under ILLM_DEPS_ROOT.
function(illm_reroot_target target)
  if(NOT ILLM_DEPS_ROOT)
    return()
  endif()
  foreach(property IMPORTED_LOCATION INTERFACE_INCLUDE_DIRECTORIES)
    get_target_property(value ${target} ${property})
    if(value AND NOT value MATCHES "^${ILLM_DEPS_ROOT}")
      list(TRANSFORM value PREPEND ${ILLM_DEPS_ROOT})
      set_target_properties(${target} PROPERTIES ${property} "${value}")
    endif()
  endforeach()
endfunction()
