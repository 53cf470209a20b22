#include "bigbatch/text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_filters.h"
#include "bigbatch/text/jinja_lexer.h"
#include "bigbatch/text/jinja_tests.h"

namespace bigbatch::text::jinja {
namespace {

/// Tags of jinja2 this interpreter refuses, and why a chat template does not need them.
constexpr std::pair<std::string_view, std::string_view> kUnsupportedTags[] = {
    {"extends", "templates are rendered alone, without a loader"},
    {"block", "templates are rendered alone, without inheritance"},
    {"include", "templates are rendered alone, without a loader"},
    {"import", "templates are rendered alone, without a loader"},
    {"from", "templates are rendered alone, without a loader"},
    {"call", "call blocks are not implemented"},
    {"autoescape", "chat templates render without HTML escaping"},
};

/// Deeper nesting of expressions or of block statements than this is refused (Python's parser
/// and its recursion limit refuse it too), which keeps the recursion of parser and renderer
/// within the stack.
constexpr int kMaxNesting = 200;

/// Counts a level of nesting while alive.
class Nesting {
 public:
  Nesting(int& depth, std::size_t position) : depth_(depth) {
    if (++depth_ > kMaxNesting) {
      --depth_;
      fail(ErrorKind::kSyntax,
           "the template nests deeper than " + std::to_string(kMaxNesting) + " levels", position);
    }
  }
  ~Nesting() { --depth_; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;

 private:
  int& depth_;
};

class Parser {
 public:
  Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body parse_template() { return subparse({}); }

 private:
  // ---- tokens ----
  const Token& current() const { return tokens_[index_]; }
  const Token& peek() const { return tokens_[std::min(index_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[index_];
    if (index_ + 1 < tokens_.size())
      ++index_;
    return t;
  }
  bool is_name(std::string_view name) const {
    return current().kind == TokenKind::kName && current().text == name;
  }
  bool is_op(std::string_view op) const {
    return current().kind == TokenKind::kOperator && current().text == op;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name))
      return false;
    next();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op))
      return false;
    next();
    return true;
  }

  [[noreturn]] void syntax(const std::string& message) const {
    fail(ErrorKind::kSyntax, message, current().position);
  }

  [[noreturn]] void unexpected(const std::string& expected) const {
    if (current().kind == TokenKind::kEof)
      syntax("unexpected end of template, expected '" + expected + "'");
    syntax("expected token '" + expected + "', got '" + describe(current()) + "'");
  }

  const Token& expect(TokenKind kind, const char* what) {
    if (current().kind != kind)
      unexpected(what);
    return next();
  }
  void expect_op(const char* op) {
    if (!is_op(op))
      unexpected(op);
    next();
  }
  void expect_name(const char* name) {
    if (!is_name(name))
      unexpected(name);
    next();
  }
  void expect_block_end() { expect(TokenKind::kBlockEnd, "end of statement block"); }

  // ---- statements ----

  /// Statements up to a block tag named in `end_tags`, which stays the current token.
  Body subparse(std::vector<std::string> end_tags) {
    Body body;
    if (!end_tags.empty())
      end_stack_.push_back(end_tags);
    while (true) {
      const Token& t = current();
      if (t.kind == TokenKind::kEof) {
        if (!end_tags.empty())
          fail_eof();
        break;
      }
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->position = t.position;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->position = current().position;
        s->expr = parse_tuple(true, {}, false);
        expect(TokenKind::kVariableEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        if (current().kind == TokenKind::kName &&
            std::find(end_tags.begin(), end_tags.end(), current().text) != end_tags.end()) {
          end_stack_.pop_back();
          return body;
        }
        parse_statement(body);
        expect_block_end();
      } else {
        syntax("unexpected '" + describe(t) + "'");
      }
    }
    if (!end_tags.empty())
      end_stack_.pop_back();
    return body;
  }

  /// The body of a block statement: its block end, then statements up to one of `end_tags`.
  /// With `drop` the end tag is consumed, else it stays current.
  Body parse_statements(std::vector<std::string> end_tags, bool drop) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(std::move(end_tags));
    if (drop)
      next();
    return body;
  }

  [[noreturn]] void fail_eof() const {
    std::string message = "unexpected end of template.";
    if (!end_stack_.empty()) {
      message += " Jinja was looking for the following tags: ";
      const auto& tags = end_stack_.back();
      for (std::size_t i = 0; i < tags.size(); ++i)
        message += (i ? " or '" : "'") + tags[i] + "'";
      message += ".";
    }
    if (!tag_stack_.empty())
      message += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
    syntax(message);
  }

  [[noreturn]] void fail_unknown_tag(const std::string& name) const {
    std::string message = "Encountered unknown tag '" + name + "'.";
    if (!end_stack_.empty()) {
      bool expected_somewhere = false;
      for (const auto& tags : end_stack_)
        expected_somewhere =
            expected_somewhere || std::find(tags.begin(), tags.end(), name) != tags.end();
      std::string looking;
      const auto& tags = end_stack_.back();
      for (std::size_t i = 0; i < tags.size(); ++i)
        looking += (i ? " or '" : "'") + tags[i] + "'";
      if (expected_somewhere)
        message +=
            " You probably made a nesting mistake. Jinja is expecting this tag, but "
            "currently looking for " +
            looking + ".";
      else
        message += " Jinja was looking for the following tags: " + looking + ".";
    }
    if (!tag_stack_.empty())
      message += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
    syntax(message);
  }

  std::unique_ptr<Stmt> make(StmtKind kind, std::size_t position) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->position = position;
    return s;
  }

  void parse_statement(Body& body) {
    const Nesting nesting(nesting_, current().position);
    const Token& t = current();
    if (t.kind != TokenKind::kName)
      syntax("tag name expected");
    const std::string tag = t.text;
    for (const auto& [name, why] : kUnsupportedTags) {
      if (tag == name)
        fail(ErrorKind::kUnsupported,
             "the '" + tag + "' tag is not supported (" + std::string(why) + ")", t.position);
    }
    tag_stack_.push_back(tag);
    if (tag == "for")
      body.push_back(parse_for());
    else if (tag == "if")
      body.push_back(parse_if());
    else if (tag == "set")
      body.push_back(parse_set());
    else if (tag == "macro")
      body.push_back(parse_macro());
    else if (tag == "filter")
      body.push_back(parse_filter_block());
    else if (tag == "with")
      body.push_back(parse_with());
    else if (tag == "print")
      parse_print(body);
    else if (tag == "generation")
      body.push_back(parse_generation());
    else if (tag == "break" || tag == "continue")
      body.push_back(parse_loop_control());
    else {
      tag_stack_.pop_back();
      fail_unknown_tag(tag);
    }
    tag_stack_.pop_back();
  }

  std::unique_ptr<Stmt> parse_for() {
    auto s = make(StmtKind::kFor, next().position);
    s->target = parse_assign_target(false, {"in"});
    expect_name("in");
    s->expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if"))
      s->condition = parse_expression(true);
    if (is_name("recursive"))
      fail(ErrorKind::kUnsupported, "recursive for loops are not supported", current().position);
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else")
      s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  std::unique_ptr<Stmt> parse_if() {
    auto s = make(StmtKind::kIf, next().position);
    while (true) {
      ExprPtr test = parse_tuple(false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.text == "elif")
        continue;
      if (t.text == "else")
        s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  std::unique_ptr<Stmt> parse_set() {
    const std::size_t position = next().position;
    Target target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto s = make(StmtKind::kSet, position);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {}, false);
      return s;
    }
    auto s = make(StmtKind::kSetBlock, position);
    s->target = std::move(target);
    s->expr = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  std::unique_ptr<Stmt> parse_macro() {
    auto s = make(StmtKind::kMacro, next().position);
    s->name = expect(TokenKind::kName, "name").text;
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty())
        expect_op(",");
      s->params.push_back(expect(TokenKind::kName, "name").text);
      if (skip_op("="))
        s->defaults.push_back(parse_expression(true));
      else if (!s->defaults.empty())
        syntax("non-default argument follows default argument");
    }
    expect_op(")");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block() {
    auto s = make(StmtKind::kFilterBlock, next().position);
    s->expr = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  std::unique_ptr<Stmt> parse_with() {
    auto s = make(StmtKind::kWith, next().position);
    while (current().kind != TokenKind::kBlockEnd) {
      if (!s->targets.empty())
        expect_op(",");
      s->targets.push_back(parse_assign_target(false, {}));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  void parse_print(Body& body) {
    next();
    bool first = true;
    while (current().kind != TokenKind::kBlockEnd) {
      if (!first)
        expect_op(",");
      first = false;
      auto s = make(StmtKind::kOutput, current().position);
      s->expr = parse_expression(true);
      body.push_back(std::move(s));
    }
  }

  std::unique_ptr<Stmt> parse_generation() {
    auto s = make(StmtKind::kScope, next().position);
    s->body = parse_statements({"endgeneration"}, true);
    return s;
  }

  std::unique_ptr<Stmt> parse_loop_control() {
    const Token& t = next();
    if (loop_depth_ == 0)
      fail(ErrorKind::kSyntax, "'" + t.text + "' outside of a loop", t.position);
    return make(t.text == "break" ? StmtKind::kBreak : StmtKind::kContinue, t.position);
  }

  /// A name, `ns.attribute` (`with_namespace`), or a tuple of names.
  Target parse_assign_target(bool with_namespace, std::vector<std::string> extra_end) {
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.position = current().position;
    bool is_tuple = false;
    while (true) {
      if (!tuple.items.empty())
        expect_op(",");
      if (is_tuple_end(extra_end))
        break;
      const Token& t = current();
      if (t.kind != TokenKind::kName)
        syntax("can't assign to '" + describe(t) + "'");
      static const char* const kConstants[] = {"true", "false", "none", "True", "False", "None"};
      for (const char* c : kConstants) {
        if (t.text == c)
          syntax("can't assign to 'const'");
      }
      next();
      Target item;
      item.position = t.position;
      item.name = t.text;
      if (with_namespace && is_op(".")) {
        next();
        item.kind = Target::Kind::kAttribute;
        item.attribute = expect(TokenKind::kName, "name").text;
      }
      tuple.items.push_back(std::move(item));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (tuple.items.empty())
        syntax("Expected an expression, got '" + describe(current()) + "'");
      return std::move(tuple.items[0]);
    }
    for (const Target& item : tuple.items) {
      if (item.kind != Target::Kind::kName)
        syntax("can't assign to 'tuple'");
    }
    return tuple;
  }

  // ---- expressions ----

  ExprPtr node(ExprKind kind, std::size_t position) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->position = position;
    return e;
  }

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    const TokenKind k = current().kind;
    if (k == TokenKind::kVariableEnd || k == TokenKind::kBlockEnd || is_op(")"))
      return true;
    for (const std::string& name : extra_end) {
      if (is_name(name))
        return true;
    }
    return false;
  }

  /// Expressions separated by commas: a tuple, or the one expression when there is no comma.
  /// `extra_end`: names that end the tuple too; `explicit_parentheses`: () is an empty tuple.
  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parentheses) {
    const std::size_t position = current().position;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty())
        expect_op(",");
      if (is_tuple_end(extra_end))
        break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty())
        return std::move(items[0]);
      if (!explicit_parentheses)
        syntax("Expected an expression, got '" + describe(current()) + "'");
    }
    ExprPtr t = node(ExprKind::kTuple, position);
    t->children = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const std::size_t position = next().position;
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else"))
        otherwise = parse_condexpr();
      ExprPtr c = node(ExprKind::kCondExpr, position);
      c->children.push_back(std::move(test));
      c->children.push_back(std::move(expr));
      c->children.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary_node(ExprKind kind, ExprPtr left, ExprPtr right, std::size_t position) {
    ExprPtr e = node(kind, position);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const std::size_t position = next().position;
      left = binary_node(ExprKind::kOr, std::move(left), parse_and(), position);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const std::size_t position = next().position;
      left = binary_node(ExprKind::kAnd, std::move(left), parse_not(), position);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const std::size_t position = next().position;
      ExprPtr e = node(ExprKind::kNot, position);
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const std::size_t position = current().position;
    ExprPtr first = parse_math1();
    ExprPtr compare;
    while (true) {
      Comparison c;
      if (is_op("=="))
        c = Comparison::kEqual;
      else if (is_op("!="))
        c = Comparison::kNotEqual;
      else if (is_op("<"))
        c = Comparison::kLess;
      else if (is_op("<="))
        c = Comparison::kLessEqual;
      else if (is_op(">"))
        c = Comparison::kGreater;
      else if (is_op(">="))
        c = Comparison::kGreaterEqual;
      else if (is_name("in"))
        c = Comparison::kIn;
      else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in")
        c = Comparison::kNotIn;
      else
        break;
      next();
      if (c == Comparison::kNotIn)
        next();
      if (!compare) {
        compare = node(ExprKind::kCompare, position);
        compare->children.push_back(std::move(first));
      }
      compare->comparisons.push_back(c);
      compare->children.push_back(parse_math1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr arithmetic(ExprPtr left, BinaryOp op, ExprPtr right, std::size_t position) {
    ExprPtr e = binary_node(ExprKind::kBinary, std::move(left), std::move(right), position);
    e->op = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      const BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSubtract;
      left = arithmetic(std::move(left), op, parse_concat(), t.position);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const std::size_t position = current().position;
    ExprPtr first = parse_math2();
    if (!is_op("~"))
      return first;
    ExprPtr e = node(ExprKind::kConcat, position);
    e->children.push_back(std::move(first));
    while (skip_op("~"))
      e->children.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      const BinaryOp op = t.text == "*"    ? BinaryOp::kMultiply
                          : t.text == "/"  ? BinaryOp::kDivide
                          : t.text == "//" ? BinaryOp::kFloorDivide
                                           : BinaryOp::kModulo;
      left = arithmetic(std::move(left), op, parse_pow(), t.position);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const std::size_t position = next().position;
      left = arithmetic(std::move(left), BinaryOp::kPower, parse_unary(true), position);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nesting nesting(nesting_, current().position);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = node(t.text == "-" ? ExprKind::kNegate : ExprKind::kPlus, t.position);
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter)
      e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, std::size_t position) {
    ExprPtr e = node(ExprKind::kLiteral, position);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = current();
    switch (t.kind) {
      case TokenKind::kName: {
        next();
        if (t.text == "true" || t.text == "True")
          return literal(Value::boolean(true), t.position);
        if (t.text == "false" || t.text == "False")
          return literal(Value::boolean(false), t.position);
        if (t.text == "none" || t.text == "None")
          return literal(Value::none(), t.position);
        ExprPtr e = node(ExprKind::kName, t.position);
        e->name = t.text;
        return e;
      }
      case TokenKind::kString: {
        std::string text = next().text;
        while (current().kind == TokenKind::kString)
          text += next().text;
        return literal(Value::string(std::move(text)), t.position);
      }
      case TokenKind::kInteger:
        next();
        return literal(Value::integer(t.integer), t.position);
      case TokenKind::kFloat:
        next();
        return literal(Value::floating(t.number), t.position);
      case TokenKind::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[")
          return parse_list();
        if (t.text == "{")
          return parse_dict();
        break;
      default:
        break;
    }
    syntax("unexpected '" + describe(t) + "'");
  }

  ExprPtr parse_list() {
    ExprPtr e = node(ExprKind::kList, next().position);
    while (!is_op("]")) {
      if (!e->children.empty())
        expect_op(",");
      if (is_op("]"))
        break;
      e->children.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    ExprPtr e = node(ExprKind::kDict, next().position);
    while (!is_op("}")) {
      if (!e->children.empty())
        expect_op(",");
      if (is_op("}"))
        break;
      e->children.push_back(parse_expression(true));
      expect_op(":");
      e->children.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("["))
        e = parse_subscript(std::move(e));
      else if (is_op("("))
        e = parse_call(std::move(e));
      else
        return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|"))
        e = parse_filter(std::move(e), false);
      else if (is_name("is"))
        e = parse_test(std::move(e));
      else if (is_op("("))
        e = parse_call(std::move(e));
      else
        return e;
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attribute = next();
      if (attribute.kind == TokenKind::kName) {
        ExprPtr e = node(ExprKind::kGetAttr, object->position);
        e->name = attribute.text;
        e->children.push_back(std::move(object));
        return e;
      }
      if (attribute.kind != TokenKind::kInteger)
        fail(ErrorKind::kSyntax, "expected name or number", attribute.position);
      ExprPtr e = node(ExprKind::kGetItem, object->position);
      e->children.push_back(std::move(object));
      e->children.push_back(literal(Value::integer(attribute.integer), attribute.position));
      return e;
    }
    std::vector<ExprPtr> keys;
    while (!is_op("]")) {
      if (!keys.empty())
        expect_op(",");
      keys.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr e = node(ExprKind::kGetItem, object->position);
    e->children.push_back(std::move(object));
    if (keys.size() == 1) {
      e->children.push_back(std::move(keys[0]));
    } else {
      ExprPtr tuple = node(ExprKind::kTuple, t.position);
      tuple->children = std::move(keys);
      e->children.push_back(std::move(tuple));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const std::size_t position = current().position;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":"))
        return start;
    }
    next();  // the first ':'
    ExprPtr slice = node(ExprKind::kSlice, position);
    slice->children.push_back(std::move(start));
    if (is_op(":") || is_op("]") || is_op(","))
      slice->children.push_back(nullptr);
    else
      slice->children.push_back(parse_expression(true));
    if (skip_op(":")) {
      if (is_op("]") || is_op(","))
        slice->children.push_back(nullptr);
      else
        slice->children.push_back(parse_expression(true));
    } else {
      slice->children.push_back(nullptr);
    }
    return slice;
  }

  /// `(args, name=value, ...)` into e's children (after those it has) and keywords.
  void parse_call_args(Expr& e) {
    const std::size_t position = current().position;
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")"))
          break;
      }
      if (is_op("*") || is_op("**"))
        fail(ErrorKind::kUnsupported, "*args and **kwargs in calls are not supported",
             current().position);
      if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
          peek().text == "=") {
        std::string key = next().text;
        next();
        e.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.keywords.empty())
          fail(ErrorKind::kSyntax, "invalid syntax for function call expression", position);
        e.children.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = node(ExprKind::kCall, callee->position);
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect(TokenKind::kName, "name").text;
    while (is_op(".")) {
      next();
      name += "." + expect(TokenKind::kName, "name").text;
    }
    return name;
  }

  /// `| name(args)` filters applied to `input` (null in a filter block); `start_inline`: the
  /// first filter has no `|` before it.
  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline)
        next();
      start_inline = false;
      const std::size_t position = current().position;
      ExprPtr e = node(ExprKind::kFilter, position);
      e->name = dotted_name();
      e->filter = find_filter(e->name);
      for (const char* contextual : {"map", "select", "reject", "selectattr", "rejectattr"})
        e->contextual = e->contextual || e->name == contextual;
      if (!e->filter) {
        if (is_builtin_filter(e->name))
          fail(ErrorKind::kUnsupported, "the '" + e->name + "' filter is not supported", position);
        fail(ErrorKind::kSyntax, "No filter named '" + e->name + "'.", position);
      }
      e->children.push_back(std::move(input));
      if (is_op("("))
        parse_call_args(*e);
      input = std::move(e);
    }
    return input;
  }

  ExprPtr parse_test(ExprPtr input) {
    const std::size_t position = next().position;  // 'is'
    const bool negated = skip_name("not");
    const std::size_t name_position = current().position;
    ExprPtr e = node(ExprKind::kTest, position);
    e->name = dotted_name();
    e->test = find_test(e->name);
    if (!e->test) {
      if (is_builtin_test(e->name))
        fail(ErrorKind::kUnsupported, "the '" + e->name + "' test is not supported", name_position);
      fail(ErrorKind::kSyntax, "No test named '" + e->name + "'.", name_position);
    }
    e->children.push_back(std::move(input));
    const Token& t = current();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat || is_op("[") ||
                is_op("{")) &&
               !(is_name("else") || is_name("or") || is_name("and"))) {
      if (is_name("is"))
        syntax("You cannot chain multiple tests with is");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    if (!negated)
      return e;
    ExprPtr n = node(ExprKind::kNot, position);
    n->children.push_back(std::move(e));
    return n;
  }

  const std::vector<Token>& tokens_;
  std::size_t index_ = 0;
  std::vector<std::vector<std::string>> end_stack_;
  std::vector<std::string> tag_stack_;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

Program parse(const std::string& source) {
  Program program;
  program.source = normalize_source(source);
  const std::vector<Token> tokens = tokenize(program.source);
  program.body = Parser(tokens).parse_template();
  return program;
}

}  // namespace bigbatch::text::jinja
