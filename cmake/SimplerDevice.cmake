# simpler_device_module(<target> <output-name> <sources>...)
#
# Builds one of simpler's own device-side shared objects (the device runtime, a kernel or an
# orchestration) as a MODULE library named <output-name>.so in ${SIMPLER_DEVICE_OUTPUT_DIR}, through
# the installed helper simpler_add_device_module (cmake/SimplerModules.cmake), plus simpler's
# warnings and sanitizer flags. Device modules link simpler::device only: kernels and
# orchestrations talk to the runtime only through the ABI in <simpler/device/task_abi.h>.

include_guard(GLOBAL)
include(SimplerModules)

set(SIMPLER_DEVICE_OUTPUT_DIR "${PROJECT_BINARY_DIR}/device")

function(simpler_device_module target output_name)
  set(_kind runtime)
  if(output_name MATCHES "kernel_")
    set(_kind kernel)
  elseif(output_name MATCHES "orch_")
    set(_kind orchestration)
  endif()
  # Clang links the sanitizer runtimes and libFuzzer's coverage callbacks into the executable only.
  set(_allow_undefined "")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND (SIMPLER_SANITIZE OR SIMPLER_BUILD_FUZZERS))
    set(_allow_undefined ALLOW_UNDEFINED)
  endif()
  simpler_add_device_module(${target} KIND ${_kind} SOURCES ${ARGN}
    OUTPUT_NAME "${output_name}" OUTPUT_DIRECTORY "${SIMPLER_DEVICE_OUTPUT_DIR}" ${_allow_undefined})
  simpler_target_options(${target})
  set_property(GLOBAL APPEND PROPERTY SIMPLER_DEVICE_MODULES ${target})
endfunction()

# simpler_device_modules_from(<prefix> <glob-dir>): one module <prefix><stem> per <glob-dir>/*.cpp.
function(simpler_device_modules_from prefix dir)
  file(GLOB _sources CONFIGURE_DEPENDS "${dir}/*.cpp")
  foreach(_source IN LISTS _sources)
    get_filename_component(_stem "${_source}" NAME_WE)
    simpler_device_module(simpler_${prefix}${_stem} "${prefix}${_stem}" "${_source}")
  endforeach()
endfunction()

# simpler_uses_device_modules(<target>): <target> finds device modules at run time through the
# SIMPLER_DEVICE_MODULE_DIR definition, and building it builds them.
function(simpler_uses_device_modules target)
  target_compile_definitions(${target} PRIVATE
    SIMPLER_DEVICE_MODULE_DIR="${SIMPLER_DEVICE_OUTPUT_DIR}")
  get_property(_modules GLOBAL PROPERTY SIMPLER_DEVICE_MODULES)
  if(_modules)
    add_dependencies(${target} ${_modules})
  endif()
endfunction()
