# simpler_device_module(<target> <output-name> <sources>...)
#
# Builds a device-side shared object (the device runtime, a kernel or an orchestration) as a
# MODULE library named <output-name>.so in ${SIMPLER_DEVICE_OUTPUT_DIR}. Device modules see the
# public headers but link nothing from simpler: kernels and orchestrations talk to the runtime only
# through the ABI in <simpler/device/task_abi.h>.

include_guard(GLOBAL)

set(SIMPLER_DEVICE_OUTPUT_DIR "${PROJECT_BINARY_DIR}/device")

function(simpler_device_module target output_name)
  add_library(${target} MODULE ${ARGN})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "${output_name}"
    LIBRARY_OUTPUT_DIRECTORY "${SIMPLER_DEVICE_OUTPUT_DIR}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/include")
  target_compile_features(${target} PRIVATE cxx_std_20)
  # Bind the module's own symbols to itself: a module never picks up a same-named symbol from
  # the process that loads it.
  target_link_options(${target} PRIVATE "LINKER:-Bsymbolic")
  # No undefined symbols, except where the executable provides them: Clang links the sanitizer
  # runtimes and libFuzzer's coverage callbacks into the executable only.
  if(NOT (CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND (SIMPLER_SANITIZE OR SIMPLER_BUILD_FUZZERS)))
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
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
