// The methods a sandboxed template may call on values (Python's str, dict, list and tuple
// methods; those that would mutate are refused as jinja2's sandbox refuses them), and the
// attributes of the `loop` object.
#pragma once

#include <optional>
#include <string>

#include "bigbatch/text/jinja_value.h"

namespace bigbatch::text::jinja {

/// `self.name` bound, if `self`'s Python type has a method `name`: a callable, or for a method
/// that mutates (list.append, dict.update) an Undefined whose use is a SecurityError.
std::optional<Value> find_method(const Value& self, const std::string& name);

/// The attribute `name` of a `loop` value (index, first, previtem, cycle, ...), if it has one.
std::optional<Value> loop_attribute(const Value& loop, const std::string& name);

}  // namespace bigbatch::text::jinja
