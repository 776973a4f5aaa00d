// ArgParser: the flags of every mixpar tool, with one behaviour for all of them:
// `--name value` or `--name=value` (a value starting with "--" only as `--name=--value`: a
// flag that lost its value must not swallow the next flag), `--flag`, `--` ends options (so `fpx -- -2.5` works),
// an argument that parses as a number ("-2.5", "-inf") is a positional even before `--`,
// `--help` prints usage and exits 0, and any bad input is an InputError naming the flag.
// An option given twice is refused (never "the last one wins"); numbers are decimal (hex such
// as "0x2" is refused by name); a whole number outside its range says "out of range" and the
// range.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mixpar {

class ArgParser {
 public:
  ArgParser(std::string prog, std::string description);

  // --name (boolean, false unless given)
  ArgParser& flag(const std::string& name, const std::string& help);
  // --name VALUE with a default ("" = no default: get() then requires it was given)
  ArgParser& option(const std::string& name, const std::string& default_value,
                    const std::string& help);
  // Positional arguments in order; a variadic one must come last.
  ArgParser& positional(const std::string& name, const std::string& help,
                        bool required = false, bool variadic = false);

  // Parses argv (from scratch: a second call forgets the first); throws InputError on an
  // unknown flag, a missing value or a missing required positional. On --help prints
  // usage() and calls std::exit(0).
  void parse(int argc, char** argv);
  std::string usage() const;

  bool given(const std::string& name) const;  // flag set, or option given explicitly
  bool get_flag(const std::string& name) const;
  std::string get(const std::string& name) const;
  std::int64_t get_int(const std::string& name) const;    // "128", "7e9" if integral
  // The same within [lo, hi], else InputError "--name: 4294967298 is out of range (1 to 4096)":
  // what a tool that keeps the value in an int must use.
  std::int64_t get_int(const std::string& name, std::int64_t lo, std::int64_t hi) const;
  double get_double(const std::string& name) const;       // "1e-3", "0.5"
  // One of `choices`, else InputError "--name: 'x' is not one of a|b|c".
  std::string get_choice(const std::string& name, const std::vector<std::string>& choices) const;
  const std::vector<std::string>& positionals() const { return positional_values_; }
  // Every flag and option declared, without "--", in the order declared: the flag table that
  // tests hold a tool's other tables to (which flags its ranks agree on, which a resume keeps).
  const std::vector<std::string>& names() const { return order_; }

 private:
  struct Spec {
    bool is_flag;
    std::string default_value;
    std::string help;
  };
  struct PositionalSpec {
    std::string name, help;
    bool required, variadic;
  };
  const Spec& spec(const std::string& name) const;
  std::string prog_, description_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::vector<PositionalSpec> positional_specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_values_;
};

// Parsing helpers with errors that name what was being parsed (InputError on failure).
// parse_double takes the whole text or nothing ("1.5x" fails), accepts inf/nan and
// subnormal results, and rejects finite literals that overflow a double ("1e400").
double parse_double(const std::string& what, const std::string& text);
// A whole number written as plain digits above 2^53 that a double cannot hold exactly
// ("9007199254740993") is refused by parse_double rather than rounded.
// parse_int takes the literal's exact value ("9007199254740993" stays odd, "7e9" and "1.5e3"
// are whole, "1.00000000000000001" is not) up to kMaxWholeNumber in magnitude (9e18 is below
// 2^63); past that "out of range".
inline constexpr double kMaxWholeNumber = 9.0e18;
std::int64_t parse_int(const std::string& what, const std::string& text);
std::int64_t parse_int(const std::string& what, const std::string& text, std::int64_t lo,
                       std::int64_t hi);
// "80GB", "80GiB", "141e9", "512MiB" -> bytes (GB = 1e9, GiB = 2^30); negative, infinite
// or NaN sizes are errors.
double parse_bytes(const std::string& what, const std::string& text);

}  // namespace mixpar
