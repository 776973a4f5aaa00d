// Json: a small, strict JSON value (RFC 8259) for safetensors headers, config.json, --json
// outputs and JSONL logs. Objects keep insertion order (so files diff cleanly); numbers keep
// an exact int64 when written as integers. parse() rejects anything RFC 8259 rejects (comments,
// trailing commas, NaN, bad UTF-8, duplicate keys) with an InputError naming the byte offset.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mixpar {

class Json {
 public:
  enum class Type : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  // Any integer type: kept exactly (an unsigned value above INT64_MAX becomes a double).
  template <std::integral I>
  requires(!std::same_as<I, bool>) Json(I v) : type_(Type::kNumber) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t)) {
      if (v > static_cast<std::uint64_t>(INT64_MAX)) {
        num_ = static_cast<double>(v);
        return;
      }
    }
    set_int(static_cast<std::int64_t>(v));
  }
  Json(double v) : type_(Type::kNumber), num_(v) {}
  Json(const char* s) : type_(Type::kString), str_(s) {}
  Json(std::string s) : type_(Type::kString), str_(std::move(s)) {}
  Json(std::string_view s) : type_(Type::kString), str_(s) {}
  Json(Array a) : type_(Type::kArray), arr_(std::move(a)) {}
  Json(Object o) : type_(Type::kObject), obj_(std::move(o)) {}
  static Json array() { return Json(Array{}); }
  static Json object() { return Json(Object{}); }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // True for a number with an integral value that as_int() returns exactly.
  bool is_integer() const;

  // Typed access; the wrong type is an InputError ("expected a string, got number"),
  // because a Json almost always comes from a file the user handed us.
  bool as_bool() const;
  double as_double() const;
  std::int64_t as_int() const;  // integral values only: 3 and 3.0 yes, 3.5 no
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object access. find() returns nullptr when the key is absent; at() throws InputError
  // ("missing key \"n_head\""); operator[] inserts null (a null value first becomes {}).
  const Json* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Json& at(std::string_view key) const;
  Json& operator[](std::string_view key);
  // Replaces the value of `key` in place, or appends it: insertion order is kept.
  Json& set(std::string_view key, Json value);

  // Array access (a null value first becomes []).
  const Json& at(std::size_t i) const;
  void push_back(Json value);
  std::size_t size() const;  // elements of an array or members of an object, else 0

  // Deep equality; numbers compare by value (1 == 1.0), objects member by member in order.
  bool operator==(const Json& other) const;

  // indent < 0: compact, no spaces ({"a":[1,2]}), the form of safetensors headers and JSONL.
  // indent >= 0: one member per line, `indent` spaces per level (Python's json.dumps indent).
  // Integers print exactly, other numbers as the shortest text that reads back to the same
  // double (with ".0" if it looks integral); a non-finite number prints as null, as
  // JavaScript's JSON.stringify does, so a NaN loss still gives a valid log line. Invalid
  // UTF-8 in a string is written as U+FFFD for the same reason.
  std::string dump(int indent = -1) const;

  // Parses exactly one JSON value (surrounding whitespace allowed). Errors are InputErrors
  // "<source>: invalid JSON at byte <offset>: <what>".
  static Json parse(std::string_view text, std::string_view source = "JSON");

  const char* type_name() const;  // "null", "bool", "number", "string", "array", "object"

 private:
  void set_int(std::int64_t v) {
    int_ = v;
    num_ = static_cast<double>(v);
    exact_int_ = true;
  }
  void expect(Type t) const;
  friend class JsonParser;
  friend class JsonWriter;

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool exact_int_ = false;  // written as an integer: int_ holds the exact value
  std::int64_t int_ = 0;
  double num_ = 0.0;
  std::string str_;
  Array arr_;
  Object obj_;
};

// Writes `s` as a JSON string literal (quotes included) onto `out`.
void append_json_string(std::string& out, std::string_view s);

}  // namespace mixpar
