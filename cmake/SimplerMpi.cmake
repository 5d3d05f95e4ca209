# Running MPI programs under ctest (included by the top-level CMakeLists.txt when SIMPLER_WITH_MPI).
#
# Defines, for tests/ and bench/:
#
#   SIMPLER_MPIRUN_COMMAND        ;-list: mpirun and the flags every job of ours uses (one host,
#                                 TCP over loopback, oversubscribed, unbound, allowed as root),
#                                 without -np: `${SIMPLER_MPIRUN_COMMAND} -np 3 ./app args...`.
#   SIMPLER_MPI_TEST_ENVIRONMENT  ;-list of VAR=value for ctest's ENVIRONMENT property (the same
#                                 settings as OMPI_* variables, plus ASAN_OPTIONS in ASan builds).
#   SIMPLER_MPI_TEST_SUPPORTED    TRUE when mpirun is Open MPI's (the flags above are Open MPI's).
#
#   simpler_add_mpi_test(NAME <ctest name> TARGET <executable target> NP <ranks>
#                        [ARGS <arg>...] [TIMEOUT <seconds>] [LABELS <label>...])
#     Registers a ctest that runs `timeout -k 10 <TIMEOUT> ${SIMPLER_MPIRUN_COMMAND} -np <ranks>
#     <target file> <args>...`: coreutils timeout is the watchdog, so a hung job gets SIGTERM (mpirun
#     then kills its ranks) and SIGKILL 10 s later, before ctest's own timeout (which would kill only
#     the wrapper and orphan mpirun) can fire. Label `mpi`, run serially. TIMEOUT defaults to 60.
#
#   simpler_target_mpirun_command(<target>)
#     Gives <target> SIMPLER_MPIRUN_ARGV, a comma-separated list of string literals (the words of
#     SIMPLER_MPIRUN_COMMAND) for a C++ test that launches mpirun itself:
#       const char* argv[] = {SIMPLER_MPIRUN_ARGV, "-np", "3", exe, nullptr};

include_guard(GLOBAL)

if(NOT SIMPLER_WITH_MPI)
  message(FATAL_ERROR "SimplerMpi.cmake is for builds with SIMPLER_WITH_MPI=ON")
endif()

set(SIMPLER_MPI_TEST_SUPPORTED FALSE)
if(NOT MPIEXEC_EXECUTABLE)
  message(WARNING
    "simpler: MPI was found but not mpiexec/mpirun (Debian package openmpi-bin); the MPI tests "
    "and benchmarks are not registered.")
else()
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version
    OUTPUT_VARIABLE _simpler_mpiexec_version ERROR_QUIET RESULT_VARIABLE _simpler_mpiexec_rc)
  if(_simpler_mpiexec_rc EQUAL 0 AND _simpler_mpiexec_version MATCHES "Open MPI|OpenRTE")
    set(SIMPLER_MPI_TEST_SUPPORTED TRUE)
  else()
    message(WARNING
      "simpler: ${MPIEXEC_EXECUTABLE} is not Open MPI's mpirun; the MPI tests and benchmarks use "
      "Open MPI's flags and are not registered.")
  endif()
endif()

find_program(SIMPLER_TIMEOUT_EXECUTABLE timeout)
if(SIMPLER_MPI_TEST_SUPPORTED AND NOT SIMPLER_TIMEOUT_EXECUTABLE)
  message(WARNING "simpler: coreutils `timeout` not found; the MPI tests are not registered.")
  set(SIMPLER_MPI_TEST_SUPPORTED FALSE)
endif()

# One host, TCP only (the transport CI must exercise; no shared-memory BTL) and over loopback only,
# for MPI traffic and for mpirun's out-of-band channel alike, so no other interface is ever tried;
# as many ranks as asked whatever the core count, and no binding (ranks and their forked children
# share the cores). And no hardware topology shared through memory mapped at a hole the daemon
# picks in its address space (rtc_hwloc_vmhole): Open MPI 4.1.4's orted segfaulted there
# (hwloc_shmem_topology_write) in about one of thirty three-host jobs of the network-namespace
# tests under load, and a daemonized orted that dies leaves mpirun waiting with no output.
set(SIMPLER_MPIRUN_COMMAND
  "${MPIEXEC_EXECUTABLE}"
  --allow-run-as-root
  --oversubscribe
  --bind-to none
  --mca btl self,tcp
  --mca btl_tcp_if_include lo
  --mca oob_tcp_if_include lo
  --mca rtc_hwloc_vmhole none)

# CI runs as root: Open MPI refuses that unless told twice (--allow-run-as-root above does the same,
# the variables also cover an mpirun a test starts without our flags).
set(SIMPLER_MPI_TEST_ENVIRONMENT
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1
  # No "unused component" warnings on hosts with InfiniBand/verbs devices we do not use.
  OMPI_MCA_btl_base_warn_component_unused=0)
# Open MPI does not free everything at exit; LeakSanitizer would fail every rank. This replaces the
# asan test preset's ASAN_OPTIONS for MPI tests, so keep its other option.
if("address" IN_LIST SIMPLER_SANITIZE)
  list(APPEND SIMPLER_MPI_TEST_ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
endif()

function(simpler_add_mpi_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;TARGET;NP;TIMEOUT" "ARGS;LABELS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "simpler_add_mpi_test: unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  foreach(_required IN ITEMS NAME TARGET NP)
    if(NOT arg_${_required})
      message(FATAL_ERROR "simpler_add_mpi_test: ${_required} is required")
    endif()
  endforeach()
  if(NOT TARGET ${arg_TARGET})
    message(FATAL_ERROR "simpler_add_mpi_test: '${arg_TARGET}' is not a target")
  endif()
  if(NOT SIMPLER_MPI_TEST_SUPPORTED)
    return()
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 60)
  endif()

  add_test(NAME ${arg_NAME}
    COMMAND "${SIMPLER_TIMEOUT_EXECUTABLE}" -k 10 ${arg_TIMEOUT}
      ${SIMPLER_MPIRUN_COMMAND} -np ${arg_NP} "$<TARGET_FILE:${arg_TARGET}>" ${arg_ARGS})
  # ctest's timeout is a backstop only: the watchdog above ends the job first.
  math(EXPR _ctest_timeout "${arg_TIMEOUT} + 30")
  set(_labels mpi ${arg_LABELS})
  set_tests_properties(${arg_NAME} PROPERTIES
    ENVIRONMENT "${SIMPLER_MPI_TEST_ENVIRONMENT}"
    TIMEOUT ${_ctest_timeout}
    LABELS "${_labels}"
    RUN_SERIAL TRUE)
endfunction()

function(simpler_target_mpirun_command target)
  set(_argv "")
  foreach(_word IN LISTS SIMPLER_MPIRUN_COMMAND)
    list(APPEND _argv "\"${_word}\"")
  endforeach()
  list(JOIN _argv "," _argv)
  target_compile_definitions(${target} PRIVATE "SIMPLER_MPIRUN_ARGV=${_argv}")
endfunction()
