#pragma once
// Trace files: the requests a benchmark or the simulator replays, each with its arrival time and lengths, and
// where the trace has them, the ids of its prompt's blocks (which prompts share which prefixes).

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/status.hpp"

namespace illm::actors::frontend {

/// Tokens one hash id of a trace covers (Mooncake's traces: 512).
inline constexpr int trace_hash_block_tokens = 512;

/// One request of a trace.
struct trace_row {
  double arrival_s = 0;
  int input_tokens = 0;
  int output_tokens = 0;
  /// One id per trace_hash_block_tokens of the prompt (the last block may be partial), chained over the prefix: two
  /// prompts are equal up to the end of a block when their ids are equal up to it. Empty: the trace has none (the
  /// prompt shares nothing).
  std::vector<uint64_t> hash_ids;
};

/// Reads a trace: a CSV of arrival_s,input_tokens,output_tokens (header line first), or JSON lines as Mooncake's
/// traces have them ({"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}, the file's first
/// character `{`). Rows go in arrival order; a malformed line is an error naming it.
gpu::result<std::vector<trace_row>> read_trace(const std::string& path);

}  // namespace illm::actors::frontend
