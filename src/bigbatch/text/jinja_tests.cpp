#include "bigbatch/text/jinja_tests.h"

#include <utility>

#include "bigbatch/text/jinja_args.h"
#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_filters.h"
#include "bigbatch/text/jinja_operators.h"
#include "bigbatch/text/jinja_strings.h"

namespace bigbatch::text::jinja {
namespace {

/// The one argument a comparison test takes.
Value other(Args& args, const char* test) {
  return *bind_args(args, test, {"other"}, 1)[0];
}

bool modulo_is(const Value& v, const Value& divisor, int64_t remainder) {
  return equals(binary(BinaryOp::kModulo, v, divisor), Value::integer(remainder));
}

bool test_odd(const Value& v, Args& args) {
  bind_args(args, "test_odd", {}, 0);
  return modulo_is(v, Value::integer(2), 1);
}

bool test_even(const Value& v, Args& args) {
  bind_args(args, "test_even", {}, 0);
  return modulo_is(v, Value::integer(2), 0);
}

bool test_divisibleby(const Value& v, Args& args) {
  const auto a = bind_args(args, "test_divisibleby", {"num"}, 1);
  return modulo_is(v, *a[0], 0);
}

bool test_defined(const Value& v, Args&) {
  return !v.is_undefined();
}

bool test_undefined(const Value& v, Args&) {
  return v.is_undefined();
}

bool test_none(const Value& v, Args&) {
  return v.is_none();
}

bool test_boolean(const Value& v, Args&) {
  return v.is_bool();
}

bool test_false(const Value& v, Args&) {
  return v.is_bool() && !v.as_bool();
}

bool test_true(const Value& v, Args&) {
  return v.is_bool() && v.as_bool();
}

bool test_integer(const Value& v, Args&) {
  return v.is_int();
}

bool test_float(const Value& v, Args&) {
  return v.is_float();
}

bool test_number(const Value& v, Args&) {
  return v.is_number();
}

bool test_string(const Value& v, Args&) {
  return v.is_string();
}

bool test_mapping(const Value& v, Args&) {
  return v.is_dict();
}

bool test_lower(const Value& v, Args&) {
  return python_is(to_str(v), CharClass::kLower);
}

bool test_upper(const Value& v, Args&) {
  return python_is(to_str(v), CharClass::kUpper);
}

/// len() works and the type has __getitem__.
bool test_sequence(const Value& v, Args&) {
  switch (v.type()) {
    case Type::kUndefined:
    case Type::kString:
    case Type::kList:
    case Type::kTuple:
    case Type::kRange:
    case Type::kDict:
      return true;
    default:
      return false;
  }
}

bool test_iterable(const Value& v, Args&) {
  switch (v.type()) {
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
    case Type::kNamespace:
    case Type::kCallable:
      return false;
    default:
      return true;
  }
}

/// Undefined and LoopContext define __call__.
bool test_callable(const Value& v, Args&) {
  return v.type() == Type::kCallable || v.is_undefined() || v.type() == Type::kLoop;
}

/// Python's `is`: None and the bools are singletons, CPython caches the small ints.
bool test_sameas(const Value& v, Args& args) {
  const Value o = other(args, "test_sameas");
  if (v.type() != o.type())
    return false;
  switch (v.type()) {
    case Type::kNone:
      return true;
    case Type::kBool:
      return v.as_bool() == o.as_bool();
    case Type::kInt:
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Type::kFloat:
      return false;
    default:
      return v.identity() == o.identity();
  }
}

bool test_in(const Value& v, Args& args) {
  const auto a = bind_args(args, "test_in", {"seq"}, 1);
  return contains(*a[0], v);
}

bool test_filter(const Value& v, Args&) {
  return v.is_string() && (find_filter(v.as_string()) || is_builtin_filter(v.as_string()));
}

bool test_test(const Value& v, Args&) {
  return v.is_string() && is_builtin_test(v.as_string());
}

bool test_eq(const Value& v, Args& args) {
  return equals(v, other(args, "eq"));
}

bool test_ne(const Value& v, Args& args) {
  return !equals(v, other(args, "ne"));
}

bool test_lt(const Value& v, Args& args) {
  return compare(v, other(args, "lt"), CompareOp::kLess);
}

bool test_le(const Value& v, Args& args) {
  return compare(v, other(args, "le"), CompareOp::kLessEqual);
}

bool test_gt(const Value& v, Args& args) {
  return compare(v, other(args, "gt"), CompareOp::kGreater);
}

bool test_ge(const Value& v, Args& args) {
  return compare(v, other(args, "ge"), CompareOp::kGreaterEqual);
}

constexpr std::pair<std::string_view, TestFn> kTests[] = {
    {"odd", test_odd},
    {"even", test_even},
    {"divisibleby", test_divisibleby},
    {"defined", test_defined},
    {"undefined", test_undefined},
    {"filter", test_filter},
    {"test", test_test},
    {"none", test_none},
    {"boolean", test_boolean},
    {"false", test_false},
    {"true", test_true},
    {"integer", test_integer},
    {"float", test_float},
    {"lower", test_lower},
    {"upper", test_upper},
    {"string", test_string},
    {"mapping", test_mapping},
    {"number", test_number},
    {"sequence", test_sequence},
    {"iterable", test_iterable},
    {"callable", test_callable},
    {"sameas", test_sameas},
    {"in", test_in},
    {"==", test_eq},
    {"eq", test_eq},
    {"equalto", test_eq},
    {"!=", test_ne},
    {"ne", test_ne},
    {">", test_gt},
    {"gt", test_gt},
    {"greaterthan", test_gt},
    {">=", test_ge},
    {"ge", test_ge},
    {"<", test_lt},
    {"lt", test_lt},
    {"lessthan", test_lt},
    {"<=", test_le},
    {"le", test_le},
};

/// jinja2's tests that this interpreter does not implement.
constexpr std::string_view kUnsupportedTests[] = {"escaped"};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& [n, fn] : kTests) {
    if (n == name)
      return fn;
  }
  return nullptr;
}

bool is_builtin_test(std::string_view name) {
  if (find_test(name))
    return true;
  for (std::string_view n : kUnsupportedTests) {
    if (n == name)
      return true;
  }
  return false;
}

bool run_test(const std::string& name, const Value& v, Args& args) {
  if (TestFn test = find_test(name))
    return test(v, args);
  if (is_builtin_test(name))
    fail(ErrorKind::kUnsupported, "the '" + name + "' test is not supported");
  fail(ErrorKind::kType, "No test named '" + name + "'.");
}

}  // namespace bigbatch::text::jinja
