// jinja2's filters (`x | trim`, `xs | map(attribute='name') | join(', ')`, ...) with their
// Python semantics, and transformers' tojson.
#pragma once

#include <string>
#include <string_view>

#include "bigbatch/text/jinja_ast.h"

namespace bigbatch::text::jinja {

/// The filter named `name`, or nullptr.
FilterFn find_filter(std::string_view name);

/// Whether jinja2 has a built-in filter `name` (which find_filter may lack: wordwrap, ...).
bool is_builtin_filter(std::string_view name);

/// Applies the filter named `name` (as map('upper') does); Error (kUnsupported) for a filter
/// this interpreter lacks, (kType) for an unknown one.
Value run_filter(const std::string& name, const Value& v, Args& args);

}  // namespace bigbatch::text::jinja
