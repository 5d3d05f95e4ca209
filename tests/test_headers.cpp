// The public headers work together and the models satisfy their concepts.
#include <simpler/fwd.hpp>
#include <simpler/simpler.hpp>

#include <catch2/catch.hpp>

#include "support/recording_leaf.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_headers {

namespace {
// A leaf missing callable_name: the Leaf concept must name what is missing.
struct NamelessLeaf {
  void run(const simpler::LeafRequest&) {}
};
}  // namespace

static_assert(simpler::Transport<simpler::ThreadTransport>);
static_assert(simpler::Leaf<simpler::SubWorker>);
static_assert(simpler::Leaf<simpler::testing::RecordingLeaf>);
static_assert(simpler::RunsTasks<NamelessLeaf>);
static_assert(!simpler::NamesCallables<NamelessLeaf>);
static_assert(!simpler::Leaf<NamelessLeaf>);
static_assert(!simpler::Transport<int>);

TEST_CASE("the umbrella header and the forward declarations compile together", "[headers]") {
  simpler::WorkerOptions o;
  CHECK(o.level == 3);
  CHECK(sizeof(simpler::ContinuousTensor) == 40);
}

TEST_CASE("local children are forked processes unless asked otherwise", "[headers]") {
  CHECK(simpler::WorkerOptions{}.child_mode == simpler::ChildMode::Process);
}

}  // namespace simpler_test_headers
