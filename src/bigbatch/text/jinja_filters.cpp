#include "bigbatch/text/jinja_filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <utility>

#include "bigbatch/text/jinja_args.h"
#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_json.h"
#include "bigbatch/text/jinja_methods.h"
#include "bigbatch/text/jinja_operators.h"
#include "bigbatch/text/jinja_strings.h"
#include "bigbatch/text/jinja_tests.h"

namespace bigbatch::text::jinja {
namespace {

Value generator(List items, std::string type = "generator") {
  auto state = std::make_shared<IteratorState>();
  state->items = std::move(items);
  state->type_name = std::move(type);
  return Value::iterator(std::move(state));
}

bool flag(const std::optional<Value>& v) {
  return v && truthy(*v);
}

/// str(x).lower() for strings only (jinja2's ignore_case).
Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(python_lower(v.as_string())) : v;
}

/// The parts of an attribute path: "a.b.0" is a, b, 0 (digits become indices).
List attribute_parts(const std::optional<Value>& attribute) {
  if (!attribute || attribute->is_none())
    return {};
  if (!attribute->is_string())
    return {*attribute};
  List parts;
  for (std::string& part : python_split(attribute->as_string(), std::string("."), -1, false)) {
    if (python_is(part, CharClass::kDigit))
      parts.push_back(Value::integer(std::strtoll(part.c_str(), nullptr, 10)));
    else
      parts.push_back(Value::string(std::move(part)));
  }
  return parts;
}

/// jinja2's make_attrgetter: item[part] for each part, `default` for an Undefined result.
Value get_path(Value item, const List& parts, const std::optional<Value>& fallback = {}) {
  for (const Value& part : parts) {
    item = get_item(item, part);
    if (fallback && !fallback->is_none() && item.is_undefined())
      item = *fallback;
  }
  return item;
}

/// jinja2's make_multi_attrgetter: a key per comma-separated attribute path.
Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  List keys;
  if (attribute && attribute->is_string()) {
    for (const std::string& path :
         python_split(attribute->as_string(), std::string(","), -1, false)) {
      const Value key = get_path(item, attribute_parts(Value::string(path)));
      keys.push_back(case_sensitive ? key : ignore_case(key));
    }
  } else {
    const Value key = get_path(item, attribute_parts(attribute));
    keys.push_back(case_sensitive ? key : ignore_case(key));
  }
  return Value::list(std::move(keys));
}

/// Python's sorted(items, key=..., reverse=...): stable in both directions.
void sort_by_keys(List& items, List& keys, bool reverse) {
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return reverse ? compare(keys[b], keys[a], CompareOp::kLess)
                   : compare(keys[a], keys[b], CompareOp::kLess);
  });
  List sorted;
  sorted.reserve(items.size());
  for (std::size_t i : order)
    sorted.push_back(items[i]);
  items = std::move(sorted);
}

/// Python's float(str): whitespace around, underscores between digits, inf and nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = python_strip(text, std::nullopt, true, true);
  std::string clean;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    clean += s[i];
  }
  std::string lower = python_lower(clean);
  const std::string body =
      !lower.empty() && (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double v = body == "nan" ? std::numeric_limits<double>::quiet_NaN()
                                   : std::numeric_limits<double>::infinity();
    return lower[0] == '-' ? -v : v;
  }
  // [digits][.digits][e[+-]digits] with at least one digit in the mantissa.
  std::size_t i = 0, digits = 0;
  while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i])))
    ++i, ++digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i])))
      ++i, ++digits;
  }
  if (digits == 0)
    return std::nullopt;
  if (i < body.size() && body[i] == 'e') {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-'))
      ++i;
    const std::size_t start = i;
    while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i])))
      ++i;
    if (i == start)
      return std::nullopt;
  }
  if (i != body.size())
    return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

/// Python's int(str, base) for base 10 (and 2, 8, 16 with or without their prefix).
std::optional<int64_t> parse_int(const std::string& text, int64_t base) {
  std::string s = python_strip(text, std::nullopt, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.erase(0, 1);
  }
  if (s.size() > 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2))
      s.erase(0, 2);
  }
  if (s.empty() || s.front() == '_' || s.back() == '_')
    return std::nullopt;
  std::string clean;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (s[i + 1] == '_')
        return std::nullopt;
      continue;
    }
    const char c = static_cast<char>(s[i] | 0x20);
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base)
      return std::nullopt;
    clean += s[i];
  }
  errno = 0;
  const long long v = std::strtoll(clean.c_str(), nullptr, static_cast<int>(base));
  if (errno == ERANGE)
    fail(ErrorKind::kUnsupported, "integers beyond 64 bits are not supported");
  return negative ? -v : v;
}

// ---- filters, in jinja2's alphabetical order ----

Value f_abs(const Value& v, Args& args) {
  bind_args(args, "abs", {}, 0);
  if (v.is_float())
    return Value::floating(std::fabs(v.as_double()));
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min())
      fail(ErrorKind::kUnsupported, "integers beyond 64 bits are not supported");
    return Value::integer(std::llabs(v.as_int()));
  }
  fail(ErrorKind::kType, "bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_attr", {"name"}, 1);
  const std::string& name = string_arg(*a[0], "attribute name");
  if (v.is_undefined())
    fail_undefined(v);
  if (std::optional<Value> m = find_method(v, name))
    return *m;
  if (v.type() == Type::kNamespace) {
    if (Value* found = v.as_namespace().find(name))
      return *found;
  }
  if (v.type() == Type::kLoop) {
    if (std::optional<Value> found = loop_attribute(v, name))
      return *found;
  }
  return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
}

Value f_batch(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_batch", {"linecount", "fill_with"}, 1);
  const int64_t linecount = int_arg(*a[0], "linecount");
  List batches, current;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(current.size()) == linecount) {
      batches.push_back(Value::list(std::move(current)));
      current.clear();
    }
    current.push_back(item);
  }
  if (!current.empty()) {
    if (a[1] && !a[1]->is_none()) {
      while (static_cast<int64_t>(current.size()) < linecount)
        current.push_back(*a[1]);
    }
    batches.push_back(Value::list(std::move(current)));
  }
  return generator(std::move(batches));
}

Value f_capitalize(const Value& v, Args& args) {
  bind_args(args, "do_capitalize", {}, 0);
  return Value::string(python_capitalize(to_str(v)));
}

Value f_center(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_center", {"width"}, 0);
  Args call_args;
  call_args.positional.push_back(a[0] ? *a[0] : Value::integer(80));
  return call(*find_method(Value::string(to_str(v)), "center"), call_args);
}

Value f_length(const Value& v, Args& args) {
  bind_args(args, "len", {}, 0);
  return Value::integer(length(v));
}

Value f_default(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_default", {"default_value", "boolean"}, 0);
  if (v.is_undefined() || (flag(a[1]) && !truthy(v)))
    return a[0] ? *a[0] : Value::string("");
  return v;
}

Value f_dictsort(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_dictsort", {"case_sensitive", "by", "reverse"}, 0);
  std::size_t position = 0;
  if (a[1]) {
    const std::string by = to_str(*a[1]);
    if (by == "value")
      position = 1;
    else if (by != "key")
      fail(ErrorKind::kValue, "You can only sort by either \"key\" or \"value\"");
  }
  if (v.is_undefined())
    fail_undefined(v);
  if (!v.is_dict())
    fail(ErrorKind::kType, "'" + type_name(v) + "' object has no attribute 'items'");
  List items, keys;
  for (const auto& [key, value] : v.as_dict().items) {
    items.push_back(Value::tuple({key, value}));
    const Value& k = position == 0 ? key : value;
    keys.push_back(flag(a[0]) ? k : ignore_case(k));
  }
  sort_by_keys(items, keys, flag(a[2]));
  return Value::list(std::move(items));
}

Value f_escape(const Value& v, Args& args) {
  bind_args(args, "escape", {}, 0);
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value::string(std::move(out));
}

Value f_first(const Value& v, Args& args) {
  bind_args(args, "do_first", {}, 0);
  if (v.type() == Type::kIterator) {
    IteratorState& it = v.as_iterator();
    if (it.position < it.items.size())
      return it.items[it.position++];
  } else {
    const List items = iterate(v);
    if (!items.empty())
      return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_float(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_float", {"default"}, 0);
  const Value fallback = a[0] ? *a[0] : Value::floating(0.0);
  if (v.is_undefined())
    fail_undefined(v);
  if (v.is_number())
    return Value::floating(v.as_double());
  if (v.is_string()) {
    if (std::optional<double> d = parse_float(v.as_string()))
      return Value::floating(*d);
  }
  return fallback;
}

Value f_indent(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_indent", {"width", "first", "blank"}, 0);
  std::string indention = "    ";
  if (a[0]) {
    if (a[0]->is_string())
      indention = a[0]->as_string();
    else
      indention =
          std::string(static_cast<std::size_t>(std::max<int64_t>(0, int_arg(*a[0], "width"))), ' ');
  }
  if (v.is_undefined())
    fail_undefined(v);
  if (!v.is_string())
    fail(ErrorKind::kType, "unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  const std::vector<std::string> lines = python_splitlines(v.as_string() + "\n", false);
  std::string out;
  if (flag(a[2])) {
    for (std::size_t i = 0; i < lines.size(); ++i)
      out += (i ? "\n" + indention : "") + lines[i];
  } else if (!lines.empty()) {
    out = lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i)
      out += "\n" + (lines[i].empty() ? lines[i] : indention + lines[i]);
  }
  if (flag(a[1]))
    out = indention + out;
  return Value::string(std::move(out));
}

Value f_int(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_int", {"default", "base"}, 0);
  const Value fallback = a[0] ? *a[0] : Value::integer(0);
  const int64_t base = a[1] ? int_arg(*a[1], "base") : 10;
  if (v.is_undefined())
    fail_undefined(v);
  if (v.is_integral())
    return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (std::isnan(d) || std::isinf(d))
      fail(ErrorKind::kValue, std::isnan(d) ? "cannot convert float NaN to integer"
                                            : "cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.2e18)
      fail(ErrorKind::kUnsupported, "integers beyond 64 bits are not supported");
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (std::optional<int64_t> i = parse_int(v.as_string(), base))
      return Value::integer(*i);
    if (std::optional<double> d = parse_float(v.as_string())) {
      if (!std::isnan(*d) && !std::isinf(*d) && std::fabs(*d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Value f_join(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_join", {"d", "attribute"}, 0);
  const std::string separator = a[0] ? to_str(*a[0]) : "";
  const List parts = attribute_parts(a[1]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first)
      out += separator;
    first = false;
    append_str(out, a[1] ? get_path(item, parts) : item);
  }
  return Value::string(std::move(out));
}

Value f_last(const Value& v, Args& args) {
  bind_args(args, "do_last", {}, 0);
  if (!v.is_undefined() && !v.is_string() && !v.is_dict() && !v.has_items())
    fail(ErrorKind::kType, "'" + type_name(v) + "' object is not reversible");
  const List items = iterate(v);
  if (!items.empty())
    return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

Value f_list(const Value& v, Args& args) {
  bind_args(args, "do_list", {}, 0);
  return Value::list(iterate(v));
}

Value f_lower(const Value& v, Args& args) {
  bind_args(args, "do_lower", {}, 0);
  return Value::string(python_lower(to_str(v)));
}

Value f_items(const Value& v, Args& args) {
  bind_args(args, "do_items", {}, 0);
  if (v.is_undefined())
    return generator({});
  if (!v.is_dict())
    fail(ErrorKind::kType, "Can only get item pairs from a mapping.");
  List items;
  for (const auto& [key, value] : v.as_dict().items)
    items.push_back(Value::tuple({key, value}));
  return generator(std::move(items));
}

Value f_map(const Value& v, Args& args) {
  if (!truthy(v))
    return generator({});
  List out;
  bool by_attribute = false;
  for (const auto& keyword : args.keyword)
    by_attribute = by_attribute || keyword.first == "attribute";
  if (args.positional.empty() && by_attribute) {
    const auto a = bind_args(args, "do_map", {"attribute", "default"}, 1);
    const List parts = attribute_parts(a[0]);
    for (const Value& item : iterate(v))
      out.push_back(get_path(item, parts, a[1]));
    return generator(std::move(out));
  }
  if (args.positional.empty())
    fail(ErrorKind::kValue, "map requires a filter argument");
  const std::string name = string_arg(args.positional[0], "map filter name");
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(v)) {
    Args each = rest;
    out.push_back(run_filter(name, item, each));
  }
  return generator(std::move(out));
}

Value f_min_max(const Value& v, Args& args, bool maximum) {
  const auto a = bind_args(args, maximum ? "do_max" : "do_min", {"case_sensitive", "attribute"}, 0);
  const List items = iterate(v);
  if (items.empty())
    return Value::undefined("No aggregated item, sequence was empty.");
  const List parts = attribute_parts(a[1]);
  auto key = [&](const Value& item) {
    const Value k = get_path(item, parts);
    return flag(a[0]) ? k : ignore_case(k);
  };
  std::size_t best = 0;
  Value best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (compare(k, best_key, maximum ? CompareOp::kGreater : CompareOp::kLess)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value f_max(const Value& v, Args& args) {
  return f_min_max(v, args, true);
}

Value f_min(const Value& v, Args& args) {
  return f_min_max(v, args, false);
}

/// select, reject, selectattr and rejectattr.
Value select_or_reject(const Value& v, Args& args, bool keep_when, bool by_attribute) {
  if (!truthy(v))
    return generator({});
  std::size_t offset = 0;
  List parts;
  if (by_attribute) {
    if (args.positional.empty())
      fail(ErrorKind::kValue, "Missing parameter for attribute name");
    parts = attribute_parts(args.positional[0]);
    offset = 1;
  }
  const bool has_test = args.positional.size() > offset;
  const std::string test = has_test ? string_arg(args.positional[offset], "test name") : "";
  Args rest;
  if (has_test)
    rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(offset) + 1,
                           args.positional.end());
  rest.keyword = args.keyword;
  List out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? get_path(item, parts) : item;
    bool passed;
    if (has_test) {
      Args each = rest;
      passed = run_test(test, subject, each);
    } else {
      passed = truthy(subject);
    }
    if (passed == keep_when)
      out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_select(const Value& v, Args& args) {
  return select_or_reject(v, args, true, false);
}

Value f_reject(const Value& v, Args& args) {
  return select_or_reject(v, args, false, false);
}

Value f_selectattr(const Value& v, Args& args) {
  return select_or_reject(v, args, true, true);
}

Value f_rejectattr(const Value& v, Args& args) {
  return select_or_reject(v, args, false, true);
}

Value f_replace(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_replace", {"old", "new", "count"}, 2);
  const int64_t count = a[2] && !a[2]->is_none() ? int_arg(*a[2], "count") : -1;
  return Value::string(python_replace(to_str(v), to_str(*a[0]), to_str(*a[1]), count));
}

Value f_reverse(const Value& v, Args& args) {
  bind_args(args, "do_reverse", {}, 0);
  if (v.is_string())
    return Value::string(python_slice(v.as_string(), std::nullopt, std::nullopt, -1));
  if (v.type() == Type::kIterator) {
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  std::string type = "reversed";
  switch (v.type()) {
    case Type::kList:
      type = "list_reverseiterator";
      break;
    case Type::kDict:
    case Type::kDictKeys:
      type = "dict_reversekeyiterator";
      break;
    case Type::kDictValues:
      type = "dict_reversevalueiterator";
      break;
    case Type::kDictItems:
      type = "dict_reverseitemiterator";
      break;
    case Type::kRange:
      type = "range_iterator";
      break;
    case Type::kUndefined:
    case Type::kTuple:
      break;
    default:
      fail(ErrorKind::kValue, "argument must be iterable");
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return generator(std::move(items), type);
}

/// Python's round(x, ndigits) for a float: correctly rounded, ties to even.
double round_float(double x, int64_t ndigits) {
  if (std::isnan(x) || std::isinf(x) || ndigits > 320)
    return x;
  if (ndigits >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-ndigits));
  const double y = x / scale;
  double z = std::nearbyint(y);
  return z * scale;
}

Value f_round(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_round", {"precision", "method"}, 0);
  const int64_t precision = a[0] ? int_arg(*a[0], "precision") : 0;
  const std::string method = a[1] ? to_str(*a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    fail(ErrorKind::kValue, "method must be common, ceil or floor");
  if (!v.is_number())
    fail(ErrorKind::kType, "type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_integral()) {
      if (precision >= 0)
        return Value::integer(v.as_int());
      return Value::integer(static_cast<int64_t>(round_float(v.as_double(), precision)));
    }
    return Value::floating(round_float(v.as_double(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  const double rounded = method == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value::floating(rounded / scale);
}

Value f_safe(const Value& v, Args& args) {
  bind_args(args, "do_mark_safe", {}, 0);
  return Value::string(to_str(v));
}

Value f_slice(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_slice", {"slices", "fill_with"}, 1);
  const int64_t slices = int_arg(*a[0], "slices");
  if (slices <= 0)
    fail(ErrorKind::kZeroDivision, "integer division or modulo by zero");
  const List seq = iterate(v);
  const auto length = static_cast<int64_t>(seq.size());
  const int64_t per_slice = length / slices;
  const int64_t with_extra = length % slices;
  int64_t offset = 0;
  List out;
  for (int64_t n = 0; n < slices; ++n) {
    const int64_t start = offset + n * per_slice;
    if (n < with_extra)
      ++offset;
    const int64_t end = offset + (n + 1) * per_slice;
    List part(seq.begin() + start, seq.begin() + end);
    if (a[1] && !a[1]->is_none() && n >= with_extra)
      part.push_back(*a[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return generator(std::move(out));
}

Value f_sort(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_sort", {"reverse", "case_sensitive", "attribute"}, 0);
  List items = iterate(v);
  List keys;
  keys.reserve(items.size());
  for (const Value& item : items)
    keys.push_back(sort_key(item, a[2], flag(a[1])));
  sort_by_keys(items, keys, flag(a[0]));
  return Value::list(std::move(items));
}

Value f_string(const Value& v, Args& args) {
  bind_args(args, "soft_str", {}, 0);
  return v.is_string() ? v : Value::string(to_str(v));
}

Value f_sum(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_sum", {"attribute", "start"}, 0);
  const List parts = attribute_parts(a[0]);
  Value total = a[1] ? *a[1] : Value::integer(0);
  for (const Value& item : iterate(v))
    total = binary(BinaryOp::kAdd, total, a[0] ? get_path(item, parts) : item);
  return total;
}

Value f_title(const Value& v, Args& args) {
  bind_args(args, "do_title", {}, 0);
  return Value::string(jinja_title(to_str(v)));
}

Value f_tojson(const Value& v, Args& args) {
  const auto a =
      bind_args(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, 0);
  JsonFormat format;
  format.ensure_ascii = flag(a[0]);
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string())
      format.indent = a[1]->as_string();
    else
      format.indent = std::string(
          static_cast<std::size_t>(std::max<int64_t>(0, int_arg(*a[1], "indent"))), ' ');
    format.item_separator = ",";
  }
  if (a[2] && !a[2]->is_none()) {
    const List separators = iterate(*a[2]);
    if (separators.size() != 2)
      fail(ErrorKind::kValue, "separators must be an (item_separator, key_separator) pair");
    format.item_separator = string_arg(separators[0], "item separator");
    format.key_separator = string_arg(separators[1], "key separator");
  }
  format.sort_keys = flag(a[3]);
  return Value::string(to_json(v, format));
}

Value f_trim(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_trim", {"chars"}, 0);
  return Value::string(python_strip(to_str(v), optional_string_arg(a[0], "strip arg"), true, true));
}

Value f_truncate(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_truncate", {"length", "killwords", "end", "leeway"}, 0);
  const int64_t max_length = a[0] ? int_arg(*a[0], "length") : 255;
  const std::string end = a[2] ? to_str(*a[2]) : "...";
  const int64_t leeway = a[3] && !a[3]->is_none() ? int_arg(*a[3], "leeway") : 5;
  const auto end_length = static_cast<int64_t>(code_point_count(end));
  if (max_length < end_length)
    fail(ErrorKind::kValue, "expected length >= " + std::to_string(end_length) + ", got " +
                                std::to_string(max_length));
  if (leeway < 0)
    fail(ErrorKind::kValue, "expected leeway >= 0, got " + std::to_string(leeway));
  if (length(v) <= max_length + leeway)
    return v;
  if (!v.is_string())
    fail(ErrorKind::kType, "truncating a " + type_name(v) + " is not supported");
  const std::string& s = v.as_string();
  const std::string head = python_slice(s, 0, max_length - end_length, std::nullopt);
  if (flag(a[1]))
    return Value::string(head + end);
  return Value::string(python_split(head, std::string(" "), 1, true)[0] + end);
}

Value f_unique(const Value& v, Args& args) {
  const auto a = bind_args(args, "do_unique", {"case_sensitive", "attribute"}, 0);
  const List parts = attribute_parts(a[1]);
  List out, seen;
  for (const Value& item : iterate(v)) {
    Value key = get_path(item, parts);
    if (!flag(a[0]))
      key = ignore_case(key);
    check_hashable(key);
    bool found = false;
    for (const Value& s : seen) {
      if (equals(s, key)) {
        found = true;
        break;
      }
    }
    if (!found) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return generator(std::move(out));
}

/// len(re.findall(r"\w+", str(s))): runs of letters, digits and underscores.
Value f_wordcount(const Value& v, Args& args) {
  bind_args(args, "do_wordcount", {}, 0);
  const std::string s = to_str(v);
  int64_t words = 0;
  bool in_word = false;
  for (std::size_t p = 0; p < s.size();) {
    const std::size_t at = p;
    const char32_t cp = decode_code_point(s, p);
    const bool word =
        cp == '_' || python_is(std::string_view(s).substr(at, p - at), CharClass::kAlnum);
    if (word && !in_word)
      ++words;
    in_word = word;
  }
  return Value::integer(words);
}

Value f_upper(const Value& v, Args& args) {
  bind_args(args, "do_upper", {}, 0);
  return Value::string(python_upper(to_str(v)));
}

constexpr std::pair<std::string_view, FilterFn> kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

/// jinja2's filters that this interpreter does not implement.
constexpr std::string_view kUnsupportedFilters[] = {
    "filesizeformat", "format",    "groupby", "pprint",   "random",
    "striptags",      "urlencode", "urlize",  "wordwrap", "xmlattr",
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& [n, fn] : kFilters) {
    if (n == name)
      return fn;
  }
  return nullptr;
}

bool is_builtin_filter(std::string_view name) {
  if (find_filter(name))
    return true;
  for (std::string_view n : kUnsupportedFilters) {
    if (n == name)
      return true;
  }
  return false;
}

Value run_filter(const std::string& name, const Value& v, Args& args) {
  if (FilterFn filter = find_filter(name))
    return filter(v, args);
  if (is_builtin_filter(name))
    fail(ErrorKind::kUnsupported, "the '" + name + "' filter is not supported");
  fail(ErrorKind::kType, "No filter named '" + name + "'.");
}

}  // namespace bigbatch::text::jinja
