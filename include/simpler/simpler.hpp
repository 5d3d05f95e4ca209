// simpler — umbrella header: everything a user of the runtime needs.
#pragma once

#include "simpler/args_blob.hpp"
#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/leaf/sub_worker.hpp"
#include "simpler/options.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/scheduler.hpp"
#include "simpler/task_args.hpp"
#include "simpler/transport/fork_shm_transport.hpp"
#include "simpler/transport/thread_transport.hpp"
#include "simpler/transport/transport.hpp"
#include "simpler/types.hpp"
#include "simpler/worker.hpp"
#include "simpler/worker_thread.hpp"
