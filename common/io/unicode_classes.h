// The Unicode character classes of GPT-2's pre-tokenizer pattern (gpt2_tokenizer.h): \p{L}
// (letters), \p{N} (numbers) and \s (White_Space), as range tables generated from Python's
// unicodedata by scripts/text/gen_unicode_classes.py (unicode_classes.cpp), so that no
// Unicode library is needed.
#pragma once

namespace mixpar {

struct CodePointRange {
  char32_t first, last;  // inclusive
};

bool is_unicode_letter(char32_t cp);  // general category L*
bool is_unicode_number(char32_t cp);  // general category N*
bool is_unicode_space(char32_t cp);   // the White_Space property
const char* unicode_classes_version();  // the Unicode version the tables come from, "14.0.0"

}  // namespace mixpar
