// fuzz_seeds DIR: writes valid inputs of every fuzz target into DIR/TARGET/seed-N, the seed corpora that
// tests/fuzz/corpus keeps (messages encoded by the project's own encoders, a tiny checkpoint, request bodies).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <caf/all.hpp>

#include "actors/logic/attention_wire.hpp"
#include "actors/messages.hpp"
#include "gpu/checkpoint.hpp"
#include "gpu/weights.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace illm;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> text(char first, const std::string& body) {
  std::vector<uint8_t> out{uint8_t(first)};
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

void attention_wire(const fs::path& dir) {
  actors::attend decode_step;
  decode_step.tag = 7;
  decode_step.req_id = 3;
  decode_step.owner = 1;
  decode_step.layer = 2;
  decode_step.n_q = 1;
  decode_step.num_blocks = 3;
  decode_step.q.assign(8, 0.5f);
  decode_step.q_pos = {40};
  decode_step.logical_runs = actors::logical_runs({0, 1, 2});
  write(dir, "seed-decode-attend", actors::encode(decode_step));
  actors::attend chunk = decode_step;
  chunk.n_q = 2;
  chunk.q.assign(16, -0.25f);
  chunk.q_pos = {41, 42};
  chunk.blocks = {4, 5, 6};
  chunk.block_pos = {0, 16, 32};
  chunk.logical_runs.clear();
  chunk.forwards.push_back({2, {9}, {48}});
  write(dir, "seed-chunk-attend", actors::encode(chunk));
  actors::partials answer{7, true, "", {1.0f, 2.0f}, {3.0f, 4.0f}, std::vector<float>(8, 0.125f)};
  write(dir, "seed-partials", actors::encode(answer));
  actors::partials refused{8, false, "instance 1 keeps no block 4", {}, {}, {}};
  write(dir, "seed-refusal", actors::encode(refused));
}

/// The index of message type T in peer_messages, fuzz_peer_messages' first byte.
template <class T, class... Ts>
constexpr uint8_t peer_index(actors::message_types<Ts...>) {
  constexpr bool same[] = {std::is_same_v<T, Ts>...};
  for (uint8_t i = 0; i < sizeof...(Ts); ++i)
    if (same[i]) return i;
  throw "not a peer message";
}

/// Message `m` as fuzz_peer_messages reads it: the index of its type, then CAF's serialization.
template <class T>
std::vector<uint8_t> peer_message(T m) {
  constexpr uint8_t type = peer_index<T>(actors::peer_messages{});
  // Handles are written in a system's context, as a sender does; never destroyed (CAF 0.17's system does not
  // survive the destruction of statics at exit).
  static caf::actor_system& system = *new caf::actor_system(*new caf::actor_system_config);
  std::vector<char> bytes;
  caf::binary_serializer sink{system, bytes};
  if (auto e = sink(m)) {
    std::fprintf(stderr, "fuzz_seeds: message type %d: %s\n", int(type), caf::to_string(e).c_str());
    std::exit(1);
  }
  std::vector<uint8_t> out{type};
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

void peer_messages(const fs::path& dir) {
  using namespace actors;
  heartbeat hb;
  hb.inst_id = 2;
  hb.seq = 9;
  hb.placement.push_back({});
  write(dir, "seed-heartbeat", peer_message(hb));
  write(dir, "seed-try-move", peer_message(try_move_kvcache{5, 3, 4, 1, false}));
  move_reservation granted;
  granted.id = 5;
  granted.granted = true;
  granted.blocks = {1, 2, 3, 4};
  granted.region_key = {1, 2, 3};
  granted.reason = "ok";
  write(dir, "seed-reservation", peer_message(granted));
  write(dir, "seed-commit", peer_message(commit_move{5, 3, 1, {0, 1, 2, 3}, true, 77}));
  write(dir, "seed-replicate", peer_message(replicate_blocks{6, 3, 1, {0, 1}, {7, 8}, 2}));
  write(dir, "seed-promote", peer_message(promote_replicas{3, 1, {0, 1}, {2, 2}}));
  write(dir, "seed-adopt", peer_message(adopt_orphan{3, 1, 2, 1, {0, 1}, {2}}));
  write(dir, "seed-expel", peer_message(expel_member{1, 2, "too many blocks"}));
  // With actor handles (null here: the fuzzer finds the bytes of others).
  join_cluster join;
  join.inst_id = 3;
  join.plane_address = {1, 2, 3, 4};
  join.node = "node-a";
  join.control = {"10.0.0.3", 7001};
  join.known_epoch = 2;
  join.known_members = {1, 2, 3};
  write(dir, "seed-join", peer_message(join));
  cluster_view view;
  view.epoch = 2;
  view.version = 17;
  view.instances.resize(2);
  view.instances[0].inst_id = 1;
  view.instances[0].free_blocks = 40;
  view.instances[1].inst_id = 2;
  view.instances[1].plane_address = {9, 9};
  view.members = {1, 2};
  write(dir, "seed-view", peer_message(view));
  generate_request request;
  request.id = 11;
  request.params.prompt = {1, 400, 500};
  request.params.max_tokens = 16;
  write(dir, "seed-generate", peer_message(request));
  prefill_chunk chunk;
  chunk.id = 4;
  chunk.req_id = 11;
  chunk.tokens = {1, 2, 3};
  chunk.table_pools = {0, 1};
  chunk.table_blocks = {5, 6};
  write(dir, "seed-prefill-chunk", peer_message(chunk));
  cluster_status status;
  status.epoch = 2;
  status.version = 40;
  status.members.push_back({1, "alive", "host-a", "", {64, 20, 6, 0, 1, 0, 0, false, 0, 30, 8}, 12});
  status.members.push_back({2, "down", "", "no heartbeat lately", {}, 5000});
  status.requests.push_back({7, 1, {{7, 1, 30, true}, {7, 2, 6, false}}});
  status.moves.push_back({11, 7, 1, 2, 6, true, false, "", false});
  status.moves_done = 1;
  write(dir, "seed-cluster-status", peer_message(status));
}

void openai_request(const fs::path& dir) {
  write(dir, "seed-completion", text(0, R"({"model":"stories15M","prompt":"Once upon a time","max_tokens":8})"));
  write(dir, "seed-completion-ids",
        text(0, R"({"model":"stories15M","prompt":[1,300,301],"max_tokens":4,"temperature":0.7,"top_p":0.9,"seed":3})"));
  write(dir, "seed-stream",
        text(0, R"({"model":"stories15M","prompt":"the","stream":true,"stream_options":{"include_usage":true},"stop":["."]})"));
  write(dir, "seed-chat", text(1, R"({"model":"stories15M","messages":[{"role":"system","content":"Be kind."},)"
                                  R"({"role":"user","content":"Tell a story"}],"max_tokens":16,"ignore_eos":true})"));
}

void json_schema(const fs::path& dir) {
  write(dir, "seed-object", text('{', R"("type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},)"
                                       R"("required":["name"]})" "\n" R"({"name":"Ann","age":3})"));
  write(dir, "seed-formats", text('{', R"("type":"array","items":{"type":"string","format":"date-time"},"maxItems":2})"
                                       "\n" R"(["2024-02-29T23:59:60Z"])"));
  write(dir, "seed-anyof", text('{', R"("anyOf":[{"const":"aaaa"},{"enum":["aaab",1,null]},{"$ref":"#/$defs/x"}],)"
                                     R"("$defs":{"x":{"type":["number","boolean"]}}})" "\n" R"("aaab")"));
}

void checkpoint(const fs::path& dir) {
  const gpu::model_config c{.dim = 8, .hidden_dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .vocab_size = 16,
                            .max_seq = 8};
  for (bool shared : {true, false}) {
    auto w = gpu::synthetic_weights(c, 1, shared);
    const std::string& path = fuzz::as_file(nullptr, 0);
    if (!w.is_ok() || !gpu::write_llama2c(w.value(), path).is_ok()) {
      std::fprintf(stderr, "fuzz_seeds: cannot write a checkpoint\n");
      std::exit(1);
    }
    std::ifstream in(path, std::ios::binary);
    write(dir, shared ? "seed-shared-classifier" : "seed-own-classifier",
          std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
  }
}

void tokenizer(const fs::path& dir) {
  std::vector<uint8_t> bytes{uint8_t(fuzz::small_vocab_size & 0xff), uint8_t(fuzz::small_vocab_size >> 8)};
  const auto image = fuzz::small_vocab_image();
  bytes.insert(bytes.end(), image.begin(), image.end());
  write(dir, "seed-small-vocab", bytes);
}

void http_head(const fs::path& dir) {
  const auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  write(dir, "seed-post", bytes("POST /v1/completions HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\n"
                                "Content-Length: 42\r\nAuthorization: Bearer key\r\nExpect: 100-continue"));
  write(dir, "seed-get-1.0", bytes("GET /metrics?x=1 HTTP/1.0\r\nConnection: keep-alive\r\nAccept: */*"));
  write(dir, "seed-repeated", bytes("GET /health HTTP/1.1\nAccept: a\nAccept: b\nConnection: close"));
}

void safetensors(const fs::path& dir) {
  const auto file = [](const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> out(8);
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    out.insert(out.end(), header.begin(), header.end());
    for (size_t i = 0; i < data_bytes; ++i) out.push_back(uint8_t(i * 37));
    return out;
  };
  write(dir, "seed-three-types",
        file(R"({"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
             R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"c":{"dtype":"F16","shape":[],"data_offsets":[32,34]}})",
             34));
  write(dir, "seed-empty", file("{}", 0));
}

void tokenizer_json(const fs::path& dir) {
  const auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  write(dir, "seed-byte-level", bytes(R"({"added_tokens": [{"id": 6, "content": "<s>", "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{L}+| ?\\p{N}"},
      "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [6]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "He": 4, "ll": 5}, "merges": ["H e", "l l"]}})"));
  write(dir, "seed-sentencepiece", bytes(R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true,
      "vocab": {"<unk>": 0, "<0x0A>": 1, "\u2581": 2, "a": 3, "\u2581a": 4}, "merges": [["\u2581", "a"]]}})"));
}

void chat_template(const fs::path& dir) {
  const auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  write(dir, "seed-chatml", bytes("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content "
                                  "+ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                                  "{%- endif %}"));
  write(dir, "seed-tools", bytes("{% set ns = namespace(n=0) %}{% for t in tools %}{{ t | tojson(indent=2) }}{% set ns.n = ns.n + 1 %}"
                                 "{% endfor %}{{ messages[1:] | selectattr('role', 'equalto', 'user') | list | length }}"
                                 "{{ messages[0].content.strip().split(' ')[::-1] | join(',') }}{% if x is not defined %}"
                                 "{{ raise_exception('no x') }}{% endif %}"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  attention_wire(dir / "attention_wire");
  openai_request(dir / "openai_request");
  checkpoint(dir / "checkpoint");
  tokenizer(dir / "tokenizer");
  peer_messages(dir / "peer_messages");
  http_head(dir / "http_head");
  safetensors(dir / "safetensors");
  tokenizer_json(dir / "tokenizer_json");
  chat_template(dir / "chat_template");
  json_schema(dir / "json_schema");
  return 0;
}
