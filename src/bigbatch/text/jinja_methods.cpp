#include "bigbatch/text/jinja_methods.h"

#include <algorithm>
#include <string_view>

#include "bigbatch/text/jinja_args.h"
#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_operators.h"
#include "bigbatch/text/jinja_strings.h"

namespace bigbatch::text::jinja {
namespace {

using Method = Value (*)(const Value& self, Args& args, const std::string& name);

Value bound(const Value& self, const std::string& name, Method method) {
  const std::string qualified = type_name(self) + "." + name;
  return Value::callable(
      "method " + name + " of " + type_name(self) + " object",
      [self, qualified, method](Args& args) { return method(self, args, qualified); });
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined(
      "access to attribute '" + name + "' of '" + type_name(self) + "' object is unsafe.", true);
}

Value unsupported(const Value& self, const std::string& name) {
  const std::string what = type_name(self) + "." + name + "()";
  return Value::callable(
      what, [what](Args&) -> Value { fail(ErrorKind::kUnsupported, what + " is not supported"); });
}

// ---- str ----

Value str_strip(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"chars"}, 0);
  const std::optional<std::string> chars = optional_string_arg(a[0], name + " arg");
  const bool left = name != "str.rstrip", right = name != "str.lstrip";
  return Value::string(python_strip(self.as_string(), chars, left, right));
}

Value str_split(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"sep", "maxsplit"}, 0);
  const std::optional<std::string> sep = optional_string_arg(a[0], "sep");
  const int64_t maxsplit = a[1] ? int_arg(*a[1], "maxsplit") : -1;
  List parts;
  for (std::string& part : python_split(self.as_string(), sep, maxsplit, name == "str.rsplit"))
    parts.push_back(Value::string(std::move(part)));
  return Value::list(std::move(parts));
}

Value str_splitlines(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"keepends"}, 0);
  List parts;
  for (std::string& part : python_splitlines(self.as_string(), a[0] && truthy(*a[0])))
    parts.push_back(Value::string(std::move(part)));
  return Value::list(std::move(parts));
}

/// Whether s[start:end] starts (or ends) with `affix`, a str or a tuple of str.
Value str_affix(const Value& self, Args& args, const std::string& name) {
  const bool starts = name == "str.startswith";
  const auto a = bind_args(args, name, {"affix", "start", "end"}, 1);
  const std::optional<int64_t> start = optional_int_arg(a[1], "start");
  const std::optional<int64_t> end = optional_int_arg(a[2], "end");
  const std::string window = python_slice(self.as_string(), start, end, std::nullopt);
  auto test = [&](const Value& affix) {
    if (!affix.is_string())
      fail(ErrorKind::kType, std::string(starts ? "startswith" : "endswith") +
                                 " first arg must be str or a tuple of str, not " +
                                 type_name(affix));
    const std::string& s = affix.as_string();
    if (s.size() > window.size())
      return false;
    return starts ? window.compare(0, s.size(), s) == 0
                  : window.compare(window.size() - s.size(), s.size(), s) == 0;
  };
  if (a[0]->type() == Type::kTuple) {
    for (const Value& affix : a[0]->as_list()) {
      if (test(affix))
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  return Value::boolean(test(*a[0]));
}

Value str_case(const Value& self, Args& args, const std::string& name) {
  bind_args(args, name, {}, 0);
  const std::string& s = self.as_string();
  if (name == "str.upper")
    return Value::string(python_upper(s));
  if (name == "str.lower")
    return Value::string(python_lower(s));
  if (name == "str.title")
    return Value::string(python_title(s));
  if (name == "str.capitalize")
    return Value::string(python_capitalize(s));
  return Value::string(python_swapcase(s));
}

Value str_replace(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"old", "new", "count"}, 2);
  const int64_t count = a[2] ? int_arg(*a[2], "count") : -1;
  return Value::string(python_replace(self.as_string(), string_arg(*a[0], "replace() argument 1"),
                                      string_arg(*a[1], "replace() argument 2"), count));
}

Value str_find(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"sub", "start", "end"}, 1);
  const std::string& sub = string_arg(*a[0], "must be str, not");
  const std::optional<int64_t> start = optional_int_arg(a[1], "start");
  const std::optional<int64_t> end = optional_int_arg(a[2], "end");
  if (name == "str.count")
    return Value::integer(python_count(self.as_string(), sub, start, end));
  const bool right = name == "str.rfind" || name == "str.rindex";
  const int64_t at = python_find(self.as_string(), sub, start, end, right);
  if (at < 0 && (name == "str.index" || name == "str.rindex"))
    fail(ErrorKind::kValue, "substring not found");
  return Value::integer(at);
}

Value str_join(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"iterable"}, 1);
  const List items = iterate(*a[0]);
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      fail(ErrorKind::kType, "sequence item " + std::to_string(i) + ": expected str instance, " +
                                 type_name(items[i]) + " found");
    if (i)
      out += self.as_string();
    out += items[i].as_string();
  }
  return Value::string(std::move(out));
}

Value str_is(const Value& self, Args& args, const std::string& name) {
  bind_args(args, name, {}, 0);
  static const std::pair<std::string_view, CharClass> kClasses[] = {
      {"str.isdigit", CharClass::kDigit},     {"str.isdecimal", CharClass::kDecimal},
      {"str.isnumeric", CharClass::kNumeric}, {"str.isalpha", CharClass::kAlpha},
      {"str.isalnum", CharClass::kAlnum},     {"str.isspace", CharClass::kSpace},
      {"str.isupper", CharClass::kUpper},     {"str.islower", CharClass::kLower},
      {"str.istitle", CharClass::kTitle},
  };
  if (name == "str.isascii")
    return Value::boolean(is_ascii(self.as_string()));
  for (const auto& [n, c] : kClasses) {
    if (n == name)
      return Value::boolean(python_is(self.as_string(), c));
  }
  return Value::boolean(false);
}

Value str_pad(const Value& self, Args& args, const std::string& name) {
  const bool zfill = name == "str.zfill";
  const auto a =
      zfill ? bind_args(args, name, {"width"}, 1) : bind_args(args, name, {"width", "fillchar"}, 1);
  const int64_t width = int_arg(*a[0], "width");
  std::string fill = " ";
  if (!zfill && a[1]) {
    fill = string_arg(*a[1], "fillchar");
    if (code_point_count(fill) != 1)
      fail(ErrorKind::kType, "The fill character must be exactly one character long");
  }
  const std::string& s = self.as_string();
  const auto n = static_cast<int64_t>(code_point_count(s));
  if (width <= n)
    return self;
  const int64_t pad = width - n;
  auto fills = [&](int64_t count) {
    std::string out;
    for (int64_t i = 0; i < count; ++i)
      out += fill;
    return out;
  };
  if (zfill) {
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    std::string zeros(static_cast<std::size_t>(pad), '0');
    return Value::string(sign ? s.substr(0, 1) + zeros + s.substr(1) : zeros + s);
  }
  if (name == "str.ljust")
    return Value::string(s + fills(pad));
  if (name == "str.rjust")
    return Value::string(fills(pad) + s);
  // center: Python puts the extra fill on the left when the width and the length are odd.
  const int64_t left = pad / 2 + (pad & width & 1);
  return Value::string(fills(left) + s + fills(pad - left));
}

Value str_partition(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"sep"}, 1);
  const std::string& sep = string_arg(*a[0], "sep");
  if (sep.empty())
    fail(ErrorKind::kValue, "empty separator");
  const std::string& s = self.as_string();
  const bool right = name == "str.rpartition";
  const std::size_t at = right ? s.rfind(sep) : s.find(sep);
  if (at == std::string::npos) {
    if (right)
      return Value::tuple({Value::string(""), Value::string(""), self});
    return Value::tuple({self, Value::string(""), Value::string("")});
  }
  return Value::tuple({Value::string(s.substr(0, at)), Value::string(sep),
                       Value::string(s.substr(at + sep.size()))});
}

Value str_remove_affix(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"affix"}, 1);
  const std::string& affix = string_arg(*a[0], "affix");
  const std::string& s = self.as_string();
  if (affix.size() > s.size())
    return self;
  if (name == "str.removeprefix")
    return s.compare(0, affix.size(), affix) == 0 ? Value::string(s.substr(affix.size())) : self;
  return s.compare(s.size() - affix.size(), affix.size(), affix) == 0
             ? Value::string(s.substr(0, s.size() - affix.size()))
             : self;
}

std::optional<Value> string_method(const Value& self, const std::string& name) {
  static const std::pair<std::string_view, Method> kMethods[] = {
      {"strip", str_strip},
      {"lstrip", str_strip},
      {"rstrip", str_strip},
      {"split", str_split},
      {"rsplit", str_split},
      {"splitlines", str_splitlines},
      {"startswith", str_affix},
      {"endswith", str_affix},
      {"upper", str_case},
      {"lower", str_case},
      {"title", str_case},
      {"capitalize", str_case},
      {"swapcase", str_case},
      {"replace", str_replace},
      {"find", str_find},
      {"rfind", str_find},
      {"index", str_find},
      {"rindex", str_find},
      {"count", str_find},
      {"join", str_join},
      {"isdigit", str_is},
      {"isdecimal", str_is},
      {"isnumeric", str_is},
      {"isalpha", str_is},
      {"isalnum", str_is},
      {"isspace", str_is},
      {"isupper", str_is},
      {"islower", str_is},
      {"istitle", str_is},
      {"isascii", str_is},
      {"center", str_pad},
      {"ljust", str_pad},
      {"rjust", str_pad},
      {"zfill", str_pad},
      {"partition", str_partition},
      {"rpartition", str_partition},
      {"removeprefix", str_remove_affix},
      {"removesuffix", str_remove_affix},
  };
  for (const auto& [n, method] : kMethods) {
    if (n == name)
      return bound(self, name, method);
  }
  static const char* const kUnsupported[] = {"format",    "format_map",   "encode",
                                             "casefold",  "expandtabs",   "translate",
                                             "maketrans", "isidentifier", "isprintable"};
  for (const char* n : kUnsupported) {
    if (name == n)
      return unsupported(self, name);
  }
  return std::nullopt;
}

// ---- dict ----

Value dict_get(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"key", "default"}, 1);
  check_hashable(*a[0]);
  if (const Value* v = self.as_dict().find(*a[0]))
    return *v;
  return a[1] ? *a[1] : Value::none();
}

Value dict_view(const Value& self, Args& args, const std::string& name) {
  bind_args(args, name, {}, 0);
  const Dict& d = self.as_dict();
  List items;
  items.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (name == "dict.keys")
      items.push_back(k);
    else if (name == "dict.values")
      items.push_back(v);
    else
      items.push_back(Value::tuple({k, v}));
  }
  const Type type = name == "dict.keys"     ? Type::kDictKeys
                    : name == "dict.values" ? Type::kDictValues
                                            : Type::kDictItems;
  return Value::sequence(type, std::move(items));
}

Value dict_copy(const Value& self, Args& args, const std::string& name) {
  bind_args(args, name, {}, 0);
  return Value::dict(self.as_dict());
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  if (name == "get")
    return bound(self, name, dict_get);
  if (name == "keys" || name == "values" || name == "items")
    return bound(self, name, dict_view);
  if (name == "copy")
    return bound(self, name, dict_copy);
  static const char* const kMutating[] = {"clear", "pop", "popitem", "setdefault", "update"};
  for (const char* n : kMutating) {
    if (name == n)
      return unsafe(self, name);
  }
  if (name == "fromkeys")
    return unsupported(self, name);
  return std::nullopt;
}

// ---- list, tuple ----

Value sequence_count(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"value"}, 1);
  const auto n = std::count_if(self.as_list().begin(), self.as_list().end(),
                               [&](const Value& v) { return equals(v, *a[0]); });
  return Value::integer(static_cast<int64_t>(n));
}

Value sequence_index(const Value& self, Args& args, const std::string& name) {
  const auto a = bind_args(args, name, {"value"}, 1);
  const List& items = self.as_list();
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (equals(items[i], *a[0]))
      return Value::integer(static_cast<int64_t>(i));
  }
  fail(ErrorKind::kValue, to_repr(*a[0]) + " is not in " + type_name(self));
}

Value list_copy(const Value& self, Args& args, const std::string& name) {
  bind_args(args, name, {}, 0);
  return Value::list(self.as_list());
}

std::optional<Value> sequence_method(const Value& self, const std::string& name) {
  if (self.type() == Type::kRange) {
    if (name == "start")
      return Value::integer(self.as_range().start);
    if (name == "stop")
      return Value::integer(self.as_range().stop);
    if (name == "step")
      return Value::integer(self.as_range().step);
  }
  if (name == "count")
    return bound(self, name, sequence_count);
  if (name == "index")
    return bound(self, name, sequence_index);
  if (self.type() != Type::kList)
    return std::nullopt;
  if (name == "copy")
    return bound(self, name, list_copy);
  static const char* const kMutating[] = {"append", "clear",  "extend",  "insert",
                                          "pop",    "remove", "reverse", "sort"};
  for (const char* n : kMutating) {
    if (name == n)
      return unsafe(self, name);
  }
  return std::nullopt;
}

// ---- loop ----

Value loop_cycle(const Value& self, Args& args, const std::string&) {
  if (args.positional.empty())
    fail(ErrorKind::kType, "no items for cycling given");
  return args.positional[self.as_loop().index % args.positional.size()];
}

Value loop_changed(const Value& self, Args& args, const std::string&) {
  LoopState& loop = self.as_loop();
  bool same = loop.changed_called && loop.last_changed.size() == args.positional.size();
  for (std::size_t i = 0; same && i < args.positional.size(); ++i)
    same = equals(loop.last_changed[i], args.positional[i]);
  if (same)
    return Value::boolean(false);
  loop.changed_called = true;
  loop.last_changed = args.positional;
  return Value::boolean(true);
}

}  // namespace

std::optional<Value> find_method(const Value& self, const std::string& name) {
  switch (self.type()) {
    case Type::kString:
      return string_method(self, name);
    case Type::kDict:
      return dict_method(self, name);
    case Type::kList:
    case Type::kTuple:
    case Type::kRange:
      return sequence_method(self, name);
    default:
      return std::nullopt;
  }
}

std::optional<Value> loop_attribute(const Value& loop, const std::string& name) {
  const LoopState& s = loop.as_loop();
  const auto index = static_cast<int64_t>(s.index);
  const auto n = static_cast<int64_t>(s.items->size());
  if (name == "index")
    return Value::integer(index + 1);
  if (name == "index0")
    return Value::integer(index);
  if (name == "revindex")
    return Value::integer(n - index);
  if (name == "revindex0")
    return Value::integer(n - index - 1);
  if (name == "first")
    return Value::boolean(index == 0);
  if (name == "last")
    return Value::boolean(index == n - 1);
  if (name == "length")
    return Value::integer(n);
  if (name == "depth")
    return Value::integer(static_cast<int64_t>(s.depth));
  if (name == "depth0")
    return Value::integer(static_cast<int64_t>(s.depth) - 1);
  if (name == "previtem")
    return index > 0 ? (*s.items)[s.index - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return index + 1 < n ? (*s.items)[s.index + 1] : Value::undefined("there is no next item");
  if (name == "cycle")
    return Value::callable("method cycle of LoopContext object",
                           [loop](Args& args) { return loop_cycle(loop, args, "cycle"); });
  if (name == "changed")
    return Value::callable("method changed of LoopContext object",
                           [loop](Args& args) { return loop_changed(loop, args, "changed"); });
  return std::nullopt;
}

}  // namespace bigbatch::text::jinja
