// The second translation unit of the ODR check (see tu_a.cpp).
#include <simpler/simpler.hpp>

#include "tu.hpp"

namespace odr {

Identity identity_b() {
  return {&simpler::default_call_config(), simpler::detail::closed_list(),
          simpler::callable_digest(simpler::CallableKind::Sub, "x")};
}

long run_b() {
  simpler::WorkerOptions o;
  o.num_sub_workers = 1;
  o.child_mode = simpler::ChildMode::Thread;  // the sum lives in this process
  simpler::Worker w(o);
  long sum = 0;
  const auto add = w.register_sub(
      "add", [&](simpler::TaskArgsView v) { sum += static_cast<long>(v.scalar(0)); });
  w.init();
  w.run([&](simpler::Orchestrator& orc, simpler::TaskArgsView, const simpler::CallConfig&) {
    for (std::uint64_t i = 1; i <= 20; ++i) orc.submit_sub(add, simpler::TaskArgs().add_scalar(i));
  });
  w.close();
  return sum;
}

}  // namespace odr
