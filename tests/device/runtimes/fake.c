/* A working fake device runtime (test_runtime_fake.so): see fake_runtime.h. */
#include "fake_runtime.h"
