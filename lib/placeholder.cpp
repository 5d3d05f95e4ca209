// Placeholder: every part of the host library now lives in headers (include/simpler/...), but
// CMakeLists.txt still declares simpler::simpler as a STATIC library over lib/*.cpp, which needs
// at least one source to have a linker language. Delete this file when the target becomes an
// INTERFACE library.
#include "simpler/simpler.hpp"
