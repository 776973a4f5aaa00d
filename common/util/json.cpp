// Json: value access, a recursive-descent parser that follows the RFC 8259 grammar exactly
// (with a nesting limit so hostile input cannot overflow the stack), and the writer.
#include "util/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_set>

#include "util/errors.h"

namespace mixpar {

namespace {

constexpr int kMaxDepth = 512;
constexpr char32_t kReplacement = 0xFFFD;

// Decodes one UTF-8 sequence at s[i], advancing i; returns -1 (and advances one byte) for
// an invalid one: a stray continuation byte, an overlong form, a surrogate, > U+10FFFF.
long decode_utf8(std::string_view s, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto invalid = [&] {
    ++i;
    return -1L;
  };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  std::size_t len = 0;
  long cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return invalid();
  }
  if (i + len > s.size()) return invalid();
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return invalid();
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid();
  i += len;
  return cp;
}

// True when a decimal literal that from_chars found out of range is too large (rather than
// too small): its decimal exponent, digits before the point plus the written exponent, > 0.
bool literal_overflows(std::string_view lit) {
  std::size_t k = lit[0] == '-' ? 1 : 0;
  while (k < lit.size() && lit[k] == '0') ++k;
  long magnitude = 0;
  while (k < lit.size() && lit[k] >= '0' && lit[k] <= '9') ++k, ++magnitude;
  const std::size_t e = lit.find_first_of("eE");
  if (e != std::string_view::npos) {
    long exp = 0;
    std::from_chars(lit.data() + e + 1 + (lit[e + 1] == '+'), lit.data() + lit.size(), exp);
    magnitude += exp;  // an exponent too long for a long is far out of range either way
  }
  return magnitude > 0;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// 2^53: beyond it a double no longer holds every integer, so as_int() of a double stops there.
constexpr double kMaxExactDouble = 9007199254740992.0;

}  // namespace

// ---------------------------------------------------------------- value access

const char* Json::type_name() const {
  switch (type_) {
    case Type::kNull: return "null";
    case Type::kBool: return "bool";
    case Type::kNumber: return "number";
    case Type::kString: return "string";
    case Type::kArray: return "array";
    case Type::kObject: return "object";
  }
  return "?";
}

void Json::expect(Type t) const {
  if (type_ == t) return;
  Json probe;
  probe.type_ = t;
  throw InputError(std::string("expected ") +
                   (t == Type::kArray || t == Type::kObject ? "an " : "a ") + probe.type_name() +
                   ", got " + type_name());
}

bool Json::is_integer() const {
  if (type_ != Type::kNumber) return false;
  return exact_int_ ||
         (std::isfinite(num_) && num_ == std::trunc(num_) && std::fabs(num_) <= kMaxExactDouble);
}

bool Json::as_bool() const {
  expect(Type::kBool);
  return bool_;
}

double Json::as_double() const {
  expect(Type::kNumber);
  return num_;
}

std::int64_t Json::as_int() const {
  expect(Type::kNumber);
  if (exact_int_) return int_;
  if (!is_integer()) throw InputError("expected an integer, got " + dump());
  return static_cast<std::int64_t>(num_);
}

const std::string& Json::as_string() const {
  expect(Type::kString);
  return str_;
}
const Json::Array& Json::as_array() const {
  expect(Type::kArray);
  return arr_;
}
Json::Array& Json::as_array() {
  expect(Type::kArray);
  return arr_;
}
const Json::Object& Json::as_object() const {
  expect(Type::kObject);
  return obj_;
}
Json::Object& Json::as_object() {
  expect(Type::kObject);
  return obj_;
}

const Json* Json::find(std::string_view key) const {
  for (const auto& [k, v] : as_object()) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  const Json* v = find(key);
  if (!v) throw InputError("missing key \"" + std::string(key) + "\"");
  return *v;
}

Json& Json::operator[](std::string_view key) {
  if (is_null()) *this = object();
  for (auto& [k, v] : as_object()) {
    if (k == key) return v;
  }
  obj_.emplace_back(std::string(key), Json());
  return obj_.back().second;
}

Json& Json::set(std::string_view key, Json value) {
  Json& slot = (*this)[key];
  slot = std::move(value);
  return slot;
}

const Json& Json::at(std::size_t i) const {
  const Array& a = as_array();
  if (i >= a.size()) {
    throw InputError("index " + std::to_string(i) + " beyond an array of " +
                     std::to_string(a.size()));
  }
  return a[i];
}

void Json::push_back(Json value) {
  if (is_null()) *this = array();
  as_array().push_back(std::move(value));
}

std::size_t Json::size() const {
  if (type_ == Type::kArray) return arr_.size();
  if (type_ == Type::kObject) return obj_.size();
  return 0;
}

bool Json::operator==(const Json& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kNull: return true;
    case Type::kBool: return bool_ == other.bool_;
    case Type::kNumber:
      return exact_int_ && other.exact_int_ ? int_ == other.int_ : num_ == other.num_;
    case Type::kString: return str_ == other.str_;
    case Type::kArray: return arr_ == other.arr_;
    case Type::kObject: return obj_ == other.obj_;
  }
  return false;
}

// ---------------------------------------------------------------- parser

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view source) : s_(text), source_(source) {}

  Json parse_document() {
    skip_ws();
    Json v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(i_, what); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    throw InputError(std::string(source_) + ": invalid JSON at byte " + std::to_string(at) + ": " +
                     what);
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }
  void skip_ws() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect_char(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void expect_word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) fail("unexpected character");
    i_ += w.size();
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (at_end()) fail("unexpected end of input");
    switch (peek()) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': return Json(parse_string());
      case 't': expect_word("true"); return Json(true);
      case 'f': expect_word("false"); return Json(false);
      case 'n': expect_word("null"); return Json();
      default: break;
    }
    if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
    fail("unexpected character");
  }

  Json parse_object(int depth) {
    ++i_;  // '{'
    Json obj = Json::object();
    std::unordered_set<std::string> seen;
    skip_ws();
    if (peek() == '}') {
      ++i_;
      return obj;
    }
    while (true) {
      skip_ws();
      const std::size_t key_at = i_;
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      // RFC 8259 only says names SHOULD be unique; two values for one name is ambiguous
      // (which one would a tensor's offsets be?), so it is refused.
      if (!seen.insert(key).second) fail_at(key_at, "duplicate key \"" + key + "\"");
      skip_ws();
      expect_char(':');
      skip_ws();
      obj.obj_.emplace_back(std::move(key), parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect_char('}');
      return obj;
    }
  }

  Json parse_array(int depth) {
    ++i_;  // '['
    Json arr = Json::array();
    skip_ws();
    if (peek() == ']') {
      ++i_;
      return arr;
    }
    while (true) {
      skip_ws();
      arr.arr_.push_back(parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect_char(']');
      return arr;
    }
  }

  unsigned parse_hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else
        fail_at(i_ - 1, "bad hex digit in \\u escape");
    }
    return v;
  }

  // \uXXXX, with UTF-16 surrogate pairs joined into one code point.
  void parse_unicode_escape(std::string& out) {
    const std::size_t start = i_ - 2;
    unsigned cp = parse_hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(start, "lone low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(i_, 2) != "\\u") fail_at(start, "high surrogate without a low surrogate");
      i_ += 2;
      const unsigned lo = parse_hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail_at(start, "high surrogate without a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    append_utf8(out, cp);
  }

  void parse_escape(std::string& out) {
    if (at_end()) fail("unterminated string");
    const char c = s_[i_++];
    switch (c) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': parse_unicode_escape(out); break;
      default: fail_at(i_ - 1, "unknown escape \\" + std::string(1, c));
    }
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c == '\\') {
        ++i_;
        parse_escape(out);
        continue;
      }
      if (c < 0x20) fail("control character in string (must be escaped)");
      const std::size_t start = i_;
      if (decode_utf8(s_, i_) < 0) fail_at(start, "invalid UTF-8 in string");
      out.append(s_.substr(start, i_ - start));
    }
  }

  void skip_digits() {
    while (!at_end() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
  }
  bool at_digit() const { return !at_end() && s_[i_] >= '0' && s_[i_] <= '9'; }

  Json parse_number() {
    const std::size_t start = i_;
    if (peek() == '-') ++i_;
    if (!at_digit()) fail("expected a digit");
    if (s_[i_] == '0') {
      ++i_;
      if (at_digit()) fail_at(i_ - 1, "leading zero in a number");
    } else {
      skip_digits();
    }
    bool integral = true;
    if (peek() == '.') {
      ++i_, integral = false;
      if (!at_digit()) fail("expected a digit after '.'");
      skip_digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_, integral = false;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!at_digit()) fail("expected a digit in the exponent");
      skip_digits();
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    if (integral) {
      std::int64_t v = 0;
      if (std::from_chars(first, last, v).ec == std::errc()) return Json(v);
    }
    double d = 0;
    if (std::from_chars(first, last, d).ec == std::errc::result_out_of_range) {
      // Too small is zero, as every JSON reader makes it; too large has no double.
      if (literal_overflows(s_.substr(start, i_ - start))) fail_at(start, "number out of range");
      d = *first == '-' ? -0.0 : 0.0;
    }
    return Json(d);
  }

  std::string_view s_;
  std::string_view source_;
  std::size_t i_ = 0;
};

Json Json::parse(std::string_view text, std::string_view source) {
  return JsonParser(text, source).parse_document();
}

// ---------------------------------------------------------------- writer

void append_json_string(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t start = i;
      if (decode_utf8(s, i) < 0) {
        append_utf8(out, kReplacement);
      } else
        out.append(s.substr(start, i - start));
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(int indent) : indent_(indent) {}

  void write(const Json& v, int level) {
    switch (v.type_) {
      case Json::Type::kNull: out_ += "null"; break;
      case Json::Type::kBool: out_ += v.bool_ ? "true" : "false"; break;
      case Json::Type::kNumber: write_number(v); break;
      case Json::Type::kString: append_json_string(out_, v.str_); break;
      case Json::Type::kArray: write_array(v.arr_, level); break;
      case Json::Type::kObject: write_object(v.obj_, level); break;
    }
  }
  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (indent_ < 0) return;
    out_ += '\n';
    out_.append(static_cast<std::size_t>(indent_ * level), ' ');
  }

  void write_number(const Json& v) {
    if (v.exact_int_) {
      out_ += std::to_string(v.int_);
      return;
    }
    if (!std::isfinite(v.num_)) {
      out_ += "null";
      return;
    }
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v.num_);  // shortest round trip
    const std::string_view text(buf, static_cast<std::size_t>(r.ptr - buf));
    out_ += text;
    // Keep a double looking like one (1.0, not 1), as Python's json does.
    if (text.find_first_of(".e") == std::string_view::npos) out_ += ".0";
  }

  void write_array(const Json::Array& a, int level) {
    out_ += '[';
    for (std::size_t k = 0; k < a.size(); ++k) {
      if (k) out_ += ',';
      newline(level + 1);
      write(a[k], level + 1);
    }
    if (!a.empty()) newline(level);
    out_ += ']';
  }

  void write_object(const Json::Object& o, int level) {
    out_ += '{';
    for (std::size_t k = 0; k < o.size(); ++k) {
      if (k) out_ += ',';
      newline(level + 1);
      append_json_string(out_, o[k].first);
      out_ += indent_ < 0 ? ":" : ": ";
      write(o[k].second, level + 1);
    }
    if (!o.empty()) newline(level);
    out_ += '}';
  }

  int indent_;
  std::string out_;
};

std::string Json::dump(int indent) const {
  JsonWriter w(indent);
  w.write(*this, 0);
  return w.take();
}

}  // namespace mixpar
