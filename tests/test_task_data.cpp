// Tests for the task data types: ContinuousTensor, make_tensor/validate, TaskArgs, TaskArgsView,
// CallConfig and callable digests.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/callable.hpp"
#include "simpler/error.hpp"
#include "simpler/task_args.hpp"
#include "simpler/types.hpp"
#include "support/matchers.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_task_data {

using simpler::CallableHandle;
using simpler::CallableKind;
using simpler::CallConfig;
using simpler::ContinuousTensor;
using simpler::DataType;
using simpler::TaskArgs;
using simpler::TaskArgsView;
using simpler::TensorArgType;
using simpler::UsageError;

namespace {

using simpler::testing::WhatContains;

// A read-only, never-touched anonymous mapping: address space for spans too long to back with
// real memory.
class ReservedRange {
 public:
  explicit ReservedRange(std::size_t bytes) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : p;
  }
  ~ReservedRange() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }
  ReservedRange(const ReservedRange&) = delete;
  ReservedRange& operator=(const ReservedRange&) = delete;
  [[nodiscard]] const std::uint8_t* data() const noexcept {
    return static_cast<const std::uint8_t*>(base_);
  }

 private:
  std::size_t bytes_;
  void* base_ = nullptr;
};

bool same_bytes(const ContinuousTensor& a, const ContinuousTensor& b) {
  return std::memcmp(&a, &b, sizeof(ContinuousTensor)) == 0;
}

// A distinct, valid tensor per index (addresses are never dereferenced).
ContinuousTensor tensor_n(std::uint32_t n) {
  ContinuousTensor t;
  t.data = 0x10000 + std::uint64_t{n} * 0x1000;
  t.ndims = 2;
  t.shapes[0] = n + 1;
  t.shapes[1] = 3;
  t.dtype = DataType::Int32;
  return t;
}

TensorArgType tag_n(std::uint32_t n) {
  return static_cast<TensorArgType>(n % 5);
}

TaskArgs make_args(std::uint32_t tensors, std::uint32_t scalars) {
  TaskArgs a;
  for (std::uint32_t i = 0; i < tensors; ++i) a.add_tensor(tensor_n(i), tag_n(i));
  for (std::uint32_t i = 0; i < scalars; ++i) a.add_scalar(0xABC00000ULL + i);
  return a;
}

void check_args(const TaskArgs& a, std::uint32_t tensors, std::uint32_t scalars) {
  REQUIRE(a.tensor_count() == static_cast<std::int32_t>(tensors));
  REQUIRE(a.scalar_count() == static_cast<std::int32_t>(scalars));
  for (std::uint32_t i = 0; i < tensors; ++i) {
    const auto idx = static_cast<std::int32_t>(i);
    CHECK(same_bytes(a.tensor(idx), tensor_n(i)));
    CHECK(a.tag(idx) == tag_n(i));
  }
  for (std::uint32_t i = 0; i < scalars; ++i) {
    CHECK(a.scalar(static_cast<std::int32_t>(i)) == 0xABC00000ULL + i);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ContinuousTensor layout and DataType
// ---------------------------------------------------------------------------------------------

TEST_CASE("a ContinuousTensor is 40 bytes with its fields at fixed offsets", "[task-data]") {
  STATIC_REQUIRE(sizeof(ContinuousTensor) == 40);
  STATIC_REQUIRE(offsetof(ContinuousTensor, data) == 0);
  STATIC_REQUIRE(offsetof(ContinuousTensor, shapes) == 8);
  STATIC_REQUIRE(offsetof(ContinuousTensor, ndims) == 28);
  STATIC_REQUIRE(offsetof(ContinuousTensor, dtype) == 32);
  STATIC_REQUIRE(offsetof(ContinuousTensor, child_memory) == 33);
  STATIC_REQUIRE(sizeof(TaskArgsView) == 24);
}

TEST_CASE("a default ContinuousTensor is all zero bytes", "[task-data]") {
  const ContinuousTensor t;
  std::array<unsigned char, sizeof(ContinuousTensor)> bytes{};
  std::memcpy(bytes.data(), &t, sizeof t);
  for (unsigned char b : bytes) CHECK(b == 0);
}

TEST_CASE("DataType values are the ABI numbers 0 to 8 with their element sizes", "[task-data]") {
  struct Row {
    DataType t;
    unsigned value;
    std::size_t size;
    const char* name;
  };
  const std::array<Row, 9> rows{{
      {DataType::Float32, 0, 4, "Float32"},
      {DataType::Float16, 1, 2, "Float16"},
      {DataType::Int32, 2, 4, "Int32"},
      {DataType::Int16, 3, 2, "Int16"},
      {DataType::Int8, 4, 1, "Int8"},
      {DataType::UInt8, 5, 1, "UInt8"},
      {DataType::BFloat16, 6, 2, "BFloat16"},
      {DataType::Int64, 7, 8, "Int64"},
      {DataType::UInt64, 8, 8, "UInt64"},
  }};
  STATIC_REQUIRE(simpler::kDataTypeCount == 9);
  for (const Row& r : rows) {
    INFO(r.name);
    CHECK(static_cast<unsigned>(r.t) == r.value);
    CHECK(simpler::element_size(r.t) == r.size);
    CHECK(simpler::is_valid(r.t));
    CHECK(std::string_view(simpler::to_string(r.t)) == r.name);
  }
}

TEST_CASE("a value outside the DataType enum has element size 0 and is not valid", "[task-data]") {
  for (unsigned v : {9u, 42u, 200u, 255u}) {
    const auto t = static_cast<DataType>(v);
    INFO("value " << v);
    CHECK(simpler::element_size(t) == 0);
    CHECK_FALSE(simpler::is_valid(t));
    CHECK(std::string_view(simpler::to_string(t)) == "unknown");
  }
}

// ---------------------------------------------------------------------------------------------
// make_tensor / validate / nbytes
// ---------------------------------------------------------------------------------------------

TEST_CASE("make_tensor over a span is 1-D and takes its dtype from the element type",
          "[task-data]") {
  std::array<float, 7> f{};
  const ContinuousTensor tf = simpler::make_tensor(std::span<float>(f));
  CHECK(tf.dtype == DataType::Float32);
  CHECK(tf.ndims == 1);
  CHECK(tf.shapes[0] == 7);
  for (std::uint32_t i = 1; i < simpler::kMaxTensorDims; ++i) CHECK(tf.shapes[i] == 0);
  CHECK(tf.ptr() == f.data());
  CHECK(tf.as<float>() == f.data());
  CHECK(tf.nbytes() == 28);
  CHECK(tf.child_memory == 0);

  std::array<std::int64_t, 3> i64{};
  const ContinuousTensor ti = simpler::make_tensor(std::span<std::int64_t>(i64));
  CHECK(ti.dtype == DataType::Int64);
  CHECK(ti.nbytes() == 24);

  const std::array<std::uint8_t, 5> u8{};
  const ContinuousTensor tu = simpler::make_tensor(std::span<const std::uint8_t>(u8));
  CHECK(tu.dtype == DataType::UInt8);
  CHECK(tu.ptr() == u8.data());
  CHECK(tu.nbytes() == 5);

  std::array<std::int16_t, 4> i16{};
  CHECK(simpler::make_tensor(std::span<std::int16_t>(i16)).dtype == DataType::Int16);
  std::array<std::int32_t, 4> i32{};
  CHECK(simpler::make_tensor(std::span<std::int32_t>(i32)).dtype == DataType::Int32);
  std::array<std::int8_t, 4> i8{};
  CHECK(simpler::make_tensor(std::span<std::int8_t>(i8)).dtype == DataType::Int8);
  std::array<std::uint64_t, 4> u64{};
  CHECK(simpler::make_tensor(std::span<std::uint64_t>(u64)).dtype == DataType::UInt64);
}

TEST_CASE("make_tensor with a shape list fills the extents and zeroes the rest", "[task-data]") {
  alignas(8) std::array<std::byte, 64> buf{};
  const ContinuousTensor t = simpler::make_tensor(buf.data(), {2, 3, 4}, DataType::Int16);
  CHECK(t.data == reinterpret_cast<std::uintptr_t>(buf.data()));
  CHECK(t.ndims == 3);
  CHECK(t.shapes[0] == 2);
  CHECK(t.shapes[1] == 3);
  CHECK(t.shapes[2] == 4);
  CHECK(t.shapes[3] == 0);
  CHECK(t.shapes[4] == 0);
  CHECK(t.dtype == DataType::Int16);
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 48);

  const ContinuousTensor five = simpler::make_tensor(buf.data(), {1, 2, 3, 4, 5}, DataType::UInt64);
  CHECK(five.ndims == 5);
  CHECK(five.numel() == 120);
  CHECK(five.nbytes() == 960);

  const std::array<std::uint32_t, 2> shape{6, 7};
  const ContinuousTensor s =
      simpler::make_tensor(nullptr, std::span<const std::uint32_t>(shape), DataType::BFloat16);
  CHECK(s.data == 0);
  CHECK(s.ndims == 2);
  CHECK(s.nbytes() == 84);
}

TEST_CASE("make_tensor with 0 or 6 dimensions throws a UsageError about dimensions",
          "[task-data]") {
  int x = 0;
  const std::span<const std::uint32_t> none;
  REQUIRE_THROWS_MATCHES(simpler::make_tensor(&x, none, DataType::Int32), UsageError,
                         WhatContains("dimensions"));
  REQUIRE_THROWS_MATCHES(simpler::make_tensor(&x, {1, 1, 1, 1, 1, 1}, DataType::Int32), UsageError,
                         WhatContains("dimensions"));
}

TEST_CASE("make_tensor with an unknown dtype throws a UsageError about the dtype", "[task-data]") {
  int x = 0;
  REQUIRE_THROWS_MATCHES(simpler::make_tensor(&x, {4}, static_cast<DataType>(42)), UsageError,
                         WhatContains("dtype"));
  REQUIRE_THROWS_MATCHES(simpler::make_tensor(&x, {4}, static_cast<DataType>(9)), UsageError,
                         WhatContains("dtype"));
}

TEST_CASE("make_tensor over a span of exactly 2^32-1 elements keeps the whole length",
          "[task-data]") {
  constexpr std::size_t kLen = std::numeric_limits<std::uint32_t>::max();
  const ReservedRange range(kLen);
  REQUIRE(range.data() != nullptr);
  const ContinuousTensor t =
      simpler::make_tensor(std::span<const std::uint8_t>(range.data(), kLen));
  CHECK(t.shapes[0] == kLen);
  CHECK(t.nbytes() == kLen);
}

TEST_CASE("make_tensor over a span longer than 2^32-1 elements is rejected, not truncated",
          "[task-data]") {
  // A 1-D extent is a uint32; a longer span cannot be described and must not silently become a
  // tensor over its first (size mod 2^32) elements.
  constexpr std::size_t kLen = (std::size_t{1} << 32) + 16;
  const ReservedRange range(kLen);
  REQUIRE(range.data() != nullptr);
  const std::span<const std::uint8_t> big(range.data(), kLen);
  ContinuousTensor t;
  CHECK_THROWS_AS(t = simpler::make_tensor(big), UsageError);
  INFO("make_tensor returned shapes[0] = " << t.shapes[0] << " for a span of " << kLen
                                           << " elements");
  CHECK(t.shapes[0] != 16);
}

TEST_CASE("a zero extent makes an empty tensor of 0 bytes", "[task-data]") {
  int x = 0;
  const ContinuousTensor t = simpler::make_tensor(&x, {3, 0, 5}, DataType::Float32);
  CHECK(t.numel() == 0);
  CHECK(t.nbytes() == 0);
}

TEST_CASE("validate accepts a well-formed tensor", "[task-data]") {
  CHECK_NOTHROW(simpler::validate(tensor_n(3)));
  ContinuousTensor t = tensor_n(0);
  t.data = 0;  // an Output awaiting auto-allocation
  CHECK_NOTHROW(simpler::validate(t));
}

TEST_CASE("validate rejects a non-zero extent past ndims", "[task-data]") {
  ContinuousTensor t = tensor_n(0);  // ndims 2
  t.shapes[2] = 7;
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("shapes[2]"));
  t.shapes[2] = 0;
  t.shapes[4] = 1;
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("shapes[4]"));
}

TEST_CASE("validate rejects ndims outside 1 to 5", "[task-data]") {
  ContinuousTensor t = tensor_n(0);
  t.ndims = 0;
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("ndims"));
  t.ndims = 6;
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("ndims"));
}

TEST_CASE("validate rejects a byte size past 64 bits and a range that wraps the address space",
          "[task-data]") {
  ContinuousTensor big;
  big.ndims = 3;
  big.shapes = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0};
  big.dtype = DataType::Int64;
  REQUIRE_THROWS_MATCHES(simpler::validate(big), UsageError, WhatContains("64 bits"));

  ContinuousTensor wrap;
  wrap.data = std::numeric_limits<std::uint64_t>::max() - 15;
  wrap.ndims = 1;
  wrap.shapes[0] = 8;
  wrap.dtype = DataType::Int32;  // 32 bytes from 2^64 - 16
  REQUIRE_THROWS_MATCHES(simpler::validate(wrap), UsageError, WhatContains("wraps"));
}

TEST_CASE("validate's size checks hold at their exact bounds and for every extent", "[task-data]") {
  // The largest byte size: 2^64 - 1 = 3 * 5 * 17 * 257 * 641 * 65537 * 6700417 (bytes of Int8).
  ContinuousTensor t;
  t.ndims = 5;
  t.dtype = DataType::Int8;
  t.shapes = {3 * 5 * 17, 257, 641, 65537, 6700417};
  CHECK_NOTHROW(simpler::validate(t));
  CHECK(t.nbytes() == std::numeric_limits<std::uint64_t>::max());
  // One byte more per element overflows, found at the last extent.
  t.dtype = DataType::Int16;
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("64 bits"));
  // An overflow before a zero extent is still an overflow; a zero before the big ones is not.
  t.dtype = DataType::Int64;
  t.shapes = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0, 1};
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("64 bits"));
  t.shapes = {0, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 1};
  CHECK_NOTHROW(simpler::validate(t));
  // Extents past ndims are not multiplied in, and any of them non-zero is reported first.
  t.ndims = 1;
  t.shapes = {4, 0, 0, 0, 0};
  CHECK_NOTHROW(simpler::validate(t));
  CHECK(t.nbytes() == 32);
  t.shapes = {0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0, 0};  // would overflow if it counted
  REQUIRE_THROWS_MATCHES(simpler::validate(t), UsageError, WhatContains("shapes[1]"));

  // The range may end exactly at the top of the address space, not one byte past it.
  ContinuousTensor top;
  top.ndims = 1;
  top.dtype = DataType::UInt8;
  top.shapes[0] = 16;
  top.data = std::numeric_limits<std::uint64_t>::max() - 16;  // last byte at 2^64 - 2
  CHECK_NOTHROW(simpler::validate(top));
  top.data += 1;  // its end would be 2^64, past the address space
  REQUIRE_THROWS_MATCHES(simpler::validate(top), UsageError, WhatContains("wraps"));
}

// ---------------------------------------------------------------------------------------------
// TaskArgs / TaskArgsView
// ---------------------------------------------------------------------------------------------

TEST_CASE("a tensor added after a scalar is rejected and nothing is added", "[task-data]") {
  TaskArgs a;
  a.add_tensor(tensor_n(0));
  a.add_scalar(5);
  REQUIRE_THROWS_MATCHES(a.add_tensor(tensor_n(1)), UsageError, WhatContains("scalar"));
  CHECK(a.tensor_count() == 1);
  CHECK(a.scalar_count() == 1);
}

TEST_CASE("a tensor with a tag outside TensorArgType is rejected and nothing is added",
          "[task-data]") {
  TaskArgs a;
  REQUIRE_THROWS_MATCHES(a.add_tensor(tensor_n(0), static_cast<TensorArgType>(5)), UsageError,
                         WhatContains("tag"));
  REQUIRE_THROWS_MATCHES(a.add_tensor(tensor_n(0), static_cast<TensorArgType>(-1)), UsageError,
                         WhatContains("tag"));
  CHECK(a.tensor_count() == 0);
}

TEST_CASE("a malformed tensor is rejected by add_tensor and nothing is added", "[task-data]") {
  TaskArgs a;
  ContinuousTensor bad = tensor_n(0);
  bad.ndims = 0;
  REQUIRE_THROWS_AS(a.add_tensor(bad), UsageError);
  CHECK(a.tensor_count() == 0);
}

TEST_CASE("add_tensor defaults the tag to Input and keeps explicit tags", "[task-data]") {
  TaskArgs a;
  a.add_tensor(tensor_n(0)).add_tensor(tensor_n(1), TensorArgType::Output).add_scalar(9);
  CHECK(a.tag(0) == TensorArgType::Input);
  CHECK(a.tag(1) == TensorArgType::Output);
  CHECK(a.scalar(0) == 9);
}

TEST_CASE("TaskArgs accessors throw on an out-of-range index", "[task-data]") {
  const TaskArgs a = make_args(2, 2);
  REQUIRE_THROWS_AS(a.tensor(2), UsageError);
  REQUIRE_THROWS_AS(a.tensor(-1), UsageError);
  REQUIRE_THROWS_AS(a.scalar(2), UsageError);
  REQUIRE_THROWS_AS(a.scalar(-1), UsageError);
  REQUIRE_THROWS_AS(a.tag(2), UsageError);
  REQUIRE_THROWS_AS(a.tag(-1), UsageError);
  CHECK_NOTHROW(a.tensor(1));
  CHECK_NOTHROW(a.scalar(1));
  CHECK_NOTHROW(a.tag(1));
}

TEST_CASE("set_tag changes one tag and rejects a bad index or tag", "[task-data]") {
  TaskArgs a = make_args(3, 0);
  a.set_tag(1, TensorArgType::NoDep);
  CHECK(a.tag(0) == tag_n(0));
  CHECK(a.tag(1) == TensorArgType::NoDep);
  CHECK(a.tag(2) == tag_n(2));
  REQUIRE_THROWS_AS(a.set_tag(3, TensorArgType::Input), UsageError);
  REQUIRE_THROWS_AS(a.set_tag(-1, TensorArgType::Input), UsageError);
  REQUIRE_THROWS_MATCHES(a.set_tag(0, static_cast<TensorArgType>(17)), UsageError,
                         WhatContains("tag"));
  CHECK(a.tag(0) == tag_n(0));
}

TEST_CASE("view() reports the counts and points at the stored tensors and scalars", "[task-data]") {
  const TaskArgs a = make_args(3, 2);
  const TaskArgsView v = a.view();
  CHECK(v.tensor_count == 3);
  CHECK(v.scalar_count == 2);
  for (std::int32_t i = 0; i < 3; ++i) CHECK(v.tensors + i == &a.tensor(i));
  CHECK(v.scalars[0] == a.scalar(0));
  CHECK(v.scalars[1] == a.scalar(1));
  CHECK(&v.tensor(2) == &a.tensor(2));
  CHECK(v.scalar(1) == 0xABC00001ULL);

  const TaskArgs empty;
  const TaskArgsView e = empty.view();
  CHECK(e.tensor_count == 0);
  CHECK(e.scalar_count == 0);
}

TEST_CASE("TaskArgs keeps every value when it spills past its 4 inline tensors and scalars",
          "[task-data]") {
  const TaskArgs a = make_args(11, 13);
  check_args(a, 11, 13);
  const TaskArgsView v = a.view();
  for (std::uint32_t i = 0; i < 11; ++i) CHECK(same_bytes(v.tensors[i], tensor_n(i)));
  for (std::uint32_t i = 0; i < 13; ++i) CHECK(v.scalars[i] == 0xABC00000ULL + i);
}

TEST_CASE("clear() empties TaskArgs and lets tensors be added again", "[task-data]") {
  TaskArgs a = make_args(6, 6);
  a.clear();
  CHECK(a.tensor_count() == 0);
  CHECK(a.scalar_count() == 0);
  a.add_tensor(tensor_n(7), TensorArgType::InOut);  // no scalar left to block it
  CHECK(a.tensor_count() == 1);
  CHECK(a.tag(0) == TensorArgType::InOut);
}

TEST_CASE("copying TaskArgs preserves contents, inline and spilled, and is independent",
          "[task-data]") {
  for (std::uint32_t n : {0u, 3u, 4u, 5u, 9u}) {
    INFO("tensors and scalars: " << n);
    TaskArgs src = make_args(n, n);

    TaskArgs copy(src);
    check_args(copy, n, n);
    if (n > 0) CHECK(copy.view().tensors != src.view().tensors);

    TaskArgs assigned = make_args(7, 1);  // spilled target
    assigned = src;
    check_args(assigned, n, n);

    TaskArgs small = make_args(1, 0);  // inline target
    small = src;
    check_args(small, n, n);

    // The copies do not share storage with the source.
    src.clear();
    src.add_tensor(tensor_n(99));
    check_args(copy, n, n);
    check_args(assigned, n, n);
  }
}

TEST_CASE("moving TaskArgs preserves contents, inline and spilled", "[task-data]") {
  for (std::uint32_t n : {0u, 2u, 4u, 5u, 10u}) {
    INFO("tensors and scalars: " << n);
    TaskArgs src = make_args(n, n);
    TaskArgs moved(std::move(src));
    check_args(moved, n, n);

    TaskArgs target = make_args(8, 8);
    target = std::move(moved);
    check_args(target, n, n);

    TaskArgs inline_target = make_args(1, 1);
    inline_target = std::move(target);
    check_args(inline_target, n, n);

    // A moved-from TaskArgs can be cleared and reused.
    src.clear();
    src.add_tensor(tensor_n(1)).add_scalar(2);
    CHECK(src.tensor_count() == 1);
    CHECK(src.scalar(0) == 2);
  }
}

TEST_CASE("TaskArgsView bounds-checks tensor() and scalar()", "[task-data]") {
  const std::array<ContinuousTensor, 2> ts{tensor_n(0), tensor_n(1)};
  const std::array<std::uint64_t, 1> ss{77};
  TaskArgsView v;
  v.tensor_count = 2;
  v.scalar_count = 1;
  v.tensors = ts.data();
  v.scalars = ss.data();
  CHECK(&v.tensor(0) == &ts[0]);
  CHECK(&v.tensor(1) == &ts[1]);
  CHECK(v.scalar(0) == 77);
  REQUIRE_THROWS_MATCHES(v.tensor(2), UsageError, WhatContains("2 tensors"));
  REQUIRE_THROWS_AS(v.tensor(-1), UsageError);
  REQUIRE_THROWS_MATCHES(v.scalar(1), UsageError, WhatContains("1 scalars"));
  REQUIRE_THROWS_AS(v.scalar(-1), UsageError);

  const TaskArgsView empty;
  REQUIRE_THROWS_AS(empty.tensor(0), UsageError);
  REQUIRE_THROWS_AS(empty.scalar(0), UsageError);
}

// ---------------------------------------------------------------------------------------------
// CallConfig
// ---------------------------------------------------------------------------------------------

TEST_CASE("a default CallConfig is valid and wants no diagnostics", "[task-data]") {
  const CallConfig c;
  CHECK_NOTHROW(c.validate());
  CHECK_FALSE(c.wants_diagnostics());
  CHECK(c.aicpu_thread_num == 3);
}

TEST_CASE("a CallConfig with a negative block_dim is rejected naming block_dim", "[task-data]") {
  CallConfig c;
  c.block_dim = -1;
  REQUIRE_THROWS_MATCHES(c.validate(), UsageError, WhatContains("block_dim"));
  c.block_dim = 24;
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("a CallConfig with a negative aicpu_thread_num is rejected naming it", "[task-data]") {
  CallConfig c;
  c.aicpu_thread_num = -2;
  REQUIRE_THROWS_MATCHES(c.validate(), UsageError, WhatContains("aicpu_thread_num"));
}

TEST_CASE("a CallConfig with swimlane level 5 is rejected naming enable_l2_swimlane",
          "[task-data]") {
  CallConfig c;
  std::memcpy(c.output_prefix.data(), "/tmp/out", 9);
  c.enable_l2_swimlane = 5;
  REQUIRE_THROWS_MATCHES(c.validate(), UsageError, WhatContains("enable_l2_swimlane"));
  c.enable_l2_swimlane = -1;
  REQUIRE_THROWS_MATCHES(c.validate(), UsageError, WhatContains("enable_l2_swimlane"));
  c.enable_l2_swimlane = 4;
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("a CallConfig with diagnostics but no output_prefix is rejected naming output_prefix",
          "[task-data]") {
  CallConfig c;
  c.enable_pmu = 1;
  CHECK(c.wants_diagnostics());
  REQUIRE_THROWS_MATCHES(c.validate(), UsageError, WhatContains("output_prefix"));

  CallConfig d;
  d.enable_dump_tensor = 1;
  REQUIRE_THROWS_MATCHES(d.validate(), UsageError, WhatContains("output_prefix"));
  CallConfig g;
  g.enable_dep_gen = 1;
  REQUIRE_THROWS_MATCHES(g.validate(), UsageError, WhatContains("output_prefix"));
}

TEST_CASE("a CallConfig whose output_prefix has no NUL is rejected naming output_prefix",
          "[task-data]") {
  CallConfig c;
  c.output_prefix.fill('a');
  REQUIRE_THROWS_MATCHES(c.validate(), UsageError, WhatContains("output_prefix"));
  c.output_prefix.back() = '\0';  // 1023 characters and a terminator
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("a CallConfig with diagnostics and an output_prefix is valid", "[task-data]") {
  CallConfig c;
  c.enable_pmu = 1;
  c.enable_l2_swimlane = 2;
  const std::string_view dir = "/tmp/simpler-diag";
  std::memcpy(c.output_prefix.data(), dir.data(), dir.size());
  CHECK(c.wants_diagnostics());
  CHECK_NOTHROW(c.validate());
}

// ---------------------------------------------------------------------------------------------
// Callables
// ---------------------------------------------------------------------------------------------

TEST_CASE("callable_digest is deterministic and depends on both kind and name", "[task-data]") {
  using simpler::callable_digest;
  CHECK(callable_digest(CallableKind::Sub, "matmul") ==
        callable_digest(CallableKind::Sub, "matmul"));
  const std::string owned = "mat" + std::string("mul");
  CHECK(callable_digest(CallableKind::Sub, owned) == callable_digest(CallableKind::Sub, "matmul"));

  CHECK(callable_digest(CallableKind::Sub, "matmul") !=
        callable_digest(CallableKind::Orch, "matmul"));
  CHECK(callable_digest(CallableKind::Sub, "matmul") !=
        callable_digest(CallableKind::Chip, "matmul"));
  CHECK(callable_digest(CallableKind::Orch, "matmul") !=
        callable_digest(CallableKind::Chip, "matmul"));
  CHECK(callable_digest(CallableKind::Sub, "matmul") !=
        callable_digest(CallableKind::Sub, "matmu1"));
  CHECK(callable_digest(CallableKind::Sub, "a") != callable_digest(CallableKind::Sub, "b"));
  CHECK(callable_digest(CallableKind::Sub, "") !=
        callable_digest(CallableKind::Sub, std::string_view("\0", 1)));
}

TEST_CASE("callable_digest is never 0 and distinct over many names", "[task-data]") {
  std::set<std::uint64_t> seen;
  std::size_t computed = 0;
  for (CallableKind k : {CallableKind::Sub, CallableKind::Orch, CallableKind::Chip}) {
    CHECK(simpler::callable_digest(k, "") != 0);
    seen.insert(simpler::callable_digest(k, ""));
    ++computed;
    for (int i = 0; i < 2000; ++i) {
      const std::string name = "kernel_" + std::to_string(i);
      const std::uint64_t d = simpler::callable_digest(k, name);
      CHECK(d != 0);
      seen.insert(d);
      ++computed;
    }
  }
  CHECK(seen.size() == computed);
}

TEST_CASE("a default CallableHandle is not valid", "[task-data]") {
  const CallableHandle h;
  CHECK_FALSE(h.valid());
  CHECK(h == CallableHandle{});
  CallableHandle owned;
  owned.owner = 1;
  CHECK(owned.valid());
  CHECK_FALSE(owned == h);
  CHECK(std::string_view(simpler::to_string(CallableKind::Sub)) == "sub");
  CHECK(std::string_view(simpler::to_string(CallableKind::Orch)) == "orch");
  CHECK(std::string_view(simpler::to_string(CallableKind::Chip)) == "chip");
}

}  // namespace simpler_test_task_data
