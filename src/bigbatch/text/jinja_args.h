// Binding call arguments to a built-in's parameters as Python binds them to a signature, and
// converting them to C++ types with Python's TypeErrors.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/text/jinja_value.h"

namespace bigbatch::text::jinja {

/// The arguments of a call to `function` bound to `params`: positional arguments fill them in
/// order, keywords by name; an entry is nullopt where the caller gave nothing. Throws Error
/// (TypeError) for too many arguments, an unknown or repeated keyword, or a missing one of the
/// first `required` parameters.
std::vector<std::optional<Value>> bind_args(const Args& args, const std::string& function,
                                            std::initializer_list<const char*> params,
                                            std::size_t required);

/// `v` as an integer (bool or int), else Error (TypeError) naming `what`.
int64_t int_arg(const Value& v, const std::string& what);

/// `v` as a string, else Error (TypeError) naming `what`.
const std::string& string_arg(const Value& v, const std::string& what);

/// An optional string argument: nullopt for nothing or None.
std::optional<std::string> optional_string_arg(const std::optional<Value>& v,
                                               const std::string& what);

/// An optional integer argument: nullopt for nothing or None.
std::optional<int64_t> optional_int_arg(const std::optional<Value>& v, const std::string& what);

}  // namespace bigbatch::text::jinja
