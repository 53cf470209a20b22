// The syntax tree of a parsed Jinja template: expressions and statements, each with the byte
// offset in the source where it starts (for error messages).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/text/jinja_value.h"

namespace bigbatch::text::jinja {

/// A filter: the value before the `|`, and the call's arguments.
using FilterFn = Value (*)(const Value& input, Args& args);
/// A test: the value before `is`, and the call's arguments.
using TestFn = bool (*)(const Value& input, Args& args);

enum class ExprKind {
  kLiteral,   ///< value
  kName,      ///< name
  kList,      ///< children
  kTuple,     ///< children
  kDict,      ///< children: key, value, key, value, ...
  kGetAttr,   ///< children[0].name
  kGetItem,   ///< children[0][children[1]]
  kSlice,     ///< start:stop:step as children[0..2], each may be null (only as a kGetItem key)
  kCall,      ///< children[0](children[1..], kwargs)
  kFilter,    ///< children[0] | name(children[1..], kwargs); children[0] null in a filter block
  kTest,      ///< children[0] is name(children[1..], kwargs)
  kNot,       ///< not children[0]
  kNegate,    ///< -children[0]
  kPlus,      ///< +children[0]
  kBinary,    ///< children[0] op children[1]
  kConcat,    ///< children joined with ~
  kCompare,   ///< children[0] comparisons[0] children[1] comparisons[1] children[2] ...
  kAnd,       ///< children[0] and children[1]
  kOr,        ///< children[0] or children[1]
  kCondExpr,  ///< children[1] if children[0] else children[2] (children[2] may be null)
};

enum class BinaryOp { kAdd, kSubtract, kMultiply, kDivide, kFloorDivide, kModulo, kPower };

enum class Comparison {
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
  kIn,
  kNotIn
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  std::size_t position = 0;
  Value value;       ///< kLiteral
  std::string name;  ///< kName; kGetAttr's attribute; kFilter's and kTest's name
  BinaryOp op = BinaryOp::kAdd;
  std::vector<Comparison> comparisons;  ///< kCompare
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;  ///< keyword arguments
  FilterFn filter = nullptr;                              ///< kFilter
  bool contextual = false;  ///< kFilter: one that jinja2 passes the context (map, select, ...)
  TestFn test = nullptr;    ///< kTest
};

/// What an assignment or a for loop binds.
struct Target {
  enum class Kind { kName, kAttribute, kTuple };
  Kind kind = Kind::kName;
  std::string name;           ///< kName; the namespace of kAttribute
  std::string attribute;      ///< kAttribute: {% set ns.attribute = ... %}
  std::vector<Target> items;  ///< kTuple
  std::size_t position = 0;
};

enum class StmtKind {
  kText,         ///< text
  kOutput,       ///< {{ expr }}
  kIf,           ///< branches, else_body
  kFor,          ///< for target in expr [if condition]: body, else_body
  kSet,          ///< {% set target = expr %}
  kSetBlock,     ///< {% set target [| filters] %}body{% endset %}; filters in expr (may be null)
  kBreak,        ///< {% break %}
  kContinue,     ///< {% continue %}
  kMacro,        ///< {% macro name(params) %}body{% endmacro %}
  kFilterBlock,  ///< {% filter expr %}body{% endfilter %}
  kWith,         ///< {% with targets = values %}body{% endwith %}
  kScope,        ///< a body in its own scope: {% generation %}body{% endgeneration %}
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind;
  std::size_t position = 0;
  std::string text;  ///< kText
  /// kOutput of an expression that may be constant, which jinja2 tries to evaluate when it
  /// compiles the template (Expr.as_const): a slice of what cannot be sliced is Undefined there,
  /// through its getitem, where at run time it is an error.
  bool constant = false;
  ExprPtr expr;       ///< kOutput, kFor (iterable), kSet (value), kSetBlock/kFilterBlock (filters)
  ExprPtr condition;  ///< kFor's `if`
  std::vector<std::pair<ExprPtr, Body>> branches;  ///< kIf: if and elif tests with their bodies
  Body body;
  Body else_body;
  Target target;                    ///< kFor, kSet, kSetBlock
  std::string name;                 ///< kMacro
  std::vector<std::string> params;  ///< kMacro
  std::vector<ExprPtr> defaults;    ///< kMacro: the defaults of the last params
  std::vector<Target> targets;      ///< kWith
  std::vector<ExprPtr> values;      ///< kWith
};

/// A parsed template.
struct Program {
  std::string source;  ///< normalized source, which positions refer to
  Body body;
};

}  // namespace bigbatch::text::jinja
