// The fuzz targets' entry functions. Each takes one input, returns 0, and crashes (abort, or a
// sanitizer report) only when it finds a defect. The libFuzzer binaries (libfuzzer_main.cpp,
// built with the `fuzz` preset) and the regression test that replays tests/fuzz/corpus and
// tests/fuzz/regressions (tests/test_fuzz_regressions.cpp, built in every preset) both call them.
#pragma once

#include <cstddef>
#include <cstdint>

/// simpler::decode_args_blob on arbitrary bytes; what decodes must re-encode to the same bytes.
int simpler_fuzz_args_blob(const std::uint8_t* data, std::size_t size);

/// The child's side of a mailbox frame (simpler::detail::serve_frame) with the header fields and
/// the blob from the input; a malformed frame must fail the task with a message, never crash.
int simpler_fuzz_mailbox_frame(const std::uint8_t* data, std::size_t size);

/// The simulated device runtime: run arguments, run config and a fuzz_program orchestration
/// program (submits, alloc_tensor, read_tensor with any offsets and sizes) from the input. One
/// device context serves every input.
int simpler_fuzz_device(const std::uint8_t* data, std::size_t size);

/// The remote wire codec on a stream of frames (header, then payload), checked against the link
/// the first header sets up; what decodes must re-encode to the same bytes.
int simpler_fuzz_remote_frame(const std::uint8_t* data, std::size_t size);
