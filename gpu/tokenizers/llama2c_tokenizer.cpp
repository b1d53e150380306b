#include "gpu/tokenizers/llama2c_tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <queue>

#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

status corrupt_tokenizer(const std::string& path, const std::string& what) {
  return {status_code::corrupt_model, text::format("tokenizer file {}: {}", path, what)};
}

/// Length of the UTF-8 sequence starting at s[i], or 1 for a byte that does not start a valid one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 1;
  return n;
}

/// One symbol of the text during BPE: a run of bytes with the token that covers it.
struct symbol {
  int32_t id;
  uint32_t start, length;
  int32_t prev, next;  // neighbours in the list; -1 at the ends
  bool mergeable;      // byte-fallback symbols never merge
};

/// A candidate merge of two neighbours; stale when either side changed after it was queued.
struct candidate {
  float score;
  uint32_t left_start;
  int32_t left, right, merged_id;
  uint32_t total_length;
  bool operator<(const candidate& o) const {  // max-heap: best score, then leftmost
    if (score != o.score) return score < o.score;
    return left_start > o.left_start;
  }
};

}  // namespace

result<llama2c_tokenizer> llama2c_tokenizer::load(const std::string& path, int vocab_size) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return status{status_code::io_error, text::format("tokenizer file {}: cannot open", path)};
  int32_t max_length = 0;
  if (std::fread(&max_length, sizeof max_length, 1, f.get()) != 1) return corrupt_tokenizer(path, "no header");
  if (max_length <= 0 || max_length > 4096) return corrupt_tokenizer(path, text::format("bad max token length {}", max_length));
  if (vocab_size < 3)
    return corrupt_tokenizer(path, text::format("a vocabulary of {} pieces has no room for <unk>, <s> and </s> (ids 0, 1, 2)",
                                      vocab_size));
  llama2c_tokenizer t;
  t.pieces_.reserve(vocab_size);
  t.scores_.reserve(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) {
    float score = 0;
    int32_t length = 0;
    if (std::fread(&score, sizeof score, 1, f.get()) != 1 || std::fread(&length, sizeof length, 1, f.get()) != 1)
      return corrupt_tokenizer(path, text::format("truncated: {} pieces, the model's vocabulary has {}", id, vocab_size));
    if (length < 0 || length > max_length)
      return corrupt_tokenizer(path, text::format("piece {} has length {} (max {})", id, length, max_length));
    std::string piece(size_t(length), '\0');
    if (length > 0 && std::fread(piece.data(), 1, size_t(length), f.get()) != size_t(length))
      return corrupt_tokenizer(path, text::format("truncated inside piece {}", id));
    t.pieces_.push_back(std::move(piece));
    t.scores_.push_back(score);
  }
  if (std::fgetc(f.get()) != EOF)
    return corrupt_tokenizer(path, text::format("oversized: data after the {} pieces of the model's vocabulary", vocab_size));
  return from_pieces(std::move(t.pieces_), std::move(t.scores_));
}

llama2c_tokenizer llama2c_tokenizer::from_pieces(std::vector<std::string> pieces, std::vector<float> scores,
                                                 spm_options options) {
  llama2c_tokenizer t;
  t.pieces_ = std::move(pieces);
  t.scores_ = std::move(scores);
  t.scores_.resize(t.pieces_.size(), 0.0f);
  t.add_space_prefix_ = options.add_space_prefix;
  const size_t n = t.pieces_.size();
  t.byte_ids_.fill(-1);
  t.byte_of_.assign(n, -1);
  t.special_.assign(n, false);
  const bool typed = !options.types.empty();
  const auto type_of = [&](size_t id) {
    if (typed) return id < options.types.size() ? options.types[id] : spm_token_type::normal;
    if (n >= 259 && id >= 3 && id < 259) return spm_token_type::byte;  // llama2.c's layout
    return id == size_t(token_bos) || id == size_t(token_eos) ? spm_token_type::control : spm_token_type::normal;
  };
  for (size_t id = 0; id < n; ++id) {
    const spm_token_type type = type_of(id);
    const std::string& piece = t.pieces_[id];
    if (type == spm_token_type::byte) {
      unsigned value = 0;
      // <0xXX> in a GGUF vocabulary; in a tokenizer.bin the id says the byte
      const int byte = !typed ? int(id) - 3
                              : piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%2X>", &value) == 1 ? int(value) : -1;
      if (byte >= 0 && byte < 256) {
        t.byte_of_[id] = int16_t(byte);
        if (t.byte_ids_[size_t(byte)] < 0) t.byte_ids_[size_t(byte)] = int32_t(id);
      }
      continue;
    }
    t.special_[id] = type == spm_token_type::control;
    if (typed && (type == spm_token_type::control || type == spm_token_type::user_defined) && !piece.empty())
      t.whole_.emplace_back(piece, int32_t(id));
    if (type == spm_token_type::normal || type == spm_token_type::undefined || (!typed && t.special_[id]))
      t.ids_.emplace(piece, int32_t(id));  // first id wins on a duplicate
  }
  std::stable_sort(t.whole_.begin(), t.whole_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return t;
}

int32_t llama2c_tokenizer::lookup(std::string_view piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

bool llama2c_tokenizer::is_special(int32_t id) const { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }

std::vector<int32_t> llama2c_tokenizer::encode(std::string_view raw, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos) out.push_back(token_bos);
  // Runs of text between the tokens matched whole (longest first at each place); each run after the text's start
  // or a special token gets SentencePiece's leading space, as llama.cpp gives it.
  bool after_special = true;
  size_t run_start = 0;
  const auto flush = [&](size_t end) {
    if (end == run_start) return;
    std::string text = add_space_prefix_ && after_special ? " " : "";
    text.append(raw.substr(run_start, end - run_start));
    encode_run(text, out);
    after_special = false;
  };
  for (size_t at = 0; at < raw.size() && !whole_.empty();) {
    const auto match = std::find_if(whole_.begin(), whole_.end(),
                                    [&](const auto& w) { return raw.compare(at, w.first.size(), w.first) == 0; });
    if (match == whole_.end()) {
      ++at;
      continue;
    }
    flush(at);
    out.push_back(match->second);
    after_special = true;
    at += match->first.size();
    run_start = at;
  }
  flush(raw.size());
  return out;
}

void llama2c_tokenizer::encode_run(std::string_view text, std::vector<int32_t>& out) const {
  // Initial symbols: one per UTF-8 character that is a piece, else one per byte (byte fallback).
  std::vector<symbol> symbols;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    const int32_t id = lookup(text.substr(i, n));
    if (id >= 0) {
      symbols.push_back({id, uint32_t(i), uint32_t(n), 0, 0, true});
    } else {
      for (size_t k = 0; k < n; ++k)  // a byte without its fallback token: <unk> (id 0)
        symbols.push_back({std::max(byte_ids_[static_cast<unsigned char>(text[i + k])], 0), uint32_t(i + k), 1, 0, 0,
                           false});
    }
    i += n;
  }
  if (symbols.empty()) return;
  for (size_t k = 0; k < symbols.size(); ++k) {
    symbols[k].prev = int32_t(k) - 1;
    symbols[k].next = k + 1 < symbols.size() ? int32_t(k + 1) : -1;
  }

  // Merge the best-scoring neighbour pair (leftmost on ties) until no pair forms a piece.
  std::priority_queue<candidate> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || !symbols[left].mergeable || !symbols[right].mergeable) return;
    const uint32_t total = symbols[left].length + symbols[right].length;
    const int32_t id = lookup(text.substr(symbols[left].start, total));
    if (id >= 0) queue.push({scores_[id], symbols[left].start, left, right, id, total});
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) consider(int32_t(k), int32_t(k + 1));
  while (!queue.empty()) {
    const candidate c = queue.top();
    queue.pop();
    symbol& l = symbols[c.left];
    symbol& r = symbols[c.right];
    if (l.length == 0 || r.length == 0 || l.next != c.right || l.length + r.length != c.total_length) continue;
    l.id = c.merged_id;
    l.length = c.total_length;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    r.length = 0;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int32_t k = 0; k >= 0; k = symbols[k].next) out.push_back(symbols[k].id);
}

std::string llama2c_tokenizer::decode(int32_t prev, int32_t token) const {
  if (token < 0 || token >= vocab_size()) return {};
  if (const int byte = byte_of(token); byte >= 0) return std::string(1, char(byte));
  if (!whole_.empty() && is_special(token)) return {};  // a GGUF vocabulary's control tokens are no text
  std::string_view piece = pieces_[token];
  if (add_space_prefix_ && prev == token_bos && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
  return std::string(piece);
}

}  // namespace illm::gpu
