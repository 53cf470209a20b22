#include "bigbatch/text/jinja_operators.h"

#include <cmath>
#include <limits>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_methods.h"
#include "bigbatch/text/jinja_strings.h"

namespace bigbatch::text::jinja {
namespace {

[[noreturn]] void overflow() {
  fail(ErrorKind::kUnsupported, "integers beyond 64 bits are not supported");
}

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined("'" + object_type_repr(object) + "' has no attribute '" + name + "'");
}

Value missing_element(const Value& object, const Value& key) {
  return Value::undefined(object_type_repr(object) + " has no element " + to_repr(key));
}

/// The attribute `name` of `object` that Python's getattr finds, if any.
std::optional<Value> attribute(const Value& object, const std::string& name) {
  if (name.size() > 1 && name[0] == '_' && name[1] == '_')
    return Value::undefined(
        "access to attribute '" + name + "' of '" + type_name(object) + "' object is unsafe.",
        true);
  if (std::optional<Value> m = find_method(object, name))
    return m;
  if (object.type() == Type::kNamespace) {
    if (Value* v = object.as_namespace().find(name))
      return *v;
  }
  if (object.type() == Type::kLoop)
    return loop_attribute(object, name);
  return std::nullopt;
}

std::string operand_types(const char* op, const Value& a, const Value& b) {
  return std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
         type_name(b) + "'";
}

int64_t floor_divide(int64_t a, int64_t b) {
  if (b == 0)
    fail(ErrorKind::kZeroDivision, "integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1)
    overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}

int64_t modulo(int64_t a, int64_t b) {
  if (b == 0)
    fail(ErrorKind::kZeroDivision, "integer modulo by zero");
  if (b == -1)
    return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0)))
    r += b;
  return r;
}

/// Python's float divmod: the floored quotient and the remainder with the divisor's sign.
std::pair<double, double> float_divmod(double a, double b, const char* what) {
  if (b == 0.0)
    fail(ErrorKind::kZeroDivision, std::string("float ") + what + " by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5)
      floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

Value power(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    int64_t base = a.as_int(), exponent = b.as_int();
    if (exponent < 0) {
      if (base == 0)
        fail(ErrorKind::kZeroDivision, "0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    }
    int64_t result = 1;
    while (exponent > 0) {
      if (exponent & 1)
        result = checked_multiply(result, base);
      exponent >>= 1;
      if (exponent > 0)
        base = checked_multiply(base, base);
    }
    return Value::integer(result);
  }
  const double x = a.as_double(), y = b.as_double();
  if (x == 0.0 && y < 0)
    fail(ErrorKind::kZeroDivision, "0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y))
    fail(ErrorKind::kUnsupported, "complex numbers are not supported");
  const double result = std::pow(x, y);
  if (std::isinf(result) && std::isfinite(x) && std::isfinite(y))
    fail(ErrorKind::kOverflow, "(34, 'Numerical result out of range')");
  return Value::floating(result);
}

Value repeat(const Value& sequence, int64_t times) {
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i)
      out += sequence.as_string();
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
  return Value::sequence(sequence.type(), std::move(out));
}

bool repeatable(const Value& v) {
  return v.is_string() || v.type() == Type::kList || v.type() == Type::kTuple;
}

}  // namespace

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    overflow();
  return r;
}

int64_t checked_multiply(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    overflow();
  return r;
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined())
    fail_undefined(object);
  if (std::optional<Value> a = attribute(object, name))
    return *a;
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(std::string_view(name)))
      return *v;
  }
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined())
    fail_undefined(object);
  switch (object.type()) {
    case Type::kDict: {
      if (key.type() != Type::kList && key.type() != Type::kDict) {
        if (const Value* v = object.as_dict().find(key))
          return *v;
      }
      break;
    }
    case Type::kString:
    case Type::kList:
    case Type::kTuple:
    case Type::kRange: {
      if (!key.is_integral())
        break;
      const int64_t n = object.is_string()
                            ? static_cast<int64_t>(code_point_count(object.as_string()))
                            : static_cast<int64_t>(object.as_list().size());
      int64_t i = key.as_int();
      if (i < 0)
        i += n;
      if (i < 0 || i >= n)
        return missing_element(object, key);
      if (!object.is_string())
        return object.as_list()[static_cast<std::size_t>(i)];
      return Value::string(python_slice(object.as_string(), i, i + 1, 1));
    }
    default:
      break;
  }
  if (key.is_string()) {
    if (std::optional<Value> a = attribute(object, key.as_string()))
      return *a;
    return missing_attribute(object, key.as_string());
  }
  return missing_element(object, key);
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined())
    fail_undefined(object);
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none())
      return std::nullopt;
    if (v.is_undefined())
      fail_undefined(v);
    if (!v.is_integral())
      fail(ErrorKind::kType, "slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  if (object.is_string())
    return Value::string(python_slice(object.as_string(), bound(start), bound(stop), bound(step)));
  if (object.type() == Type::kList || object.type() == Type::kTuple) {
    const List& items = object.as_list();
    List out;
    for (std::size_t i : slice_indices(items.size(), bound(start), bound(stop), bound(step)))
      out.push_back(items[i]);
    return Value::sequence(object.type(), std::move(out));
  }
  if (object.type() == Type::kRange) {
    const RangeBounds& r = object.as_range();
    const SliceBounds s =
        slice_bounds(object.as_list().size(), bound(start), bound(stop), bound(step));
    return Value::range(r.start + s.start * r.step, r.start + s.stop * r.step, r.step * s.step);
  }
  // jinja2 compiles slices to Python's subscript, without its getitem's fallback to Undefined.
  if (object.is_dict())
    fail(ErrorKind::kType, "unhashable type: 'slice'");
  fail(ErrorKind::kType, "'" + type_name(object) + "' object is not subscriptable");
}

List iterate(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return {};
    case Type::kString: {
      List out;
      const std::string& s = v.as_string();
      for (std::size_t p = 0; p < s.size();) {
        const std::size_t at = p;
        decode_code_point(s, p);
        out.push_back(Value::string(s.substr(at, p - at)));
      }
      return out;
    }
    case Type::kList:
    case Type::kTuple:
    case Type::kRange:
    case Type::kDictKeys:
    case Type::kDictValues:
    case Type::kDictItems:
      return v.as_list();
    case Type::kDict: {
      List out;
      out.reserve(v.as_dict().items.size());
      for (const auto& item : v.as_dict().items)
        out.push_back(item.first);
      return out;
    }
    case Type::kIterator: {
      IteratorState& it = v.as_iterator();
      List out(it.items.begin() + static_cast<std::ptrdiff_t>(it.position), it.items.end());
      it.position = it.items.size();
      return out;
    }
    case Type::kLoop:
      return *v.as_loop().items;
    default:
      fail(ErrorKind::kType, "'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return 0;
    case Type::kString:
      return static_cast<int64_t>(code_point_count(v.as_string()));
    case Type::kList:
    case Type::kTuple:
    case Type::kRange:
    case Type::kDictKeys:
    case Type::kDictValues:
    case Type::kDictItems:
      return static_cast<int64_t>(v.as_list().size());
    case Type::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    case Type::kLoop:
      return static_cast<int64_t>(v.as_loop().items->size());
    default:
      fail(ErrorKind::kType, "object of type '" + type_name(v) + "' has no len()");
  }
}

Value binary(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined())
    fail_undefined(a);
  if (b.is_undefined())
    fail_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  switch (op) {
    case BinaryOp::kAdd:
      if (numbers) {
        if (floats)
          return Value::floating(a.as_double() + b.as_double());
        return Value::integer(checked_add(a.as_int(), b.as_int()));
      }
      if (a.is_string() && b.is_string())
        return Value::string(a.as_string() + b.as_string());
      if ((a.type() == Type::kList || a.type() == Type::kTuple) && a.type() == b.type()) {
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value::sequence(a.type(), std::move(out));
      }
      if (a.is_string() || a.type() == Type::kList || a.type() == Type::kTuple)
        fail(ErrorKind::kType, "can only concatenate " + type_name(a) + " (not \"" + type_name(b) +
                                   "\") to " + type_name(a));
      fail(ErrorKind::kType, operand_types("+", a, b));
    case BinaryOp::kSubtract:
      if (numbers) {
        if (floats)
          return Value::floating(a.as_double() - b.as_double());
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r))
          overflow();
        return Value::integer(r);
      }
      fail(ErrorKind::kType, operand_types("-", a, b));
    case BinaryOp::kMultiply:
      if (numbers) {
        if (floats)
          return Value::floating(a.as_double() * b.as_double());
        return Value::integer(checked_multiply(a.as_int(), b.as_int()));
      }
      if (repeatable(a) && b.is_integral())
        return repeat(a, b.as_int());
      if (a.is_integral() && repeatable(b))
        return repeat(b, a.as_int());
      if (repeatable(a) || repeatable(b))
        fail(ErrorKind::kType, "can't multiply sequence by non-int of type '" +
                                   type_name(repeatable(a) ? b : a) + "'");
      fail(ErrorKind::kType, operand_types("*", a, b));
    case BinaryOp::kDivide:
      if (numbers) {
        if (b.as_double() == 0.0)
          fail(ErrorKind::kZeroDivision, "division by zero");
        return Value::floating(a.as_double() / b.as_double());
      }
      fail(ErrorKind::kType, operand_types("/", a, b));
    case BinaryOp::kFloorDivide:
      if (numbers) {
        if (floats)
          return Value::floating(
              float_divmod(a.as_double(), b.as_double(), "floor division").first);
        return Value::integer(floor_divide(a.as_int(), b.as_int()));
      }
      fail(ErrorKind::kType, operand_types("//", a, b));
    case BinaryOp::kModulo:
      if (numbers) {
        if (floats)
          return Value::floating(float_divmod(a.as_double(), b.as_double(), "modulo").second);
        return Value::integer(modulo(a.as_int(), b.as_int()));
      }
      if (a.is_string())
        fail(ErrorKind::kUnsupported, "printf-style formatting ('%' on a string) is not supported");
      fail(ErrorKind::kType, operand_types("%", a, b));
    case BinaryOp::kPower:
      if (numbers)
        return power(a, b);
      fail(ErrorKind::kType, std::string("unsupported operand type(s) for ** or pow(): '") +
                                 type_name(a) + "' and '" + type_name(b) + "'");
  }
  fail(ErrorKind::kType, "unknown operator");
}

Value negate(const Value& v) {
  if (v.is_undefined())
    fail_undefined(v);
  if (v.is_float())
    return Value::floating(-v.as_double());
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min())
      overflow();
    return Value::integer(-v.as_int());
  }
  fail(ErrorKind::kType, "bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined())
    fail_undefined(v);
  if (v.is_float())
    return v;
  if (v.is_integral())
    return Value::integer(v.as_int());
  fail(ErrorKind::kType, "bad operand type for unary +: '" + type_name(v) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Type::kUndefined:
      return false;
    case Type::kString:
      if (!item.is_string())
        fail(ErrorKind::kType,
             "'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Type::kDict:
      check_hashable(item);
      return container.as_dict().find(item) != nullptr;
    case Type::kList:
    case Type::kTuple:
    case Type::kRange:
    case Type::kDictKeys:
    case Type::kDictValues:
    case Type::kDictItems:
      for (const Value& v : container.as_list()) {
        if (equals(v, item))
          return true;
      }
      return false;
    case Type::kIterator: {
      IteratorState& it = container.as_iterator();
      while (it.position < it.items.size()) {
        if (equals(it.items[it.position++], item))
          return true;
      }
      return false;
    }
    case Type::kLoop:
      for (const Value& v : *container.as_loop().items) {
        if (equals(v, item))
          return true;
      }
      return false;
    default:
      fail(ErrorKind::kType, "argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value call(const Value& callee, Args& args) {
  if (callee.is_undefined())
    fail_undefined(callee);
  if (callee.type() != Type::kCallable)
    fail(ErrorKind::kType, "'" + type_name(callee) + "' object is not callable");
  return callee.as_callable().call(args);
}

List unpack(const Value& v, std::size_t count) {
  List items;
  try {
    items = iterate(v);
  } catch (const Error&) {
    fail(ErrorKind::kType, "cannot unpack non-iterable " + type_name(v) + " object");
  }
  if (items.size() < count)
    fail(ErrorKind::kValue, "not enough values to unpack (expected " + std::to_string(count) +
                                ", got " + std::to_string(items.size()) + ")");
  if (items.size() > count)
    fail(ErrorKind::kValue, "too many values to unpack (expected " + std::to_string(count) + ")");
  return items;
}

}  // namespace bigbatch::text::jinja
