# Device modules: kernels and orchestrations (and device runtimes) as shared objects the device
# runtime loads with dlopen. Installed with the package and included by simplerConfig.cmake, so a
# project that does find_package(simpler) builds its own modules the same way simpler does.
#
#   simpler_add_kernel(<target> SOURCES <src>... [OUTPUT_NAME <name>] [OUTPUT_DIRECTORY <dir>]
#                      [ALLOW_UNDEFINED])
#   simpler_add_orchestration(<target> SOURCES <src>... [OUTPUT_NAME <name>]
#                             [OUTPUT_DIRECTORY <dir>] [ALLOW_UNDEFINED])
#     A MODULE library <dir>/<name>.so (no "lib" prefix; <name> defaults to <target>, <dir> to
#     CMake's default library output directory) that links simpler::device only: the device headers
#     (<simpler/device/orchestration.hpp>, <simpler/device/task_abi.h>), C++20, and nothing to link.
#     A kernel defines its entry with SIMPLER_KERNEL(args) { ... }, an orchestration with
#     SIMPLER_ORCHESTRATION(orch, args) { ... }. Symbols are hidden except the entries, the module
#     binds its own symbols to itself (-Bsymbolic: a same-named symbol of the loading process is
#     never picked up instead) and is linked with --no-undefined, so a missing symbol fails the
#     build rather than the dlopen; ALLOW_UNDEFINED drops --no-undefined (for sanitizer runtimes
#     that only the executable links, as Clang does). The target's SIMPLER_DEVICE_MODULE_KIND
#     property is "kernel" or "orchestration". Use $<TARGET_FILE:<target>> for the path to give a
#     ChipCallable.
#
#   simpler_add_device_module(<target> KIND <kernel|orchestration|runtime> SOURCES <src>... ...)
#     The common form of the two above (a device runtime is KIND runtime).

include_guard(GLOBAL)

function(simpler_add_device_module target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "ALLOW_UNDEFINED" "KIND;OUTPUT_NAME;OUTPUT_DIRECTORY"
    "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "simpler_add_device_module(${target}): unknown arguments "
                        "'${arg_UNPARSED_ARGUMENTS}'; expected KIND, SOURCES, OUTPUT_NAME, "
                        "OUTPUT_DIRECTORY or ALLOW_UNDEFINED")
  endif()
  if(NOT arg_KIND MATCHES "^(kernel|orchestration|runtime)$")
    message(FATAL_ERROR "simpler_add_device_module(${target}): KIND is '${arg_KIND}'; use kernel, "
                        "orchestration or runtime")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "simpler_add_device_module(${target}): no SOURCES; give the .cpp files of "
                        "the ${arg_KIND}")
  endif()
  if(NOT TARGET simpler::device)
    message(FATAL_ERROR "simpler_add_device_module(${target}): the target simpler::device does not "
                        "exist; call find_package(simpler) first")
  endif()
  if(NOT arg_OUTPUT_NAME)
    set(arg_OUTPUT_NAME "${target}")
  endif()

  add_library(${target} MODULE ${arg_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "${arg_OUTPUT_NAME}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    SIMPLER_DEVICE_MODULE_KIND "${arg_KIND}")
  if(arg_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${arg_OUTPUT_DIRECTORY}")
  endif()
  target_link_libraries(${target} PRIVATE simpler::device)
  target_link_options(${target} PRIVATE "LINKER:-Bsymbolic")
  if(NOT arg_ALLOW_UNDEFINED)
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()

function(simpler_add_kernel target)
  simpler_add_device_module(${target} KIND kernel ${ARGN})
endfunction()

function(simpler_add_orchestration target)
  simpler_add_device_module(${target} KIND orchestration ${ARGN})
endfunction()
