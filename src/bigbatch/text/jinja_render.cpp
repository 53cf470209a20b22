#include "bigbatch/text/jinja_render.h"

#include <memory>
#include <optional>
#include <utility>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_globals.h"
#include "bigbatch/text/jinja_lexer.h"
#include "bigbatch/text/jinja_operators.h"

namespace bigbatch::text::jinja {
namespace {

/// Deeper macro recursion than this is an error (Python would hit its recursion limit).
constexpr int kMaxCallDepth = 250;

/// A scope: the template's top level, one iteration of a for loop, a macro call, a with,
/// filter, set or generation block. Lookups go up the parents; assignments stay here.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> names;
  const Dict* dict = nullptr;  ///< names given from outside (globals, variables)

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      for (const auto& [n, v] : f->names) {
        if (n == name)
          return &v;
      }
      if (f->dict) {
        if (const Value* v = f->dict->find(std::string_view(name)))
          return v;
      }
    }
    return nullptr;
  }

  void set(const std::string& name, Value value) {
    for (auto& [n, v] : names) {
      if (n == name) {
        v = std::move(value);
        return;
      }
    }
    names.emplace_back(name, std::move(value));
  }
};

using FramePtr = std::shared_ptr<Frame>;

FramePtr child_of(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

enum class Flow { kNormal, kBreak, kContinue };

/// Thrown while folding a constant expression at what needs the run time (a name, a call).
struct NotConstant {};

class Renderer {
 public:
  Renderer(const Program& program, std::string& out) : program_(program), out_(&out) {}

  void run(const FramePtr& frame) {
    top_ = frame;
    exec(program_.body, frame);
  }

  /// The value of `e` as jinja2's Expr.as_const computes it, or nullopt where that needs the
  /// run time (a name, a call) or fails.
  std::optional<Value> constant_value(const Expr& e) {
    folding_ = true;
    try {
      Value v = eval(e, std::make_shared<Frame>());
      folding_ = false;
      return v;
    } catch (const Error&) {
    } catch (const NotConstant&) {
    }
    folding_ = false;
    return std::nullopt;
  }

 private:
  Flow exec(const Body& body, const FramePtr& frame) {
    for (const auto& s : body) {
      const Flow flow = exec_located(*s, frame);
      if (flow != Flow::kNormal)
        return flow;
    }
    return Flow::kNormal;
  }

  Flow exec_located(const Stmt& s, const FramePtr& frame) {
    try {
      return exec(s, frame);
    } catch (Error& e) {
      e.locate(s.position);
      throw;
    }
  }

  Flow exec(const Stmt& s, const FramePtr& frame) {
    switch (s.kind) {
      case StmtKind::kText:
        *out_ += s.text;
        return Flow::kNormal;
      case StmtKind::kOutput:
        append_str(*out_, s.constant ? eval_constant(*s.expr, frame) : eval(*s.expr, frame));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [test, body] : s.branches) {
          if (truthy(eval(*test, frame)))
            return exec(body, frame);
        }
        return exec(s.else_body, frame);
      case StmtKind::kFor:
        return exec_for(s, frame);
      case StmtKind::kSet:
        assign(s.target, eval(*s.expr, frame), *frame);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        const Value text = capture(s.body, child_of(frame));
        assign(s.target, s.expr ? apply_filters(*s.expr, text, frame) : text, *frame);
        return Flow::kNormal;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kMacro:
        frame->set(s.name, make_macro(s, frame));
        return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        const Value text = capture(s.body, child_of(frame));
        append_str(*out_, apply_filters(*s.expr, text, frame));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        FramePtr inner = child_of(frame);
        for (std::size_t i = 0; i < s.targets.size(); ++i)
          assign(s.targets[i], eval(*s.values[i], frame), *inner);
        return exec(s.body, inner);
      }
      case StmtKind::kScope:
        return exec(s.body, child_of(frame));
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Stmt& s, const FramePtr& frame) {
    List items = iterate(eval(*s.expr, frame));
    if (s.condition) {
      // jinja2 filters with a generator that yields the target again: a tuple target makes
      // each kept item a tuple of its parts.
      List kept;
      for (Value& item : items) {
        FramePtr test = child_of(frame);
        assign(s.target, item, *test);
        if (!truthy(eval(*s.condition, test)))
          continue;
        if (s.target.kind == Target::Kind::kTuple) {
          List parts;
          for (const Target& part : s.target.items)
            parts.push_back(*test->find(part.name));
          kept.push_back(Value::tuple(std::move(parts)));
        } else {
          kept.push_back(std::move(item));
        }
      }
      items = std::move(kept);
    }
    if (items.empty())
      return exec(s.else_body, child_of(frame));
    auto state = std::make_shared<LoopState>();
    state->items = std::make_shared<const List>(std::move(items));
    const Value loop = Value::loop(state);
    for (std::size_t i = 0; i < state->items->size(); ++i) {
      state->index = i;
      FramePtr iteration = child_of(frame);
      assign(s.target, (*state->items)[i], *iteration);
      iteration->set("loop", loop);
      if (exec(s.body, iteration) == Flow::kBreak)
        break;
    }
    return Flow::kNormal;
  }

  /// The output of `body` rendered in `frame`, as a string.
  Value capture(const Body& body, const FramePtr& frame) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    try {
      exec(body, frame);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return Value::string(std::move(buffer));
  }

  void assign(const Target& target, const Value& value, Frame& frame) {
    switch (target.kind) {
      case Target::Kind::kName:
        frame.set(target.name, value);
        return;
      case Target::Kind::kTuple: {
        const List items = unpack(value, target.items.size());
        for (std::size_t i = 0; i < items.size(); ++i)
          assign(target.items[i], items[i], frame);
        return;
      }
      case Target::Kind::kAttribute: {
        const Value* ns = frame.find(target.name);
        if (!ns || ns->type() != Type::kNamespace)
          fail(ErrorKind::kType, "cannot assign attribute on non-namespace object",
               target.position);
        if (!target.attribute.empty() && target.attribute[0] == '_')
          fail(ErrorKind::kSecurity,
               "Chat templates cannot store underscore-prefixed attributes on a namespace, but "
               "got '" +
                   target.attribute + "'. Please rename the attribute.",
               target.position);
        ns->as_namespace().set(target.attribute, value);
        return;
      }
    }
  }

  /// The macro as a callable. It holds its scope weakly (the scope holds the macro): a macro
  /// called after its scope has ended sees the template's top level instead.
  Value make_macro(const Stmt& s, const FramePtr& frame) {
    const Stmt* macro = &s;
    Renderer* self = this;
    std::weak_ptr<Frame> scope = frame;
    return Value::callable(
        s.name,
        [self, macro, scope](Args& args) {
          FramePtr defined_in = scope.lock();
          return self->call_macro(*macro, defined_in ? defined_in : self->top_.lock(), args);
        },
        "Macro");
  }

  Value call_macro(const Stmt& s, const FramePtr& defined_in, Args& args) {
    const std::size_t n = s.params.size();
    if (args.positional.size() > n)
      fail(ErrorKind::kType,
           "macro '" + s.name + "' takes not more than " + std::to_string(n) + " argument(s)");
    FramePtr frame = child_of(defined_in);
    std::vector<bool> given(n, false);
    for (std::size_t i = 0; i < args.positional.size(); ++i) {
      frame->set(s.params[i], args.positional[i]);
      given[i] = true;
    }
    for (const auto& [name, value] : args.keyword) {
      std::size_t i = 0;
      while (i < n && s.params[i] != name)
        ++i;
      if (i == n)
        fail(ErrorKind::kType, "macro '" + s.name + "' takes no keyword argument '" + name + "'");
      if (given[i])
        fail(ErrorKind::kType,
             "macro '" + s.name + "' got multiple values for argument '" + name + "'");
      frame->set(name, value);
      given[i] = true;
    }
    const std::size_t first_default = n - s.defaults.size();
    for (std::size_t i = 0; i < n; ++i) {
      if (given[i])
        continue;
      if (i >= first_default)
        frame->set(s.params[i], eval(*s.defaults[i - first_default], frame));
      else
        frame->set(s.params[i],
                   Value::undefined("parameter '" + s.params[i] + "' was not provided"));
    }
    if (++depth_ > kMaxCallDepth) {
      --depth_;
      fail(ErrorKind::kOverflow, "maximum recursion depth exceeded in macro '" + s.name + "'");
    }
    Value result;
    try {
      result = capture(s.body, frame);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return result;
  }

  /// The filters of a set or filter block applied to the block's text; the innermost
  /// filter's input is the text.
  Value apply_filters(const Expr& e, const Value& text, const FramePtr& frame) {
    const Value input = e.children[0] ? apply_filters(*e.children[0], text, frame) : text;
    Args args = arguments(e, frame);
    try {
      return e.filter(input, args);
    } catch (Error& error) {
      error.locate(e.position);
      throw;
    }
  }

  Args arguments(const Expr& e, const FramePtr& frame) {
    Args args;
    for (std::size_t i = 1; i < e.children.size(); ++i)
      args.positional.push_back(eval(*e.children[i], frame));
    for (const auto& [name, value] : e.keywords)
      args.keyword.emplace_back(name, eval(*value, frame));
    return args;
  }

  /// An expression that may be constant, as jinja2 folds it (with its getitem's slices), or
  /// else evaluated as any other.
  Value eval_constant(const Expr& e, const FramePtr& frame) {
    folding_ = true;
    try {
      Value v = eval(e, frame);
      folding_ = false;
      return v;
    } catch (const Error&) {
    } catch (const NotConstant&) {
    }
    folding_ = false;
    return eval(e, frame);
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    try {
      return eval_unlocated(e, frame);
    } catch (Error& error) {
      error.locate(e.position);
      throw;
    }
  }

  Value eval_unlocated(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.value;
      case ExprKind::kName: {
        if (folding_)
          throw NotConstant{};
        if (const Value* v = frame->find(e.name))
          return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        items.reserve(e.children.size());
        for (const auto& child : e.children)
          items.push_back(eval(*child, frame));
        return Value::sequence(e.kind == ExprKind::kList ? Type::kList : Type::kTuple,
                               std::move(items));
      }
      case ExprKind::kDict: {
        Dict d;
        for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value key = eval(*e.children[i], frame);
          check_hashable(key);
          d.set(std::move(key), eval(*e.children[i + 1], frame));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::kGetAttr:
        return get_attribute(eval(*e.children[0], frame), e.name);
      case ExprKind::kGetItem: {
        const Value object = eval(*e.children[0], frame);
        const Expr& key = *e.children[1];
        if (key.kind != ExprKind::kSlice)
          return get_item(object, eval(key, frame));
        auto part = [&](const ExprPtr& p) { return p ? eval(*p, frame) : Value::none(); };
        const Value start = part(key.children[0]), stop = part(key.children[1]),
                    step = part(key.children[2]);
        if (!folding_)
          return get_slice(object, start, stop, step);
        try {
          return get_slice(object, start, stop, step);
        } catch (const Error& error) {
          if (error.kind() != ErrorKind::kType)
            throw;
          return Value::undefined(object_type_repr(object) + " has no element slice(" +
                                  to_repr(start) + ", " + to_repr(stop) + ", " + to_repr(step) +
                                  ")");
        }
      }
      case ExprKind::kSlice:
        fail(ErrorKind::kSyntax, "a slice outside of a subscript");
      case ExprKind::kCall: {
        if (folding_)
          throw NotConstant{};
        const Value callee = eval(*e.children[0], frame);
        Args args = arguments(e, frame);
        return call(callee, args);
      }
      case ExprKind::kFilter: {
        if (folding_ && e.contextual)
          throw NotConstant{};
        const Value input = eval(*e.children[0], frame);
        Args args = arguments(e, frame);
        return e.filter(input, args);
      }
      case ExprKind::kTest: {
        const Value input = eval(*e.children[0], frame);
        Args args = arguments(e, frame);
        return Value::boolean(e.test(input, args));
      }
      case ExprKind::kNot:
        return Value::boolean(!truthy(eval(*e.children[0], frame)));
      case ExprKind::kNegate:
        return negate(eval(*e.children[0], frame));
      case ExprKind::kPlus:
        return unary_plus(eval(*e.children[0], frame));
      case ExprKind::kBinary: {
        const Value a = eval(*e.children[0], frame);
        const Value b = eval(*e.children[1], frame);
        return binary(e.op, a, b);
      }
      case ExprKind::kConcat: {
        std::string out;
        for (const auto& child : e.children)
          append_str(out, eval(*child, frame));
        return Value::string(std::move(out));
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.children[0], frame);
        for (std::size_t i = 0; i < e.comparisons.size(); ++i) {
          Value right = eval(*e.children[i + 1], frame);
          if (!compare_values(e.comparisons[i], left, right))
            return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.children[0], frame);
        if (!truthy(a))
          return a;
        return eval(*e.children[1], frame);
      }
      case ExprKind::kOr: {
        Value a = eval(*e.children[0], frame);
        if (truthy(a))
          return a;
        return eval(*e.children[1], frame);
      }
      case ExprKind::kCondExpr: {
        if (truthy(eval(*e.children[0], frame)))
          return eval(*e.children[1], frame);
        if (e.children[2])
          return eval(*e.children[2], frame);
        if (folding_)
          throw NotConstant{};
        return Value::undefined("the inline if-expression on line " +
                                std::to_string(locate(program_.source, e.position).line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    fail(ErrorKind::kSyntax, "unknown expression");
  }

  static bool compare_values(Comparison c, const Value& a, const Value& b) {
    switch (c) {
      case Comparison::kEqual:
        return equals(a, b);
      case Comparison::kNotEqual:
        return !equals(a, b);
      case Comparison::kLess:
        return compare(a, b, CompareOp::kLess);
      case Comparison::kLessEqual:
        return compare(a, b, CompareOp::kLessEqual);
      case Comparison::kGreater:
        return compare(a, b, CompareOp::kGreater);
      case Comparison::kGreaterEqual:
        return compare(a, b, CompareOp::kGreaterEqual);
      case Comparison::kIn:
        return contains(b, a);
      case Comparison::kNotIn:
        return !contains(b, a);
    }
    return false;
  }

  const Program& program_;
  std::string* out_;
  std::weak_ptr<Frame> top_;
  int depth_ = 0;
  bool folding_ = false;  ///< evaluating a constant output as jinja2's optimizer does
};

/// jinja2's has_safe_repr: what a folded constant may be.
bool has_literal_form(const Value& v) {
  switch (v.type()) {
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
    case Type::kString:
    case Type::kRange:
      return true;
    case Type::kList:
    case Type::kTuple:
      for (const Value& item : v.as_list()) {
        if (!has_literal_form(item))
          return false;
      }
      return true;
    case Type::kDict:
      for (const auto& [key, value] : v.as_dict().items) {
        if (!has_literal_form(key) || !has_literal_form(value))
          return false;
      }
      return true;
    default:
      return false;
  }
}

class Folder {
 public:
  explicit Folder(const Program& program) : out_(), renderer_(program, out_) {}

  void fold(Body& body) {
    for (auto& s : body) {
      const bool constant = fold(s->expr);
      if (s->kind == StmtKind::kOutput)
        s->constant = constant;
      fold(s->condition);
      for (auto& [test, branch] : s->branches) {
        fold(test);
        fold(branch);
      }
      fold(s->body);
      fold(s->else_body);
      for (auto& d : s->defaults)
        fold(d);
      for (auto& v : s->values)
        fold(v);
    }
  }

 private:
  /// Folds `e`'s sub-expressions, then `e`; returns whether jinja2's Expr.as_const may
  /// evaluate `e`: no names, calls, or filters that take the context, except in the branches
  /// that `if`-expressions, `and` and `or` may skip.
  bool fold(ExprPtr& e) {
    if (!e)
      return false;
    std::vector<bool> constant;
    for (auto& child : e->children)
      constant.push_back(!child || fold(child));
    bool keywords = true;
    for (auto& keyword : e->keywords)
      keywords = fold(keyword.second) && keywords;
    bool may_be_constant;
    switch (e->kind) {
      case ExprKind::kName:
      case ExprKind::kCall:
        may_be_constant = false;
        break;
      case ExprKind::kCondExpr:
        may_be_constant = constant[0] && (constant[1] || (e->children[2] && constant[2]));
        break;
      case ExprKind::kAnd:
      case ExprKind::kOr:
        may_be_constant = constant[0];
        break;
      default:
        may_be_constant = keywords;
        for (bool c : constant)
          may_be_constant = may_be_constant && c;
        if (e->kind == ExprKind::kFilter && (e->contextual || !e->children[0]))
          may_be_constant = false;
    }
    if (!may_be_constant || e->kind == ExprKind::kLiteral || e->kind == ExprKind::kSlice)
      return may_be_constant;
    std::optional<Value> v = renderer_.constant_value(*e);
    if (v && has_literal_form(*v)) {
      e->kind = ExprKind::kLiteral;
      e->value = std::move(*v);
      e->children.clear();
      e->keywords.clear();
    }
    return true;
  }

  std::string out_;
  Renderer renderer_;
};

const Dict& builtin_globals() {
  static const Dict globals = make_globals();
  return globals;
}

}  // namespace

void fold_constants(Program& program) {
  Folder(program).fold(program.body);
}

std::string render(const Program& program, const Dict& variables) {
  const NamespaceArena arena;
  auto globals = std::make_shared<Frame>();
  globals->dict = &builtin_globals();
  FramePtr top = child_of(globals);
  top->dict = &variables;
  std::string out;
  Renderer(program, out).run(top);
  return out;
}

}  // namespace bigbatch::text::jinja
