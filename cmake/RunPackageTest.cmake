# Package consumer test, run by ctest as `cmake -P RunPackageTest.cmake`.
#
# 1. installs the already-built simpler build tree into a fresh prefix,
# 2. configures tests/package against that prefix with find_package(simpler),
# 3. builds it (with its own kernel and orchestration modules) and runs the resulting programs.
# Any failing step fails the test.
#
# Inputs (-D...): SIMPLER_BINARY_DIR, SIMPLER_DEVICE_RUNTIME, PACKAGE_SOURCE_DIR,
# WORK_DIR, and optionally CONFIG, GENERATOR, CXX_COMPILER, WITH_MPI (the build has
# SIMPLER_WITH_MPI: the consumer must also build its simpler::mpi program).

cmake_minimum_required(VERSION 3.25)

foreach(_var IN ITEMS SIMPLER_BINARY_DIR SIMPLER_DEVICE_RUNTIME PACKAGE_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "RunPackageTest: ${_var} is not set")
  endif()
endforeach()
if(NOT GENERATOR)
  set(GENERATOR "Ninja")
endif()

if(NOT EXISTS "${SIMPLER_DEVICE_RUNTIME}")
  message(FATAL_ERROR
    "RunPackageTest: the simulated device runtime ${SIMPLER_DEVICE_RUNTIME} does not exist; build the project before running ctest.")
endif()

set(_prefix "${WORK_DIR}/prefix")
set(_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(_config_args "")
set(_build_type_arg "")
if(CONFIG)
  set(_config_args --config "${CONFIG}")
  set(_build_type_arg "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
set(_compiler_arg "")
if(CXX_COMPILER)
  set(_compiler_arg "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

message(STATUS "RunPackageTest: installing ${SIMPLER_BINARY_DIR} into ${_prefix}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${SIMPLER_BINARY_DIR}" --prefix "${_prefix}" ${_config_args}
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

# Header-only: nothing but the device runtime and kernels is compiled, so no host library may be
# installed.
file(GLOB_RECURSE _host_libs "${_prefix}/*libsimpler*.a" "${_prefix}/*libsimpler*.so")
if(_host_libs)
  message(FATAL_ERROR "RunPackageTest: a host library was installed (${_host_libs}); simpler::simpler "
                      "must be an INTERFACE target")
endif()

message(STATUS "RunPackageTest: configuring ${PACKAGE_SOURCE_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}"
    -S "${PACKAGE_SOURCE_DIR}"
    -B "${_build}"
    -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${_prefix}"
    ${_build_type_arg}
    ${_compiler_arg}
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

# Make sure the consumer found the freshly installed package, not another copy.
file(STRINGS "${_build}/CMakeCache.txt" _simpler_dir_line REGEX "^simpler_DIR:")
string(REGEX REPLACE "^simpler_DIR:[A-Z]+=" "" _simpler_dir "${_simpler_dir_line}")
file(REAL_PATH "${_prefix}" _real_prefix)
file(REAL_PATH "${_simpler_dir}" _real_simpler_dir)
string(FIND "${_real_simpler_dir}" "${_real_prefix}/" _pos)
if(NOT _pos EQUAL 0)
  message(FATAL_ERROR
    "RunPackageTest: consumer found simpler in '${_simpler_dir}', not under '${_prefix}'")
endif()

message(STATUS "RunPackageTest: building the consumer")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${_build}" ${_config_args}
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

# find_consumer(<var> <name>): the built consumer executable <name>, or "".
function(find_consumer var name)
  set(_found "")
  foreach(_candidate IN ITEMS
      "${_build}/${name}"
      "${_build}/${name}.exe"
      "${_build}/${CONFIG}/${name}"
      "${_build}/${CONFIG}/${name}.exe")
    if(EXISTS "${_candidate}" AND NOT IS_DIRECTORY "${_candidate}")
      set(_found "${_candidate}")
      break()
    endif()
  endforeach()
  set(${var} "${_found}" PARENT_SCOPE)
endfunction()

find_consumer(_exe simpler_package_consumer)
if(NOT _exe)
  message(FATAL_ERROR "RunPackageTest: consumer executable not found under ${_build}")
endif()

# simpler::mpi is exported exactly when the build has it.
find_consumer(_mpi_exe simpler_package_mpi_consumer)
if(WITH_MPI AND NOT _mpi_exe)
  message(FATAL_ERROR "RunPackageTest: simpler was built with SIMPLER_WITH_MPI, but the consumer "
                      "did not find simpler::mpi in the installed package")
elseif(NOT WITH_MPI AND _mpi_exe)
  message(FATAL_ERROR "RunPackageTest: simpler was built without MPI, but the installed package "
                      "exports simpler::mpi")
endif()

# The consumer's own kernel and orchestration on the installed simulated device.
find_consumer(_chip_exe simpler_package_chip_consumer)
if(NOT _chip_exe)
  message(FATAL_ERROR "RunPackageTest: chip consumer executable not found under ${_build}")
endif()

foreach(_program IN ITEMS "${_exe}" "${_chip_exe}")
  message(STATUS "RunPackageTest: running ${_program}")
  execute_process(
    COMMAND "${_program}"
    COMMAND_ECHO STDOUT
    COMMAND_ERROR_IS_FATAL ANY)
endforeach()

message(STATUS "RunPackageTest: OK")
