// jinja2's tests (`x is defined`, `x is divisibleby(3)`, ...), with their Python semantics.
#pragma once

#include <string>
#include <string_view>

#include "bigbatch/text/jinja_ast.h"

namespace bigbatch::text::jinja {

/// The test named `name`, or nullptr.
TestFn find_test(std::string_view name);

/// Whether jinja2 has a built-in test `name` (which find_test may lack: `escaped`).
bool is_builtin_test(std::string_view name);

/// Applies the test named `name` (as select() and selectattr() do); Error (kUnsupported) for a
/// test this interpreter lacks, (kType) for an unknown one.
bool run_test(const std::string& name, const Value& v, Args& args);

}  // namespace bigbatch::text::jinja
