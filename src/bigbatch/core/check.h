// Throwing checks whose messages carry the offending values.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace bigbatch {

/// An error in what the user supplied: a config value, a data file, a batch setting.
/// The command line reports it and exits with code 2 (usage error); nothing is written.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Concatenates any streamable values into one string: `cat("got ", 3, " of ", 4)`.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace bigbatch

/// Throws bigbatch::InputError with the concatenated message unless `cond` holds.
/// Use for everything a user can get wrong; it never vanishes under NDEBUG.
#define BB_CHECK_INPUT(cond, ...)                                 \
  do {                                                            \
    if (!(cond))                                                  \
      throw ::bigbatch::InputError(::bigbatch::cat(__VA_ARGS__)); \
  } while (false)

/// Throws std::logic_error unless `cond` holds: a broken invariant of bigbatch or of the caller's
/// use of the library API (for example a micro-batch that does not belong to the open window).
#define BB_CHECK(cond, ...)                                                      \
  do {                                                                           \
    if (!(cond))                                                                 \
      throw std::logic_error(                                                    \
          ::bigbatch::cat("bigbatch: check failed (" #cond "): ", __VA_ARGS__)); \
  } while (false)
