# Compile options for simpler's own targets.
#
# simpler_target_options(<target>) adds warnings, -Werror (SIMPLER_WARNINGS_AS_ERRORS)
# and sanitizer flags (SIMPLER_SANITIZE) to <target> as PRIVATE options only, so none
# of them leak into the exported target or into projects that consume simpler.

include_guard(GLOBAL)

# Accepted values: "" (none), "address;undefined" (or either alone) and "thread".
foreach(_san IN LISTS SIMPLER_SANITIZE)
  if(NOT _san MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR
      "SIMPLER_SANITIZE='${SIMPLER_SANITIZE}': unknown sanitizer '${_san}'; "
      "use \"\", \"address;undefined\" or \"thread\".")
  endif()
endforeach()
if("thread" IN_LIST SIMPLER_SANITIZE AND "address" IN_LIST SIMPLER_SANITIZE)
  message(FATAL_ERROR "SIMPLER_SANITIZE: 'thread' cannot be combined with 'address'.")
endif()
if(SIMPLER_SANITIZE AND MSVC)
  message(FATAL_ERROR "SIMPLER_SANITIZE is only supported with GCC and Clang.")
endif()
# libFuzzer ships with Clang only.
if(SIMPLER_BUILD_FUZZERS AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR
    "SIMPLER_BUILD_FUZZERS needs the Clang compiler (libFuzzer), but CMAKE_CXX_COMPILER is "
    "${CMAKE_CXX_COMPILER_ID} (${CMAKE_CXX_COMPILER}). Use the `fuzz` preset (clang-14), or "
    "configure a fresh build directory with -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++.")
endif()

function(simpler_target_options target)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "simpler_target_options: '${target}' is not a target")
  endif()

  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)

  if(MSVC)
    target_compile_options(${target} PRIVATE /W4 /permissive-)
    if(SIMPLER_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE /WX)
    endif()
    return()
  endif()

  target_compile_options(${target} PRIVATE
    -Wall
    -Wextra
    -Wpedantic
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
    $<$<COMPILE_LANGUAGE:CXX>:-Wold-style-cast>
    -Wcast-align
    $<$<COMPILE_LANGUAGE:CXX>:-Woverloaded-virtual>
    -Wnull-dereference
    -Wimplicit-fallthrough)
  if(SIMPLER_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()

  if(SIMPLER_SANITIZE)
    list(JOIN SIMPLER_SANITIZE "," _sanitizers)
    set(_flags "-fsanitize=${_sanitizers}" -fno-omit-frame-pointer)
    if("undefined" IN_LIST SIMPLER_SANITIZE)
      list(APPEND _flags -fno-sanitize-recover=undefined)
    endif()
    target_compile_options(${target} PRIVATE ${_flags})
    target_link_options(${target} PRIVATE ${_flags})
    # GCC warns (-Wtsan) wherever std::atomic_thread_fence is inlined, which TSan cannot model;
    # Boost.Asio's handler completion uses one (the remote headers), so -Werror would stop every
    # TSan build that includes them. At worst TSan reports a race the fence orders, inside Asio.
    if("thread" IN_LIST SIMPLER_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-tsan)
    endif()
  endif()

  # Coverage feedback for libFuzzer from every target the fuzzers run (the library, the device
  # runtime and modules); the fuzzer executables themselves add -fsanitize=fuzzer.
  if(SIMPLER_BUILD_FUZZERS)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()
