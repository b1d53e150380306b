# Warnings, CPU target and sanitizers, applied to every target of the project through illm::options.

add_library(illm_options INTERFACE)
add_library(illm::options ALIAS illm_options)
target_compile_options(illm_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
if(ILLM_NATIVE)
  target_compile_options(illm_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()

set(illm_sanitizers "")
if(ILLM_SANITIZE_ADDRESS)
  list(APPEND illm_sanitizers address)
endif()
if(ILLM_SANITIZE_UNDEFINED)
  list(APPEND illm_sanitizers undefined)
endif()
if(ILLM_SANITIZE_THREAD)
  list(APPEND illm_sanitizers thread)
endif()
if(illm_sanitizers)
  list(JOIN illm_sanitizers "," illm_sanitizer_list)
  target_compile_options(illm_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${illm_sanitizer_list} -fno-omit-frame-pointer>)
  if(ILLM_SANITIZE_UNDEFINED)
    # Undefined behaviour stops the program (a test fails) instead of a report it carries on after.
    target_compile_options(illm_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  endif()
  target_link_options(illm_options INTERFACE -fsanitize=${illm_sanitizer_list})
endif()

# Unity builds (ILLM_UNITY_BUILD, deploy/test.sh's): a target's sources compiled 16 to a translation unit, so their
# headers are parsed once a batch (a third less compile time); off by default, so that a change recompiles one file.
function(illm_unity_build target)
  if(ILLM_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    # GCC warns of a class whose members use a source's anonymous-namespace types once that source is no longer
    # its translation unit's main file; each source is still compiled as written.
    target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>)
  endif()
endfunction()
