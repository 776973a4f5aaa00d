#include "util/cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/errors.h"

namespace mixpar {

ArgParser::ArgParser(std::string prog, std::string description)
    : prog_(std::move(prog)), description_(std::move(description)) {}

ArgParser& ArgParser::flag(const std::string& name, const std::string& help) {
  specs_[name] = Spec{true, "", help};
  order_.push_back(name);
  return *this;
}

ArgParser& ArgParser::option(const std::string& name, const std::string& default_value,
                             const std::string& help) {
  specs_[name] = Spec{false, default_value, help};
  order_.push_back(name);
  return *this;
}

ArgParser& ArgParser::positional(const std::string& name, const std::string& help, bool required,
                                 bool variadic) {
  positional_specs_.push_back({name, help, required, variadic});
  return *this;
}

const ArgParser::Spec& ArgParser::spec(const std::string& name) const {
  auto it = specs_.find(name);
  if (it == specs_.end()) throw std::logic_error("ArgParser: undeclared option --" + name);
  return it->second;
}

namespace {
// "-2.5", "-1e-8", "-inf", "-nan" are values, not options: a tool about numbers must take
// them as positionals without the user having to write `--` first.
// Numbers are decimal everywhere: "0x2" would be 2 to strtod, 0 to a reader who expects
// decimal, so hexadecimal is refused by name (is_hex) rather than taken by some tools.
bool is_hex(const std::string& text) {
  const std::size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return text.size() > i + 1 && text[i] == '0' && (text[i + 1] == 'x' || text[i + 1] == 'X');
}

bool is_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || is_hex(text)) {
    return false;
  }
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}
}  // namespace

void ArgParser::parse(int argc, char** argv) {
  // Parsing starts from scratch, so a parser can be reused without stale values.
  values_.clear();
  positional_values_.clear();
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_done || arg.size() < 2 || arg.rfind("--", 0) != 0) {
      if (!options_done && arg.size() > 1 && arg[0] == '-' && !is_number(arg)) {
        throw InputError("unknown option '" + arg + "' (see --help)");
      }
      positional_values_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "--help") {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    std::string name = arg.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) throw InputError("unknown option '--" + name + "' (see --help)");
    // One rule for every tool: an option given twice is refused, never "the last one wins"
    // (`--tp 2 ... --tp 1` would otherwise run as tp 1 without a word).
    if (values_.count(name) > 0) {
      throw InputError("--" + name + " is given twice; give each option once");
    }
    if (it->second.is_flag) {
      if (inline_value) throw InputError("--" + name + " takes no value");
      // (insert_or_assign of a std::string: assigning the literal trips GCC 12's false
      // -Wrestrict positive, bug 105329, in Release builds.)
      values_.insert_or_assign(name, std::string("1"));
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw InputError("--" + name + " needs a value");
      // `--save --overwrite` would save into a directory named "--overwrite": a value that
      // looks like a flag is taken only when written `--save=--overwrite`.
      const std::string next = argv[i + 1];
      if (next.rfind("--", 0) == 0) {
        throw InputError("--" + name + " needs a value, but is followed by the flag '" + next +
                         "' (write --" + name + "=" + next + " if that is the value)");
      }
      value = argv[++i];
    }
    values_[name] = value;
  }
  std::size_t need = 0;
  bool variadic = false;
  for (const auto& p : positional_specs_) {
    need += p.required ? 1 : 0;
    variadic = variadic || p.variadic;
  }
  if (positional_values_.size() < need) {
    throw InputError("missing argument <" + positional_specs_[positional_values_.size()].name + ">");
  }
  if (!variadic && positional_values_.size() > positional_specs_.size()) {
    throw InputError("unexpected argument '" + positional_values_[positional_specs_.size()] + "'");
  }
}

std::string ArgParser::usage() const {
  std::string out = "usage: " + prog_ + " [options]";
  for (const auto& p : positional_specs_) {
    out += p.required ? " <" + p.name + ">" : " [" + p.name + "]";
    if (p.variadic) out += "...";
  }
  out += "\n\n" + description_ + "\n";
  if (!positional_specs_.empty()) out += "\narguments:\n";
  for (const auto& p : positional_specs_) out += "  " + p.name + "\n      " + p.help + "\n";
  out += "\noptions:\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    out += "  --" + name + (s.is_flag ? "" : " VALUE");
    if (!s.is_flag && !s.default_value.empty()) out += " (default " + s.default_value + ")";
    out += "\n      " + s.help + "\n";
  }
  out += "  --help\n      print this help and exit\n";
  return out;
}

bool ArgParser::given(const std::string& name) const {
  spec(name);
  return values_.count(name) > 0;
}

bool ArgParser::get_flag(const std::string& name) const {
  if (!spec(name).is_flag) throw std::logic_error("ArgParser: --" + name + " is not a flag");
  return values_.count(name) > 0;
}

std::string ArgParser::get(const std::string& name) const {
  const Spec& s = spec(name);
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  if (s.default_value.empty()) throw InputError("--" + name + " is required");
  return s.default_value;
}

std::int64_t ArgParser::get_int(const std::string& name) const {
  return parse_int("--" + name, get(name));
}

std::int64_t ArgParser::get_int(const std::string& name, std::int64_t lo, std::int64_t hi) const {
  return parse_int("--" + name, get(name), lo, hi);
}

double ArgParser::get_double(const std::string& name) const {
  return parse_double("--" + name, get(name));
}

std::string ArgParser::get_choice(const std::string& name,
                                  const std::vector<std::string>& choices) const {
  const std::string v = get(name);
  std::string all;
  for (const auto& c : choices) {
    if (c == v) return v;
    all += (all.empty() ? "" : "|") + c;
  }
  throw InputError("--" + name + ": '" + v + "' is not one of " + all);
}

namespace {

// A decimal literal (already accepted by parse_double, so finite, decimal, whole text) as its
// exact value digits x 10^exponent, with digits free of leading and trailing zeros ("" for 0):
// the literal's value before strtod rounds it to a double.
struct ExactDecimal {
  bool negative = false;
  std::string digits;
  std::int64_t exponent = 0;
};

ExactDecimal exact_decimal(const std::string& text) {
  ExactDecimal d;
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) d.negative = text[i++] == '-';
  std::int64_t fraction_digits = 0;
  bool in_fraction = false;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      in_fraction = true;
      continue;
    }
    if (!(d.digits.empty() && text[i] == '0')) d.digits += text[i];
    if (in_fraction) ++fraction_digits;
  }
  std::int64_t e = 0;
  if (i < text.size()) {
    ++i;
    const bool negative_e = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    // Capped: an exponent past a million means the same (out of range, or not whole) to us.
    for (; i < text.size(); ++i) e = std::min<std::int64_t>(e * 10 + (text[i] - '0'), 1000000);
    if (negative_e) e = -e;
  }
  d.exponent = e - fraction_digits;
  while (!d.digits.empty() && d.digits.back() == '0') {
    d.digits.pop_back();
    ++d.exponent;
  }
  if (d.digits.empty()) d.exponent = 0;
  return d;
}

bool is_plain_integer(const std::string& text) {
  const std::size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return text.size() > i && text.find_first_not_of("0123456789", i) == std::string::npos;
}

// parse_double without the exactness rule for long integers (parse_int checks the literal
// itself, exactly).
double parse_rounded_double(const std::string& what, const std::string& text) {
  if (is_hex(text)) {
    throw InputError(what + ": '" + text + "' is hexadecimal; numbers are decimal (e.g. 2, 1e-3)");
  }
  if (!is_number(text)) throw InputError(what + ": '" + text + "' is not a number");
  errno = 0;
  const double v = std::strtod(text.c_str(), nullptr);
  // Underflow (ERANGE with a tiny or zero result) is a correctly rounded value and is kept:
  // "1e-320" is a subnormal double. Only overflow of a finite literal is an error; "inf"
  // itself is a valid input.
  if (errno == ERANGE && std::isinf(v)) {
    throw InputError(what + ": '" + text + "' is out of the range of a double");
  }
  return v;
}

}  // namespace

double parse_double(const std::string& what, const std::string& text) {
  const double v = parse_rounded_double(what, text);
  // A whole number written digit by digit means that number: above 2^53 a double may hold
  // only a neighbour (9007199254740993 becomes ...992), which is refused, never rounded.
  if (is_plain_integer(text) && std::fabs(v) >= 9007199254740992.0) {
    char exact[400];
    std::snprintf(exact, sizeof exact, "%.0f", std::fabs(v));  // glibc prints it exactly
    const ExactDecimal d = exact_decimal(text);
    if (exact_decimal(exact).digits != d.digits ||
        exact_decimal(exact).exponent != d.exponent) {
      throw InputError(what + ": '" + text +
                       "' is not exactly a double (whole numbers above 2^53 = "
                       "9007199254740992 are rounded); give a nearby value such as " +
                       std::string(v < 0 ? "-" : "") + exact);
    }
  }
  return v;
}

std::int64_t parse_int(const std::string& what, const std::string& text) {
  const double v = parse_rounded_double(what, text);
  if (std::isnan(v)) throw InputError(what + ": '" + text + "' is not a whole number");
  const InputError out_of_range(what + ": '" + text +
                                "' is out of range (whole numbers from -9e18 to 9e18)");
  if (std::isinf(v)) throw out_of_range;
  // The literal's exact value, not the double's: "9007199254740993" is that seed, not
  // ...992, and "1.00000000000000001" is no whole number although strtod rounds it to 1.
  const ExactDecimal d = exact_decimal(text);
  if (d.exponent < 0) throw InputError(what + ": '" + text + "' is not a whole number");
  if (static_cast<std::int64_t>(d.digits.size()) + d.exponent > 19) throw out_of_range;
  std::uint64_t magnitude = 0;
  for (char c : d.digits) magnitude = magnitude * 10 + static_cast<std::uint64_t>(c - '0');
  for (std::int64_t k = 0; k < d.exponent; ++k) {
    if (magnitude > static_cast<std::uint64_t>(kMaxWholeNumber) / 10) throw out_of_range;
    magnitude *= 10;
  }
  if (magnitude > static_cast<std::uint64_t>(kMaxWholeNumber)) throw out_of_range;
  const auto m = static_cast<std::int64_t>(magnitude);
  return d.negative ? -m : m;
}

std::int64_t parse_int(const std::string& what, const std::string& text, std::int64_t lo,
                       std::int64_t hi) {
  const std::int64_t v = parse_int(what, text);
  if (v < lo || v > hi) {
    throw InputError(what + ": " + std::to_string(v) + " is out of range (" + std::to_string(lo) +
                     " to " + std::to_string(hi) + ")");
  }
  return v;
}

double parse_bytes(const std::string& what, const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0},
      {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1.0}};
  // Errors name the whole text ("80XB"), not the part left after a unit was removed.
  const InputError bad(what + ": '" + text + "' is not a size (e.g. 80GB, 512MiB, 1e9)");
  std::string number = text;
  double scale = 1.0;
  for (const auto& [suffix, unit] : kUnits) {
    const std::size_t n = std::strlen(suffix);
    if (text.size() > n && text.compare(text.size() - n, n, suffix) == 0) {
      number = text.substr(0, text.size() - n);
      scale = unit;
      break;
    }
  }
  if (!is_number(number)) throw bad;
  const double v = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(v) || v < 0) throw bad;
  return v;
}

}  // namespace mixpar
