// Downstream consumer of an installed simpler package (see tests/package/CMakeLists.txt).
#include <simpler/simpler.hpp>

int main() {
  simpler::WorkerOptions opts;
  opts.num_sub_workers = 1;
  opts.child_mode = simpler::ChildMode::Thread;

  simpler::Worker w(opts);
  auto h = w.register_sub("one", [](simpler::TaskArgsView) {});
  w.init();
  w.run([&](simpler::Orchestrator& o, simpler::TaskArgsView, const simpler::CallConfig&) {
    o.submit_sub(h);
  });
  w.close();
  return 0;
}
