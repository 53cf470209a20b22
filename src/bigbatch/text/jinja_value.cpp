#include "bigbatch/text/jinja_value.h"

#include <algorithm>
#include <string>
#include <vector>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_strings.h"

namespace bigbatch::text::jinja {
namespace {

/// Deeper nesting than this in repr() or == is taken for a cycle (a namespace holding itself).
constexpr int kMaxDepth = 200;

void check_depth(int depth) {
  if (depth > kMaxDepth)
    fail(ErrorKind::kOverflow, "maximum recursion depth exceeded");
}

void append_repr_at(std::string& out, const Value& v, int depth);

/// The containers being written, for Python's "[...]" and "{...}" where one contains itself.
thread_local std::vector<const void*> writing;

/// Marks `v` as being written while alive, unless it already is (then `recursive`).
class Reentry {
 public:
  explicit Reentry(const void* identity)
      : recursive_(std::find(writing.begin(), writing.end(), identity) != writing.end()) {
    if (!recursive_)
      writing.push_back(identity);
  }
  ~Reentry() {
    if (!recursive_)
      writing.pop_back();
  }
  bool recursive() const { return recursive_; }

 private:
  bool recursive_;
};

void append_items(std::string& out, const List& items, int depth) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i)
      out += ", ";
    append_repr_at(out, items[i], depth + 1);
  }
}

void append_dict(std::string& out, const Dict& d, int depth) {
  out += '{';
  for (std::size_t i = 0; i < d.items.size(); ++i) {
    if (i)
      out += ", ";
    append_repr_at(out, d.items[i].first, depth + 1);
    out += ": ";
    append_repr_at(out, d.items[i].second, depth + 1);
  }
  out += '}';
}

/// str() and repr() differ only for strings and Undefined at the top; inside containers both
/// are repr().
void append_repr_at(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.type()) {
    case Type::kUndefined:
      out += "Undefined";
      return;
    case Type::kString:
      append_python_repr(out, v.as_string());
      return;
    case Type::kList: {
      const Reentry reentry(v.identity());
      if (reentry.recursive()) {
        out += "[...]";
        return;
      }
      out += '[';
      append_items(out, v.as_list(), depth);
      out += ']';
      return;
    }
    case Type::kTuple:
      out += '(';
      append_items(out, v.as_list(), depth);
      if (v.as_list().size() == 1)
        out += ',';
      out += ')';
      return;
    case Type::kRange: {
      const RangeBounds& r = v.as_range();
      out += "range(" + std::to_string(r.start) + ", " + std::to_string(r.stop);
      if (r.step != 1)
        out += ", " + std::to_string(r.step);
      out += ')';
      return;
    }
    case Type::kDictKeys:
    case Type::kDictValues:
    case Type::kDictItems:
      out += type_name(v) + "([";
      append_items(out, v.as_list(), depth);
      out += "])";
      return;
    case Type::kDict: {
      const Reentry reentry(v.identity());
      if (reentry.recursive()) {
        out += "{...}";
        return;
      }
      append_dict(out, v.as_dict(), depth);
      return;
    }
    case Type::kNamespace: {
      const Reentry reentry(v.identity());
      if (reentry.recursive()) {
        out += "<Namespace {...}>";
        return;
      }
      out += "<Namespace {";
      const auto& attributes = v.as_namespace().attributes;
      for (std::size_t i = 0; i < attributes.size(); ++i) {
        if (i)
          out += ", ";
        append_python_repr(out, attributes[i].first);
        out += ": ";
        append_repr_at(out, attributes[i].second, depth + 1);
      }
      out += "}>";
      return;
    }
    default:
      append_str(out, v);
      return;
  }
}

bool set_equal(const List& a, const List& b, int depth);

bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float())
      return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type())
    return false;
  switch (a.type()) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return a.as_string() == b.as_string();
    case Type::kList:
    case Type::kTuple:
    case Type::kRange: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size())
        return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals_at(x[i], y[i], depth + 1))
          return false;
      }
      return true;
    }
    case Type::kDictKeys:
    case Type::kDictItems:
      return set_equal(a.as_list(), b.as_list(), depth);
    case Type::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size())
        return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.find(key);
        if (!other || !equals_at(value, *other, depth + 1))
          return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool set_equal(const List& a, const List& b, int depth) {
  if (a.size() != b.size())
    return false;
  for (const Value& x : a) {
    bool found = false;
    for (const Value& y : b) {
      if (equals_at(x, y, depth + 1)) {
        found = true;
        break;
      }
    }
    if (!found)
      return false;
  }
  return true;
}

const char* op_symbol(CompareOp op) {
  switch (op) {
    case CompareOp::kLess:
      return "<";
    case CompareOp::kLessEqual:
      return "<=";
    case CompareOp::kGreater:
      return ">";
    case CompareOp::kGreaterEqual:
      return ">=";
  }
  return "<";
}

template <typename T>
bool apply(const T& x, const T& y, CompareOp op) {
  switch (op) {
    case CompareOp::kLess:
      return x < y;
    case CompareOp::kLessEqual:
      return x <= y;
    case CompareOp::kGreater:
      return x > y;
    case CompareOp::kGreaterEqual:
      return y <= x;
  }
  return false;
}

}  // namespace

namespace {
struct UndefinedInfo {
  std::string hint;
  bool security;
};
}  // namespace

Value Value::undefined(std::string hint, bool security) {
  Value v;
  if (!hint.empty())
    v.ptr_ = std::make_shared<UndefinedInfo>(UndefinedInfo{std::move(hint), security});
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::sequence(Type type, List items) {
  Value v;
  v.type_ = type;
  v.ptr_ = std::make_shared<List>(std::move(items));
  return v;
}

namespace {
/// A range's items with its bounds; Values hold it through its List base.
struct RangeList : List {
  RangeBounds bounds;
};
}  // namespace

Value Value::range(int64_t start, int64_t stop, int64_t step) {
  auto r = std::make_shared<RangeList>();
  r->bounds = {start, stop, step};
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    r->push_back(Value::integer(i));
  Value v;
  v.type_ = Type::kRange;
  v.ptr_ = std::shared_ptr<List>(std::move(r));
  return v;
}

const RangeBounds& Value::as_range() const {
  return static_cast<const RangeList&>(as_list()).bounds;
}

Value Value::dict(Dict d) {
  Value v;
  v.type_ = Type::kDict;
  v.ptr_ = std::make_shared<Dict>(std::move(d));
  return v;
}

namespace {
thread_local NamespaceArena* current_arena = nullptr;
}  // namespace

NamespaceArena::NamespaceArena() : outer_(current_arena) {
  current_arena = this;
}

NamespaceArena::~NamespaceArena() {
  current_arena = outer_;
  for (const std::weak_ptr<Namespace>& weak : namespaces_) {
    if (std::shared_ptr<Namespace> ns = weak.lock()) {
      std::vector<std::pair<std::string, Value>> attributes;
      attributes.swap(ns->attributes);  // destroyed here, after ns is empty
    }
  }
}

void NamespaceArena::adopt(const std::shared_ptr<Namespace>& ns) {
  if (current_arena)
    current_arena->namespaces_.push_back(ns);
}

Value Value::make_namespace(std::shared_ptr<Namespace> ns) {
  NamespaceArena::adopt(ns);
  Value v;
  v.type_ = Type::kNamespace;
  v.ptr_ = std::move(ns);
  return v;
}

Value Value::callable(std::string name, std::function<Value(Args&)> call, std::string type) {
  Value v;
  v.type_ = Type::kCallable;
  v.ptr_ = std::make_shared<Callable>(Callable{std::move(name), std::move(type), std::move(call)});
  return v;
}

Value Value::loop(std::shared_ptr<LoopState> state) {
  Value v;
  v.type_ = Type::kLoop;
  v.ptr_ = std::move(state);
  return v;
}

Value Value::iterator(std::shared_ptr<IteratorState> state) {
  Value v;
  v.type_ = Type::kIterator;
  v.ptr_ = std::move(state);
  return v;
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return ptr_ ? static_cast<const UndefinedInfo*>(ptr_.get())->hint : kEmpty;
}

bool Value::undefined_is_security() const {
  return ptr_ && static_cast<const UndefinedInfo*>(ptr_.get())->security;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string())
    return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items) {
    if (equals(k, key))
      return &v;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key)
      return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value* Namespace::find(std::string_view name) {
  for (auto& [n, v] : attributes) {
    if (n == name)
      return &v;
  }
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  if (Value* existing = find(name))
    *existing = std::move(value);
  else
    attributes.emplace_back(name, std::move(value));
}

void fail_undefined(const Value& v) {
  const std::string& hint = v.undefined_hint();
  fail(v.undefined_is_security() ? ErrorKind::kSecurity : ErrorKind::kUndefined,
       hint.empty() ? "undefined value" : hint);
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return v.as_bool();
    case Type::kInt:
      return v.as_int() != 0;
    case Type::kFloat:
      return v.as_double() != 0.0;
    case Type::kString:
      return !v.as_string().empty();
    case Type::kList:
    case Type::kTuple:
    case Type::kRange:
    case Type::kDictKeys:
    case Type::kDictValues:
    case Type::kDictItems:
      return !v.as_list().empty();
    case Type::kDict:
      return !v.as_dict().items.empty();
    default:
      return true;
  }
}

void append_str(std::string& out, const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return;
    case Type::kNone:
      out += "None";
      return;
    case Type::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Type::kFloat:
      out += python_float_repr(v.as_double());
      return;
    case Type::kString:
      out += v.as_string();
      return;
    case Type::kCallable: {
      // Python's reprs, less the addresses.
      const Callable& c = v.as_callable();
      if (c.type == "Macro")
        out += "<Macro '" + c.name + "'>";
      else if (c.type == "builtin_function_or_method")
        out += "<built-in " + c.name + ">";
      else if (c.type == "function")
        out += "<function " + c.name + ">";
      else if (c.type == "type")
        out += "<class '" + c.name + "'>";
      else
        out += "<" + c.type + " object>";
      return;
    }
    case Type::kLoop: {
      const LoopState& loop = v.as_loop();
      out += "<LoopContext " + std::to_string(loop.index + 1) + "/" +
             std::to_string(loop.items->size()) + ">";
      return;
    }
    case Type::kIterator:
      out += "<" + v.as_iterator().type_name + " object>";
      return;
    default:
      append_repr_at(out, v, 0);
      return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string())
    return v.as_string();
  std::string out;
  append_str(out, v);
  return out;
}

void append_repr(std::string& out, const Value& v) {
  append_repr_at(out, v, 0);
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

bool equals(const Value& a, const Value& b) {
  return equals_at(a, b, 0);
}

bool compare(const Value& a, const Value& b, CompareOp op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float())
      return apply(a.as_double(), b.as_double(), op);
    return apply(a.as_int(), b.as_int(), op);
  }
  if (a.is_string() && b.is_string())
    return apply(a.as_string(), b.as_string(), op);
  if ((a.type() == Type::kList || a.type() == Type::kTuple) && a.type() == b.type()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i]))
        return compare(x[i], y[i], op);
    }
    return apply(x.size(), y.size(), op);
  }
  if (a.is_undefined())
    fail_undefined(a);
  if (b.is_undefined())
    fail_undefined(b);
  fail(ErrorKind::kType, std::string("'") + op_symbol(op) +
                             "' not supported between instances of '" + type_name(a) + "' and '" +
                             type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return "list";
    case Type::kTuple:
      return "tuple";
    case Type::kRange:
      return "range";
    case Type::kDictKeys:
      return "dict_keys";
    case Type::kDictValues:
      return "dict_values";
    case Type::kDictItems:
      return "dict_items";
    case Type::kDict:
      return "dict";
    case Type::kNamespace:
      return "TemplateNamespace";
    case Type::kCallable:
      return v.as_callable().type;
    case Type::kLoop:
      return "LoopContext";
    case Type::kIterator:
      return v.as_iterator().type_name;
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  switch (v.type()) {
    case Type::kNone:
      return "None";
    case Type::kNamespace:
      return "transformers.utils.chat_template_utils.TemplateNamespace object";
    case Type::kLoop:
      return "jinja2.runtime.LoopContext object";
    case Type::kCallable:
      if (v.as_callable().type == "Macro")
        return "jinja2.runtime.Macro object";
      return type_name(v) + " object";
    default:
      return type_name(v) + " object";
  }
}

void check_hashable(const Value& v) {
  switch (v.type()) {
    case Type::kList:
    case Type::kDict:
    case Type::kDictKeys:
    case Type::kDictItems:
      fail(ErrorKind::kType, "unhashable type: '" + type_name(v) + "'");
    case Type::kTuple:
      for (const Value& item : v.as_list())
        check_hashable(item);
      return;
    default:
      return;
  }
}

}  // namespace bigbatch::text::jinja
