#include "bigbatch/text/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

struct Regex::Impl {
  regex_t* regex = nullptr;
};

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(new Impl) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  check_utf8(pattern, cat(where, ": the pattern"));
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  OnigErrorInfo info;
  const int rc = onig_new(&impl_->regex, begin, begin + pattern.size(), ONIG_OPTION_NONE,
                          ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    throw InputError(cat(where, ": the regular expression \"", pattern,
                         "\" does not compile: ", reinterpret_cast<char*>(message)));
  }
}

Regex::~Regex() {
  if (impl_->regex)
    onig_free(impl_->regex);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(const std::string& text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  OnigRegion* region = onig_region_new();
  std::size_t start = 0;
  bool have_last = false;
  std::size_t last_end = 0;
  while (start <= text.size()) {
    onig_region_clear(region);
    const int rc =
        onig_search(impl_->regex, begin, end, begin + start, end, region, ONIG_OPTION_NONE);
    if (rc < 0)
      break;  // ONIG_MISMATCH (or an error: no further matches)
    const auto s = static_cast<std::size_t>(region->beg[0]);
    const auto e = static_cast<std::size_t>(region->end[0]);
    if (s == e && have_last && last_end == e) {
      if (start >= text.size())
        break;
      char32_t cp;
      start += next_code_point(text, start, cp);
      continue;
    }
    start = e;
    have_last = true;
    last_end = e;
    matches.emplace_back(s, e);
  }
  onig_region_free(region, 1);
  return matches;
}

}  // namespace bigbatch::text
