/* A fake device runtime built against another device ABI version: ChipWorker must refuse it. */
#define FAKE_ABI_VERSION (SIMPLER_DEVICE_ABI_VERSION + 41u)
#include "fake_runtime.h"
