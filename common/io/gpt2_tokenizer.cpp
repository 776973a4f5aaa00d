// GPT-2 byte-level BPE. The pattern is matched by hand over code points (its alternatives in
// order, as a backtracking regex engine tries them), with the classes of unicode_classes.h.
#include "io/gpt2_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "io/unicode_classes.h"
#include "util/errors.h"
#include "util/json.h"

namespace mixpar {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100.. in order, so every token is a printable string. Returns, per code point
// below 0x144, the byte it stands for (-1: none).
std::vector<int> printable_to_byte() {
  std::vector<int> to_byte(0x144, -1);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    to_byte[static_cast<std::size_t>(printable ? b : 256 + next++)] = b;
  }
  return to_byte;
}

// One code point of UTF-8 at text[i]: its value and length. A malformed sequence (a stray
// continuation, a truncated or overlong form, a surrogate, past U+10FFFF) is one byte with the
// value 0xFFFFFFFF, which is in no class.
constexpr char32_t kInvalid = 0xFFFFFFFFu;
std::pair<char32_t, std::size_t> next_code_point(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  std::size_t n = 0;
  char32_t cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {kInvalid, 1};
  }
  if (i + n > s.size()) return {kInvalid, 1};
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1};
  return {cp, n};
}

enum class Cls : std::uint8_t { kLetter, kNumber, kSpace, kOther };
Cls classify(char32_t cp) {
  if (cp == kInvalid) return Cls::kOther;
  if (is_unicode_letter(cp)) return Cls::kLetter;
  if (is_unicode_number(cp)) return Cls::kNumber;
  if (is_unicode_space(cp)) return Cls::kSpace;
  return Cls::kOther;
}

struct CodePoint {
  char32_t cp;
  Cls cls;
  std::size_t at;  // byte offset
};

// Length in code points of the contraction at c[i] ('s 't 're 've 'm 'll 'd), 0 if none.
std::size_t contraction(const std::vector<CodePoint>& c, std::size_t i) {
  if (c[i].cp != U'\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1].cp;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= c.size()) return 0;
  const char32_t b = c[i + 2].cp;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

}  // namespace

std::vector<std::string_view> Gpt2Tokenizer::pretokenize(std::string_view text) {
  std::vector<CodePoint> c;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, n] = next_code_point(text, i);
    c.push_back({cp, classify(cp), i});
    i += n;
  }
  const std::size_t n = c.size();
  const auto run = [&](std::size_t from, auto&& pred) {
    while (from < n && pred(c[from].cls)) ++from;
    return from;
  };
  std::vector<std::string_view> pieces;
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = i + contraction(c, i);
    if (end == i) {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020, then a run of one class.
      const std::size_t j = c[i].cp == U' ' && i + 1 < n ? i + 1 : i;
      const Cls k = c[j].cls;
      if (k != Cls::kSpace) {
        end = run(j, [k](Cls x) { return x == k; });
      } else {
        // `\s+(?!\S)`: the whitespace run, less its last character when a non-space follows
        // (that one goes with the next word); else `\s+` takes the single character.
        const std::size_t ws = run(i, [](Cls x) { return x == Cls::kSpace; });
        end = ws == n || ws - i == 1 ? ws : ws - 1;
      }
    }
    const std::size_t from = c[i].at, to = end < n ? c[end].at : text.size();
    pieces.push_back(text.substr(from, to - from));
    i = end;
  }
  return pieces;
}

void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
  std::vector<std::int32_t> parts;
  parts.reserve(piece.size());
  for (char ch : piece) parts.push_back(byte_id_[static_cast<unsigned char>(ch)]);
  // GPT-2's loop: merge every occurrence of the listed pair of lowest rank, until none is left.
  while (parts.size() > 1) {
    std::int32_t best_rank = std::numeric_limits<std::int32_t>::max();
    Merge best{};
    std::uint64_t best_key = 0;
    for (std::size_t k = 0; k + 1 < parts.size(); ++k) {
      const auto it = merges_.find(pair_key(parts[k], parts[k + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = it->second;
        best_key = it->first;
      }
    }
    if (best_rank == std::numeric_limits<std::int32_t>::max()) break;
    std::vector<std::int32_t> merged;
    merged.reserve(parts.size());
    for (std::size_t k = 0; k < parts.size(); ++k) {
      if (k + 1 < parts.size() && pair_key(parts[k], parts[k + 1]) == best_key) {
        merged.push_back(best.id);
        ++k;
      } else {
        merged.push_back(parts[k]);
      }
    }
    parts.swap(merged);
  }
  out.insert(out.end(), parts.begin(), parts.end());
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<std::int32_t> ids;
  // Pieces repeat (words): each is merged once per call.
  std::unordered_map<std::string_view, std::vector<std::int32_t>> seen;
  const auto ordinary = [&](std::string_view part) {
    for (std::string_view piece : pretokenize(part)) {
      auto [it, fresh] = seen.try_emplace(piece);
      if (fresh) bpe(piece, it->second);
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
  };
  std::size_t from = 0;
  while (allow_special) {
    const std::size_t at = text.find(kEndOfText, from);
    if (at == std::string_view::npos) break;
    ordinary(text.substr(from, at - from));
    ids.push_back(end_of_text_);
    from = at + kEndOfText.size();
  }
  ordinary(text.substr(from));
  return ids;
}

const std::string& Gpt2Tokenizer::token_bytes(int id) const {
  if (id < 0 || id >= vocab_size()) {
    throw InputError("token id " + std::to_string(id) + " is outside the GPT-2 vocabulary [0, " +
                     std::to_string(vocab_size()) + ")");
  }
  return bytes_of_[static_cast<std::size_t>(id)];
}

std::string Gpt2Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string s;
  for (std::int32_t id : ids) s += token_bytes(id);
  return s;
}

std::string Gpt2Tokenizer::decode_for_display(std::span<const std::int32_t> ids) const {
  const std::string bytes = decode(ids);
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    const auto [cp, n] = next_code_point(bytes, i);
    out += cp == kInvalid ? std::string_view("\xEF\xBF\xBD") : std::string_view(bytes).substr(i, n);
    i += n;
  }
  return out;
}

std::string Gpt2Tokenizer::decode(std::span<const std::uint16_t> ids) const {
  std::string s;
  for (std::uint16_t id : ids) s += token_bytes(id);
  return s;
}

Gpt2Tokenizer Gpt2Tokenizer::from_dir(const std::string& dir) {
  return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
}

Gpt2Tokenizer Gpt2Tokenizer::from_files(const std::string& encoder_json,
                                        const std::string& vocab_bpe) {
  Gpt2Tokenizer t;
  const std::vector<int> to_byte = printable_to_byte();
  const Json enc = Json::parse(read_file(encoder_json), encoder_json);
  if (!enc.is_object() || enc.as_object().empty()) {
    throw InputError(encoder_json + ": not a GPT-2 encoder.json (expected an object of tokens)");
  }
  const auto n = enc.as_object().size();
  t.bytes_of_.assign(n, {});
  std::vector<bool> have(n, false);
  std::unordered_map<std::string, std::int32_t> id_of;  // the printable form -> id
  id_of.reserve(n);
  for (const auto& [name, value] : enc.as_object()) {
    if (!value.is_integer() || value.as_int() < 0 || static_cast<std::size_t>(value.as_int()) >= n ||
        have[static_cast<std::size_t>(value.as_int())]) {
      throw InputError(encoder_json + ": token \"" + name + "\" has no id of its own in [0, " +
                       std::to_string(n) + ")");
    }
    const auto id = static_cast<std::int32_t>(value.as_int());
    have[static_cast<std::size_t>(id)] = true;
    id_of.emplace(name, id);
    if (name == kEndOfText) {
      t.end_of_text_ = id;
      t.bytes_of_[static_cast<std::size_t>(id)] = name;
      continue;
    }
    std::string bytes;
    for (std::size_t i = 0; i < name.size();) {
      const auto [cp, len] = next_code_point(name, i);
      if (cp >= to_byte.size() || to_byte[cp] < 0) {
        throw InputError(encoder_json + ": token \"" + name +
                         "\" has a character outside GPT-2's byte alphabet");
      }
      bytes += static_cast<char>(to_byte[cp]);
      i += len;
    }
    t.bytes_of_[static_cast<std::size_t>(id)] = std::move(bytes);
  }
  if (t.end_of_text_ < 0) throw InputError(encoder_json + ": no \"<|endoftext|>\" token");
  for (int b = 0; b < 256; ++b) t.byte_id_[b] = -1;
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& s = t.bytes_of_[id];
    if (s.size() == 1 && static_cast<int>(id) != t.end_of_text_) {
      t.byte_id_[static_cast<unsigned char>(s[0])] = static_cast<std::int32_t>(id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (t.byte_id_[b] < 0) {
      throw InputError(encoder_json + ": no token for the byte " + std::to_string(b));
    }
  }
  // vocab.bpe: a "#version" line, then one merge per line, "left right" in printable form,
  // in rank order.
  std::istringstream in(read_file(vocab_bpe));
  std::string line;
  std::int32_t rank = 0;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos) {
      throw InputError(vocab_bpe + ":" + std::to_string(line_no) +
                       ": not a merge (expected two tokens and one space)");
    }
    const std::string left = line.substr(0, sp), right = line.substr(sp + 1);
    const auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end()) {
      throw InputError(vocab_bpe + ":" + std::to_string(line_no) + ": the merge \"" + line +
                       "\" names a token encoder.json lacks");
    }
    t.merges_.try_emplace(pair_key(l->second, r->second), Merge{rank++, m->second});
  }
  if (t.merges_.empty()) throw InputError(vocab_bpe + ": no merges");
  return t;
}

}  // namespace mixpar
