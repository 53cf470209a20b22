// The Jinja parser: tokens to a Program, with jinja2's grammar and operator precedence.
#pragma once

#include <string>

#include "bigbatch/text/jinja_ast.h"

namespace bigbatch::text::jinja {

/// Parses `source` (raw template text; newlines are normalized first). Throws Error: kSyntax
/// with what was expected and what was found, or kUnsupported naming the tag, filter, test or
/// feature this interpreter refuses.
Program parse(const std::string& source);

}  // namespace bigbatch::text::jinja
