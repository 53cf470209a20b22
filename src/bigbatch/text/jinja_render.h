// The Jinja interpreter: runs a parsed Program with jinja2's scoping (a for loop's iterations,
// macros, set blocks, with and filter blocks have their own scope; if does not) and writes the
// output.
#pragma once

#include <string>

#include "bigbatch/text/jinja_ast.h"

namespace bigbatch::text::jinja {

/// Replaces each constant sub-expression of `program` whose value has a literal form (None,
/// bools, numbers, strings, ranges, and lists, tuples and dicts of them) by its value, as
/// jinja2's optimizer does when it compiles a template. This is no mere speed-up: the folded
/// value comes from jinja2's getitem, where a slice of what cannot be sliced is Undefined
/// instead of the TypeError it is at run time.
void fold_constants(Program& program);

/// The output of `program` rendered with `variables` as its globals (over the built-in ones:
/// range, dict, namespace, raise_exception, strftime_now). Throws Error, located at the
/// construct that failed.
std::string render(const Program& program, const Dict& variables);

}  // namespace bigbatch::text::jinja
