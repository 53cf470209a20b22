// The runtime value of the Jinja interpreter, with Python's semantics: Undefined apart from None,
// int apart from float, truthiness, str() and repr(), == across types, ordering, and the
// reference semantics of the one mutable object a sandboxed template has (namespace()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bigbatch::text::jinja {

class Value;
/// The items of a list, a tuple or a dict view.
using List = std::vector<Value>;

/// Python types a template value can have.
enum class Type : uint8_t {
  kUndefined,   ///< jinja2's Undefined: prints "", is falsy, iterates empty, fails otherwise
  kNone,        ///< None
  kBool,        ///< bool
  kInt,         ///< int (64 bits; overflow is an error)
  kFloat,       ///< float
  kString,      ///< str (UTF-8; lengths and indices count code points)
  kList,        ///< list
  kTuple,       ///< tuple
  kRange,       ///< range: its items, and its start, stop and step
  kDictKeys,    ///< dict.keys()
  kDictValues,  ///< dict.values()
  kDictItems,   ///< dict.items()
  kDict,        ///< dict, in insertion order
  kNamespace,   ///< namespace(): the mutable object `{% set ns.x = ... %}` assigns to
  kCallable,    ///< a global function, a bound method or a macro
  kLoop,        ///< the `loop` object of a for loop
  kIterator,    ///< a one-shot iterator (what map, select, reverse ... return)
};

struct Args;
struct Dict;
struct Namespace;
struct Callable;
struct LoopState;
struct IteratorState;

/// A value of a template. Copies are cheap: strings, lists and dicts are shared and immutable.
class Value {
 public:
  /// Undefined with no explanation.
  Value() : i_(0) {}
  /// Undefined that explains itself with `hint` when it is used (e.g. "'x' is undefined");
  /// `security`: using it is a SecurityError (what the sandbox returns for list.append).
  static Value undefined(std::string hint, bool security = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  /// A list, tuple or dict view (`type` says which) of `items`.
  static Value sequence(Type type, List items);
  static Value list(List items) { return sequence(Type::kList, std::move(items)); }
  static Value tuple(List items) { return sequence(Type::kTuple, std::move(items)); }
  /// range(start, stop, step) (step != 0).
  static Value range(int64_t start, int64_t stop, int64_t step);
  static Value dict(Dict d);
  static Value make_namespace(std::shared_ptr<Namespace> ns);
  /// A callable named `name` in messages, of Python type `type` ("builtin_function_or_method",
  /// "Macro").
  static Value callable(std::string name, std::function<Value(Args&)> call,
                        std::string type = "builtin_function_or_method");
  static Value loop(std::shared_ptr<LoopState> state);
  static Value iterator(std::shared_ptr<IteratorState> state);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  /// bool, int or float (Python's numbers.Number).
  bool is_number() const {
    return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat;
  }
  /// bool or int: what Python accepts as an index.
  bool is_integral() const { return type_ == Type::kBool || type_ == Type::kInt; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_dict() const { return type_ == Type::kDict; }
  /// list, tuple, range or a dict view: a Value with as_list().
  bool has_items() const { return type_ >= Type::kList && type_ <= Type::kDictItems; }

  bool as_bool() const { return b_; }
  /// The value of a bool or int.
  int64_t as_int() const { return type_ == Type::kBool ? (b_ ? 1 : 0) : i_; }
  /// The value of a bool, int or float.
  double as_double() const { return type_ == Type::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *static_cast<const std::string*>(ptr_.get()); }
  const List& as_list() const { return *static_cast<const List*>(ptr_.get()); }
  const Dict& as_dict() const { return *static_cast<const Dict*>(ptr_.get()); }
  /// The start, stop and step of a range.
  const struct RangeBounds& as_range() const;
  Namespace& as_namespace() const { return *static_cast<Namespace*>(ptr_.get()); }
  const Callable& as_callable() const { return *static_cast<const Callable*>(ptr_.get()); }
  LoopState& as_loop() const { return *static_cast<LoopState*>(ptr_.get()); }
  IteratorState& as_iterator() const { return *static_cast<IteratorState*>(ptr_.get()); }
  /// What an Undefined says when it is used ("" when it was made without a hint).
  const std::string& undefined_hint() const;
  /// Whether using this Undefined is a SecurityError rather than an UndefinedError.
  bool undefined_is_security() const;
  /// The shared object (Python's identity for `is sameas` of containers).
  const void* identity() const { return ptr_.get(); }

 private:
  Type type_ = Type::kUndefined;
  union {
    bool b_;
    int64_t i_;
    double f_;
  };
  std::shared_ptr<void> ptr_;
};

/// What range() was called with.
struct RangeBounds {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
};

/// Arguments of a call: positional, then keyword in the order written.
struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

/// A dict: keys in insertion order, found with Python's == (1, 1.0 and True are one key).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  /// The value of `key`, or nullptr.
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  /// d[key] = value: replaces the value of an existing key, else appends.
  void set(Value key, Value value);
};

/// A namespace() object: attributes in the order first assigned.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attributes;
  Value* find(std::string_view name);
  void set(const std::string& name, Value value);
};

/// Namespaces can hold themselves (`{% set ns.me = ns %}`), a cycle that shared ownership never
/// frees. While a NamespaceArena lives on a thread, the namespaces made there are noted, and
/// when it ends those still alive are emptied. A rendering keeps one: no value outlives it.
class NamespaceArena {
 public:
  NamespaceArena();
  ~NamespaceArena();
  NamespaceArena(const NamespaceArena&) = delete;
  NamespaceArena& operator=(const NamespaceArena&) = delete;
  /// Notes `ns` in the innermost arena of this thread, if any.
  static void adopt(const std::shared_ptr<Namespace>& ns);

 private:
  std::vector<std::weak_ptr<Namespace>> namespaces_;
  NamespaceArena* outer_;
};

/// Something a template can call.
struct Callable {
  std::string name;  ///< for messages: "raise_exception", "str.strip", "m"
  std::string type;  ///< Python's name of its type
  std::function<Value(Args&)> call;
};

/// The state of a for loop behind its `loop` variable.
struct LoopState {
  std::shared_ptr<const List> items;  ///< what the loop iterates over (after its `if` filter)
  std::size_t index = 0;              ///< index0 of the current iteration
  std::size_t depth = 1;
  bool changed_called = false;  ///< whether loop.changed() has been called
  List last_changed;            ///< its arguments the last time
};

/// A one-shot iterator: iterating it (or taking its first item) consumes it, as in Python.
struct IteratorState {
  List items;
  std::size_t position = 0;
  std::string type_name;  ///< Python's name of its type: "generator", "list_reverseiterator"
};

/// Throws the error that using the Undefined `v` raises: UndefinedError (or SecurityError)
/// with its hint.
[[noreturn]] void fail_undefined(const Value& v);

/// Python's bool(v).
bool truthy(const Value& v);

/// Python's str(v) appended to `out` (Undefined: nothing; None: "None"; True; 1.0; ['a', 1]).
void append_str(std::string& out, const Value& v);
std::string to_str(const Value& v);

/// Python's repr(v) appended to `out`.
void append_repr(std::string& out, const Value& v);
std::string to_repr(const Value& v);

/// Python's a == b (1 == 1.0 == True; [1] != (1,); Undefined == Undefined).
bool equals(const Value& a, const Value& b);

/// The ordering comparisons.
enum class CompareOp { kLess, kLessEqual, kGreater, kGreaterEqual };

/// Python's a < b (<=, >, >=): numbers, strings (by code point), lists and tuples
/// (lexicographically); throws Error (TypeError) for types that do not order.
bool compare(const Value& a, const Value& b, CompareOp op);

/// Python's type(v).__name__: "str", "int", "NoneType", "dict", "Undefined", ...
std::string type_name(const Value& v);

/// jinja2's object_type_repr(v), which its undefined messages use: "dict object", "None".
std::string object_type_repr(const Value& v);

/// Throws Error (TypeError) unless `v` is hashable (a dict key): lists, dicts, namespaces are not.
void check_hashable(const Value& v);

}  // namespace bigbatch::text::jinja
