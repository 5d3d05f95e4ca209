/* A fake device runtime whose simpler_init always fails with a message. */
#define FAKE_INIT_FAILS 1
#include "fake_runtime.h"
