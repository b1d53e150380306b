# Warnings, CPU target and sanitizers, applied to every target of the project through illm::options.

add_library(illm_options INTERFACE)
add_library(illm::options ALIAS illm_options)
target_compile_options(illm_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
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
