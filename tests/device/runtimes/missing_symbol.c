/* A fake device runtime that lacks simpler_run and simpler_wait_run: ChipWorker must name both. */
#define FAKE_OMIT_RUN 1
#include "fake_runtime.h"
