# Checks that the code in docs/guide.md is real: every line of its ```cpp and ```cmake blocks
# (leading and trailing blanks aside) is a line of a source file of the repository, except lines
# that mark an elision with "...". Run by ctest as `cmake -P CheckGuideSnippets.cmake`.
#
# Inputs (-D...): GUIDE (the guide's path), SOURCE_DIR (the repository root).

cmake_minimum_required(VERSION 3.25)

foreach(_var IN ITEMS GUIDE SOURCE_DIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "CheckGuideSnippets: ${_var} is not set")
  endif()
endforeach()

# lines_of(<out> <text>): the lines of <text> as a CMake list, with the characters lists treat
# specially (; [ ] \) replaced by placeholders.
function(lines_of out text)
  string(REPLACE "\\" "<BS>" text "${text}")
  string(REPLACE ";" "<SC>" text "${text}")
  string(REPLACE "[" "<LB>" text "${text}")
  string(REPLACE "]" "<RB>" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# Every stripped line of the sources the snippets may come from, between newlines.
file(GLOB_RECURSE _sources
  "${SOURCE_DIR}/examples/*.cpp"
  "${SOURCE_DIR}/device/*.cpp"
  "${SOURCE_DIR}/tests/package/*.cpp"
  "${SOURCE_DIR}/tests/package/CMakeLists.txt")
set(_corpus "\n")
foreach(_file IN LISTS _sources)
  file(READ "${_file}" _text)
  lines_of(_lines "${_text}")
  foreach(_line IN LISTS _lines)
    string(STRIP "${_line}" _line)
    string(APPEND _corpus "${_line}\n")
  endforeach()
endforeach()

file(READ "${GUIDE}" _guide)
lines_of(_guide_lines "${_guide}")
set(_in_code FALSE)
set(_checked 0)
set(_missing "")
set(_number 0)
foreach(_line IN LISTS _guide_lines)
  math(EXPR _number "${_number} + 1")
  string(STRIP "${_line}" _stripped)
  if(_stripped MATCHES "^```")
    if(_in_code)
      set(_in_code FALSE)
    elseif(_stripped MATCHES "^```(cpp|cmake)$")
      set(_in_code TRUE)
    endif()
    continue()
  endif()
  if(NOT _in_code OR _stripped STREQUAL "" OR _stripped MATCHES "\\.\\.\\.")
    continue()
  endif()
  math(EXPR _checked "${_checked} + 1")
  string(FIND "${_corpus}" "\n${_stripped}\n" _at)
  if(_at EQUAL -1)
    string(REPLACE "<BS>" "\\" _shown "${_stripped}")
    string(REPLACE "<SC>" ";" _shown "${_shown}")
    string(REPLACE "<LB>" "[" _shown "${_shown}")
    string(REPLACE "<RB>" "]" _shown "${_shown}")
    string(APPEND _missing "\n  line ${_number}: ${_shown}")
  endif()
endforeach()

if(_checked EQUAL 0)
  message(FATAL_ERROR "CheckGuideSnippets: no code line found in ${GUIDE}")
endif()
if(_missing)
  message(FATAL_ERROR "CheckGuideSnippets: these lines of ${GUIDE} are in no source file under "
                      "examples/, device/ or tests/package/ (copy snippets from code that "
                      "compiles, or mark an elision with \"...\"):${_missing}")
endif()
message(STATUS "CheckGuideSnippets: ${_checked} code lines, all found in the sources")
