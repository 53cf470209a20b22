// Python's str operations on UTF-8 text, as the Jinja interpreter needs them: indices and lengths
// count code points, whitespace is Python's, case mappings are Unicode's full ones (ICU), and
// repr() quotes and escapes as Python does. Every text passed in is valid UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bigbatch::text::jinja {

/// Whether every byte of `s` is ASCII.
bool is_ascii(std::string_view s);

/// The code point at byte `pos` of `s`; advances `pos` past it.
char32_t decode_code_point(std::string_view s, std::size_t& pos);

/// The number of code points of `s` (Python's len()).
std::size_t code_point_count(std::string_view s);

/// The byte offset of each code point of `s`, then s.size(): size() is len(s) + 1.
std::vector<std::size_t> code_point_offsets(std::string_view s);

/// Python's str.isspace() for one code point (which is what strip() and split() remove).
bool is_python_space(char32_t cp);

/// str.strip / lstrip / rstrip: removes from the chosen ends the code points of `chars`, or
/// whitespace when `chars` is empty (std::nullopt).
std::string python_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                         bool right);

/// str.split(sep, maxsplit) (`sep` nullopt: runs of whitespace, no empty parts); a negative
/// `maxsplit` means no limit. `from_right` gives rsplit. Throws Error (ValueError) for an empty
/// separator.
std::vector<std::string> python_split(std::string_view s, const std::optional<std::string>& sep,
                                      int64_t maxsplit, bool from_right);

/// str.splitlines(keepends): splits at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029.
std::vector<std::string> python_splitlines(std::string_view s, bool keepends);

/// str.upper() and str.lower(), with Unicode's full case mappings ("ß".upper() == "SS").
std::string python_upper(std::string_view s);
std::string python_lower(std::string_view s);
/// str.title(): title case after an uncased code point, lower case after a cased one.
std::string python_title(std::string_view s);
/// str.capitalize(): the first code point in title case, the rest in lower case.
std::string python_capitalize(std::string_view s);
/// str.swapcase().
std::string python_swapcase(std::string_view s);

/// str.replace(old, new, count) (count < 0: all); an empty `old` inserts between code points.
std::string python_replace(std::string_view s, std::string_view old, std::string_view repl,
                           int64_t count);

/// str.find / rfind as a code point index, or -1; `sub` is searched in s[start:end] (Python's
/// slice bounds, in code points; nullopt for the default).
int64_t python_find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
                    std::optional<int64_t> end, bool from_right);

/// str.count(sub, start, end): non-overlapping occurrences.
int64_t python_count(std::string_view s, std::string_view sub, std::optional<int64_t> start,
                     std::optional<int64_t> end);

/// The character classes of str.isdigit() and its kin.
enum class CharClass { kDigit, kDecimal, kNumeric, kAlpha, kAlnum, kSpace, kUpper, kLower, kTitle };
/// str.isdigit(), isdecimal(), ..., isupper(), islower(), istitle() as Python defines each.
bool python_is(std::string_view s, CharClass what);

/// Appends Python's repr() of the string `s`: quoted with ' (or " when `s` has ' and no "),
/// with \\, \n, \r, \t, \xhh, \uhhhh and \Uhhhhhhhh escapes for what is not printable.
void append_python_repr(std::string& out, std::string_view s);

/// Python's repr() of a float: the shortest digits that round-trip, "1e-05", "1e+16", "0.5",
/// "2.0", "inf", "-inf", "nan".
std::string python_float_repr(double value);

/// jinja2's `title` filter: upper-cases the first character of each word (words begin after
/// '-', whitespace, '(', '{', '[', '<'), lower-cases the rest.
std::string jinja_title(std::string_view s);

/// The code points of `s` in s[start:stop:step] with Python's slice rules (nullopt: default).
/// Throws Error (ValueError) for a zero step.
std::string python_slice(std::string_view s, std::optional<int64_t> start,
                         std::optional<int64_t> stop, std::optional<int64_t> step);

/// Python's slice(start, stop, step).indices(length): the bounds clamped to the sequence.
struct SliceBounds {
  int64_t start, stop, step;
};
SliceBounds slice_bounds(std::size_t length, std::optional<int64_t> start,
                         std::optional<int64_t> stop, std::optional<int64_t> step);

/// The indices that s[start:stop:step] takes of a sequence of `length` items.
std::vector<std::size_t> slice_indices(std::size_t length, std::optional<int64_t> start,
                                       std::optional<int64_t> stop, std::optional<int64_t> step);

}  // namespace bigbatch::text::jinja
