// Python's operators on template values, as jinja2's sandbox applies them: attribute and item
// lookup (each falling back to the other), slicing, iteration, len(), arithmetic, `in`, calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "bigbatch/text/jinja_ast.h"
#include "bigbatch/text/jinja_value.h"

namespace bigbatch::text::jinja {

/// `object.name` (jinja2's getattr): a method of str, dict or list, a namespace's or loop's
/// attribute, else the dict item `name`; else Undefined saying "'dict object' has no attribute
/// 'name'". Throws for an Undefined object (UndefinedError).
Value get_attribute(const Value& object, const std::string& name);

/// `object[key]` (jinja2's getitem): the item, else for a string key the attribute, else
/// Undefined ("list object has no element 5"). Throws for an Undefined object.
Value get_item(const Value& object, const Value& key);

/// `object[start:stop:step]` of a str, list, tuple or range; Error (TypeError) for other types
/// (jinja2 compiles slices to Python's subscript, which has no fallback to Undefined).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

/// What `for x in v` iterates over (a str's characters, a dict's keys, an iterator's remaining
/// items, which it consumes; nothing for Undefined). Throws Error (TypeError) for non-iterables.
List iterate(const Value& v);

/// Python's len(v) (0 for Undefined); Error (TypeError) for what has no length.
int64_t length(const Value& v);

/// `a op b` with Python's semantics (int / int is a float, // and % floor, str * int repeats);
/// Error for an Undefined operand, unsupported types, division by zero or int64 overflow.
Value binary(BinaryOp op, const Value& a, const Value& b);

/// -v and +v.
Value negate(const Value& v);
Value unary_plus(const Value& v);

/// Python's `item in container`.
bool contains(const Value& container, const Value& item);

/// Calls `callee` (an Undefined raises its UndefinedError; a non-callable is a TypeError).
Value call(const Value& callee, Args& args);

/// The `count` items that a tuple target of that size takes from `v`.
List unpack(const Value& v, std::size_t count);

/// Checked int64 arithmetic: Error (kUnsupported: Python's ints would grow) on overflow.
int64_t checked_add(int64_t a, int64_t b);
int64_t checked_multiply(int64_t a, int64_t b);

}  // namespace bigbatch::text::jinja
