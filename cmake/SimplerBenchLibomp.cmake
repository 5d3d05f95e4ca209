# simpler_bench_libomp_helper(<helper_var> <reason_var>)
#
# Sets up bench_engine_libomp, bench_engine's libomp peer (bench/libomp/), as an external
# project configured with clang and -fopenmp=libomp: target bench_engine_libomp_build. Sets
# <helper_var> to the helper's path, or to "" and <reason_var> to why it is not built (no clang,
# or clang cannot build and link an OpenMP program against libomp). SIMPLER_BENCH_LIBOMP_CXX
# names the clang to use (default: the first of clang++-14, clang++ on the PATH).

include_guard(GLOBAL)
include(ExternalProject)

function(simpler_bench_libomp_helper helper_var reason_var)
  set(${helper_var} "" PARENT_SCOPE)
  find_program(SIMPLER_BENCH_LIBOMP_CXX NAMES clang++-14 clang++
    DOC "clang used to build bench_engine_libomp (the libomp peer of bench_engine)")
  if(NOT SIMPLER_BENCH_LIBOMP_CXX)
    set(${reason_var} "no clang++ found to build the libomp helper (Debian: clang-14 libomp-dev)"
      PARENT_SCOPE)
    return()
  endif()
  # Debian's clang-N finds its libomp in /usr/lib/llvm-N/lib, next to its own bin/.
  get_filename_component(_real "${SIMPLER_BENCH_LIBOMP_CXX}" REALPATH)
  get_filename_component(_bin "${_real}" DIRECTORY)
  get_filename_component(_libdir "${_bin}/../lib" ABSOLUTE)
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/libomp-check")
  file(MAKE_DIRECTORY "${_dir}")
  file(WRITE "${_dir}/check.cpp"
    "#include <omp.h>\nint main() {\n  int x = 0;\n#pragma omp parallel num_threads(2)\n"
    "#pragma omp single\n#pragma omp task depend(inout : x)\n  ++x;\n"
    "  return x == 1 && omp_get_max_threads() > 0 ? 0 : 1;\n}\n")
  execute_process(
    COMMAND "${SIMPLER_BENCH_LIBOMP_CXX}" -fopenmp=libomp "-L${_libdir}" "-Wl,-rpath,${_libdir}"
            check.cpp -o check
    WORKING_DIRECTORY "${_dir}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    # The compiler's words go to the configure log only: the reason becomes a C string literal
    # (no semicolons: it travels as one item of a CMake list).
    message(STATUS "simpler benchmarks: ${SIMPLER_BENCH_LIBOMP_CXX} -fopenmp=libomp: ${_out}")
    set(${reason_var}
      "${SIMPLER_BENCH_LIBOMP_CXX} -fopenmp=libomp cannot build and link an OpenMP program (see the configure log, Debian: libomp-dev)"
      PARENT_SCOPE)
    return()
  endif()
  set(_type "${CMAKE_BUILD_TYPE}")
  if(NOT _type)
    set(_type Release)
  endif()
  set(_bindir "${CMAKE_CURRENT_BINARY_DIR}/libomp")
  ExternalProject_Add(bench_engine_libomp_build
    SOURCE_DIR "${PROJECT_SOURCE_DIR}/bench/libomp"
    BINARY_DIR "${_bindir}"
    CMAKE_ARGS
      "-DCMAKE_CXX_COMPILER=${SIMPLER_BENCH_LIBOMP_CXX}"
      "-DCMAKE_BUILD_TYPE=${_type}"
      "-DSIMPLER_LIBOMP_DIR=${_libdir}"
    INSTALL_COMMAND ""
    BUILD_ALWAYS TRUE
    BUILD_BYPRODUCTS "${_bindir}/bench_engine_libomp")
  set(${helper_var} "${_bindir}/bench_engine_libomp" PARENT_SCOPE)
endfunction()
