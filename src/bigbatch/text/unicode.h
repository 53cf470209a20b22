// UTF-8 and the Unicode facts the tokenizers need, through ICU (no tables of our own).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace bigbatch::text {

/// Decodes the code point of valid UTF-8 `text` at byte `pos` into `cp`; returns its length in
/// bytes. The text must have passed check_utf8.
std::size_t next_code_point(const std::string& text, std::size_t pos, char32_t& cp);

/// Appends `cp` to `out` as UTF-8.
void append_utf8(std::string& out, char32_t cp);

/// Throws InputError naming `what` and the byte offset unless `text` is valid UTF-8.
void check_utf8(const std::string& text, const std::string& what);

/// `bytes` as UTF-8 with every maximal invalid subsequence replaced by U+FFFD (as Rust's
/// String::from_utf8_lossy, which the byte-level decoders use).
std::string utf8_lossy(const std::string& bytes);

/// Whether `bytes` is valid UTF-8.
bool is_valid_utf8(const std::string& bytes);

/// The byte offsets where the extended grapheme clusters of valid UTF-8 `text` end, in order
/// (ICU's character break iterator, Unicode's UAX #29): "e\u0301x" -> {3, 4}.
std::vector<std::size_t> grapheme_ends(const std::string& text);

/// Unicode normalization forms.
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

/// `text` in the normalization form `form` (ICU's Normalizer2).
std::string normalize(const std::string& text, NormalForm form);

/// Each code point of `text` replaced by its full lowercase mapping, without context (as Rust's
/// char::to_lowercase applied one character at a time: "İ" -> "i̇", "Σ" -> "σ" everywhere).
std::string lowercase(const std::string& text);

/// The White_Space property (Rust's char::is_whitespace).
bool is_whitespace(char32_t cp);
/// General category P* (Pc, Pd, Ps, Pe, Pi, Pf, Po).
bool is_punctuation(char32_t cp);
/// General category C* (Cc, Cf, Cn, Co, Cs).
bool is_other(char32_t cp);
/// General category Mn.
bool is_nonspacing_mark(char32_t cp);
/// General category M* (Mn, Mc, Me).
bool is_mark(char32_t cp);
/// General category N* (Nd, Nl, No): Rust's char::is_numeric.
bool is_numeric(char32_t cp);
/// Alphabetic or numeric: Rust's char::is_alphanumeric.
bool is_alphanumeric(char32_t cp);
/// The CJK ideograph blocks BERT puts spaces around (its `_is_chinese_char`).
bool is_chinese_char(char32_t cp);

}  // namespace bigbatch::text
