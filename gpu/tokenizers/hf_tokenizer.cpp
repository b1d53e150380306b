#include "gpu/tokenizers/hf_tokenizer.hpp"

#include <algorithm>

#include "gpu/text.hpp"
#include "gpu/tokenizers/hf_tokenizer_parts.hpp"

namespace illm::gpu {

namespace {

/// Ranges of `text` as `behavior` cuts it by the matches `found` (sorted, disjoint).
std::vector<std::pair<size_t, size_t>> cut(size_t size, const std::vector<std::pair<size_t, size_t>>& found,
                                           split_behavior behavior, bool invert) {
  // Each range with whether it is a match (a delimiter), the text between the matches in between.
  std::vector<std::tuple<size_t, size_t, bool>> parts;
  size_t at = 0;
  for (auto [b, e] : found) {
    if (b > at) parts.emplace_back(at, b, invert);
    parts.emplace_back(b, e, !invert);
    at = e;
  }
  if (at < size) parts.emplace_back(at, size, invert);
  std::vector<std::pair<size_t, size_t>> out;
  bool glue_next = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto [b, e, delimiter] = parts[i];
    if (glue_next && !out.empty()) {
      out.back().second = e;
      glue_next = false;
      continue;
    }
    if (!delimiter) {
      out.emplace_back(b, e);
      continue;
    }
    switch (behavior) {
      case split_behavior::removed: break;
      case split_behavior::isolated: out.emplace_back(b, e); break;
      case split_behavior::merged_with_previous:
        if (!out.empty() && out.back().second == b && !std::get<2>(parts[i - 1])) out.back().second = e;
        else out.emplace_back(b, e);
        break;
      case split_behavior::merged_with_next:
        out.emplace_back(b, e);
        glue_next = i + 1 < parts.size() && !std::get<2>(parts[i + 1]);
        break;
      case split_behavior::contiguous:
        if (i > 0 && std::get<2>(parts[i - 1]) && !out.empty() && out.back().second == b) out.back().second = e;
        else out.emplace_back(b, e);
        break;
    }
  }
  return out;
}

}  // namespace

/// Replaces every occurrence of `from` in `s` by `to`.
std::string replaced(std::string_view s, const std::string& from, const std::string& to) {
  if (from.empty()) return std::string(s);
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string hf_tokenizer::parts::normalized(std::string text) const {
  for (const normalizer_step& n : normalizers) switch (n.what) {
      case normalizer_step::form: text = normalize(text, n.nf); break;
      case normalizer_step::prepend:
        if (!text.empty()) text = n.to + text;
        break;
      case normalizer_step::replace: text = replaced(text, n.from, n.to); break;
      case normalizer_step::lowercase:
        for (char& c : text) c = char(std::tolower(uint8_t(c)));  // ASCII; other scripts keep their case
        break;
    }
  return text;
}

result<std::vector<piece>> hf_tokenizer::parts::pre_tokenized(piece whole) const {
  std::vector<piece> pieces_now{std::move(whole)};
  for (const pre_step& s : pre_steps) {
    std::vector<piece> next;
    for (piece& p : pieces_now) {
      if (s.what == pre_step::metaspace_split) {
        p.text = replaced(p.text, " ", s.replacement);
        const bool prepend = s.prepend_scheme == pre_step::always || (s.prepend_scheme == pre_step::first && p.at_origin);
        if (prepend && !starts_with(p.text, s.replacement)) p.text = s.replacement + p.text;
        if (!s.split_words) {
          next.push_back(std::move(p));
          continue;
        }
        auto found = s.regex->matches(p.text);
        if (!found.is_ok()) return found.error();
        for (auto [b, e] : cut(p.text.size(), found.value(), split_behavior::merged_with_next, false))
          next.push_back({p.text.substr(b, e - b), p.at_origin && b == 0});
        continue;
      }
      if (s.what == pre_step::byte_level && s.add_prefix_space && !starts_with(p.text, " ")) p.text = " " + p.text;
      std::vector<std::pair<size_t, size_t>> ranges{{0, p.text.size()}};
      if (s.regex) {
        auto found = s.regex->matches(p.text);
        if (!found.is_ok()) return found.error();
        ranges = cut(p.text.size(), found.value(), s.behavior, s.invert);
      }
      for (auto [b, e] : ranges) {
        piece part{p.text.substr(b, e - b), p.at_origin && b == 0};
        if (s.what == pre_step::byte_level) {
          std::string mapped;
          for (char c : part.text) mapped += byte_as_char(uint8_t(c));
          part.text = std::move(mapped);
        }
        next.push_back(std::move(part));
      }
    }
    pieces_now = std::move(next);
  }
  return pieces_now;
}

std::vector<std::tuple<std::string_view, int32_t, bool>> hf_tokenizer::parts::split_added(std::string_view text) const {
  std::vector<std::tuple<std::string_view, int32_t, bool>> out;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  const auto is_word = [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || uint8_t(c) >= 0x80; };
  size_t start = 0;  // of the text not yet emitted
  for (size_t i = 0; i < text.size() && !added.empty(); ++i) {
    const added_token* hit = nullptr;
    for (const added_token& a : added)  // longest first
      if (text.compare(i, a.content.size(), a.content) == 0 &&
          (!a.single_word || ((i == 0 || !is_word(text[i - 1])) &&
                              (i + a.content.size() == text.size() || !is_word(text[i + a.content.size()]))))) {
        hit = &a;
        break;
      }
    if (!hit) continue;
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (b > start && is_space(text[b - 1])) --b;
    if (hit->rstrip)
      while (e < text.size() && is_space(text[e])) ++e;
    if (b > start) out.emplace_back(text.substr(start, b - start), -1, start == 0);
    out.emplace_back(text.substr(b, e - b), hit->id, b == 0);
    start = e;
    i = e - 1;
  }
  if (start < text.size()) out.emplace_back(text.substr(start), -1, start == 0);
  return out;
}

std::vector<std::string> hf_tokenizer::parts::decoded(std::vector<std::string> tokens, bool at_start) const {
  bool fused = false;
  for (const decoder_step& d : decoders) {
    switch (d.what) {
      case decoder_step::byte_level: {
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mine;
          bool all = true;
          for (size_t i = 0; i < t.size() && all;) {
            auto [c, length] = next_utf8(t, i);
            const int b = char_as_byte(c);
            all = b >= 0;
            if (all) mine += char(b);
            i += length;
          }
          bytes += all ? mine : t;
        }
        tokens = {bytes};
        fused = true;
        break;
      }
      case decoder_step::replace:
        for (std::string& t : tokens) t = replaced(t, d.from, d.to);
        break;
      case decoder_step::byte_fallback:
        for (std::string& t : tokens)
          if (t.size() == 6 && starts_with(t, "<0x") && t[5] == '>' && std::isxdigit(uint8_t(t[3])) &&
              std::isxdigit(uint8_t(t[4])))
            t = std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
        break;
      case decoder_step::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {all};
        fused = true;
        break;
      }
      case decoder_step::strip:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          const bool text_start = !fused || at_start;
          for (int k = 0; k < d.start && text_start && starts_with(t, d.from); ++k) t.erase(0, d.from.size());
          for (int k = 0; k < d.stop && t.size() >= d.from.size() && t.compare(t.size() - d.from.size(), d.from.size(), d.from) == 0; ++k)
            t.erase(t.size() - d.from.size());
        }
        break;
      case decoder_step::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replaced(tokens[i], d.from, " ");
          if (i == 0 && at_start && d.strips_first && starts_with(tokens[i], " ")) tokens[i].erase(0, 1);
        }
        break;
    }
  }
  return tokens;
}

hf_tokenizer::~hf_tokenizer() = default;

void hf_tokenizer::set_specials(std::optional<int32_t> bos, std::vector<int32_t> eos) {
  if (bos) parts_->bos = bos;
  parts_->eos = std::move(eos);
}

std::vector<int32_t> hf_tokenizer::encode(std::string_view text, bool add_special) const {
  auto ids = try_encode(text, add_special);
  return ids.is_ok() ? std::move(ids).value() : std::vector<int32_t>();
}

result<std::vector<int32_t>> hf_tokenizer::try_encode(std::string_view text, bool add_special) const {
  const parts& p = *parts_;
  std::vector<int32_t> out;
  if (add_special) out = p.prefix;
  for (auto [segment, id, at_origin] : p.split_added(text)) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    auto words = p.pre_tokenized({p.normalized(std::string(segment)), at_origin});
    if (!words.is_ok()) return words.error();
    for (const piece& word : words.value()) p.model->encode_word(word.text, out);
  }
  if (add_special) out.insert(out.end(), p.suffix.begin(), p.suffix.end());
  return out;
}

std::string hf_tokenizer::decode(int32_t prev, int32_t token) const {
  if (token < 0 || token >= vocab_size() || is_special(token)) return {};
  const bool at_start = prev < 0 || (parts_->bos && prev == *parts_->bos);
  std::string out;
  for (const std::string& t : parts_->decoded({parts_->pieces[size_t(token)]}, at_start)) out += t;
  return out;
}

std::string hf_tokenizer::decode_text(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab_size() && !(skip_special && is_special(id))) tokens.push_back(parts_->pieces[size_t(id)]);
  std::string out;
  for (const std::string& t : parts_->decoded(std::move(tokens), true)) out += t;
  if (parts_->clean_up_spaces)  // transformers' clean_up_tokenization
    for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
                            {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
      out = replaced(out, from, to);
  return valid_utf8(out);
}

int hf_tokenizer::vocab_size() const { return int(parts_->pieces.size()); }

bool hf_tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < parts_->special.size() && parts_->special[size_t(id)];
}

std::optional<int32_t> hf_tokenizer::bos_id() const { return parts_->bos; }

std::vector<int32_t> hf_tokenizer::end_ids() const { return parts_->eos; }

int32_t hf_tokenizer::id_of(std::string_view piece) const {
  const auto it = parts_->ids.find(std::string(piece));
  return it == parts_->ids.end() ? -1 : it->second;
}

}  // namespace illm::gpu
