#include "actors/frontend/trace_file.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

namespace illm::actors::frontend {

namespace {

using gpu::status;
using gpu::status_code;

status malformed(const std::string& path, int number, const std::string& what) {
  return {status_code::invalid_argument, fmt::format("trace {} line {}: {}", path, number, what)};
}

/// A CSV line: arrival_s,input_tokens,output_tokens.
gpu::result<trace_row> csv_row(const std::string& line) {
  std::istringstream s(line);
  trace_row r;
  char c1 = 0, c2 = 0;
  if (!(s >> r.arrival_s >> c1 >> r.input_tokens >> c2 >> r.output_tokens) || c1 != ',' || c2 != ',' ||
      !(s >> std::ws).eof() || r.arrival_s < 0 || r.input_tokens < 0 || r.output_tokens < 0)
    return status{status_code::invalid_argument, "expected arrival_s,input_tokens,output_tokens"};
  return r;
}

/// A JSON line: {"timestamp": ms, "input_length", "output_length", "hash_ids"}.
gpu::result<trace_row> json_row(const std::string& line) {
  const nlohmann::json j = gpu::parse_bounded_or_discarded(line, gpu::json_depth_outside_requests);
  const char* expected = "expected {\"timestamp\": ms, \"input_length\": n, \"output_length\": n, \"hash_ids\": [ids]}";
  if (!j.is_object() || !j.contains("timestamp") || !j["timestamp"].is_number() || !j.contains("input_length") ||
      !j["input_length"].is_number_integer() || !j.contains("output_length") || !j["output_length"].is_number_integer())
    return status{status_code::invalid_argument, expected};
  trace_row r;
  r.arrival_s = j["timestamp"].get<double>() / 1000.0;
  r.input_tokens = j["input_length"].get<int>();
  r.output_tokens = j["output_length"].get<int>();
  if (r.arrival_s < 0 || r.input_tokens < 0 || r.output_tokens < 0)
    return status{status_code::invalid_argument, "times and lengths cannot be negative"};
  if (j.contains("hash_ids")) {
    if (!j["hash_ids"].is_array()) return status{status_code::invalid_argument, expected};
    for (const auto& id : j["hash_ids"]) {
      if (!id.is_number_unsigned()) return status{status_code::invalid_argument, "hash_ids must be whole numbers"};
      r.hash_ids.push_back(id.get<uint64_t>());
    }
    const size_t blocks = (size_t(std::max(r.input_tokens, 0)) + trace_hash_block_tokens - 1) / trace_hash_block_tokens;
    if (r.hash_ids.size() != blocks)
      return status{status_code::invalid_argument,
                    fmt::format("{} hash_ids for {} input tokens ({} blocks of {})", r.hash_ids.size(), r.input_tokens,
                                blocks, trace_hash_block_tokens)};
  }
  return r;
}

}  // namespace

gpu::result<std::vector<trace_row>> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return status{status_code::io_error, fmt::format("cannot read trace {}", path)};
  const bool json_lines = (in >> std::ws).peek() == '{';
  std::vector<trace_row> rows;
  std::string line;
  int number = 0;
  if (!json_lines && std::getline(in, line)) ++number;  // the CSV's header
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    auto row = json_lines ? json_row(line) : csv_row(line);
    if (!row.is_ok()) return malformed(path, number, row.error().message());
    const trace_row& r = row.value();
    if (!rows.empty() && r.arrival_s < rows.back().arrival_s)
      return malformed(path, number,
                       fmt::format("arrival_s {} is before the line above's {} (rows go in arrival order)",
                                   r.arrival_s, rows.back().arrival_s));
    rows.push_back(std::move(row).value());
  }
  if (rows.empty()) return status{status_code::invalid_argument, fmt::format("trace {} has no rows", path)};
  return rows;
}

}  // namespace illm::actors::frontend
