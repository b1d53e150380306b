#include "gpu/jinja/syntax.hpp"

#include <initializer_list>

#include "gpu/jinja/lexer.hpp"

namespace illm::jinja {

namespace {

using node_ptr = std::unique_ptr<node>;

/// Counts one level of nesting while it lives; past `limit` levels, a template_error.
class nesting {
 public:
  nesting(int& depth, int limit, int line, const char* what) : depth_(depth) {
    if (++depth_ > limit) fail(line, what);
  }
  ~nesting() { --depth_; }
  nesting(const nesting&) = delete;
  nesting& operator=(const nesting&) = delete;

 private:
  int& depth_;
};

node_ptr make(node::kind k, int line) {
  auto n = std::make_unique<node>();
  n->what = k;
  n->line = line;
  return n;
}

// ---- Expressions -------------------------------------------------------------------------------------------------

class expression_parser {
 public:
  expression_parser(std::vector<token> tokens, int line) : t_(std::move(tokens)), line_(line) {}

  node_ptr expression() {
    const nesting level(depth_, max_depth, line_, "expressions nested too deeply");
    node_ptr then = or_expr();
    if (!is_name("if")) return then;
    next();
    auto n = make(node::kind::conditional, line_);
    n->kids.push_back(std::move(then));
    n->kids.push_back(or_expr());
    if (is_name("else")) {
      next();
      n->kids.push_back(expression());
    } else {
      n->kids.push_back(nullptr);
    }
    return n;
  }
  /// An expression without a trailing "if" (the iterable of a for with a filter).
  node_ptr or_expression() { return or_expr(); }

  bool is_name(const char* n) const { return peek().what == token::name && peek().text == n; }
  bool is_op(const char* o) const { return peek().what == token::op && peek().text == o; }
  bool at_end() const { return peek().what == token::end; }
  const token& peek(size_t ahead = 0) const { return t_[std::min(at_ + ahead, t_.size() - 1)]; }
  const token& next() { return t_[std::min(at_++, t_.size() - 1)]; }
  /// Arguments up to ')': positional first, then name=value.
  void arguments(node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().what == token::name && peek(1).what == token::op && peek(1).text == "=") {
        n.names.push_back(next().text);
        next();
        n.kids.push_back(expression());
      } else {
        if (!n.names.empty()) fail(line_, "a positional argument after a keyword argument");
        n.kids.push_back(expression());
        ++n.positional;
      }
      if (!is_op(")")) expect_op(",");
    }
    next();
  }  std::string expect_name() {
    if (peek().what != token::name) fail(line_, "expected a name, found '" + peek().text + "'");
    return next().text;
  }
  void expect_op(const char* o) {
    if (!is_op(o)) fail(line_, std::string("expected '") + o + "', found '" + peek().text + "'");
    next();
  }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + peek().text + "'");
  }

 private:
  node_ptr binary(std::string op, node_ptr l, node_ptr r) {
    auto n = make(node::kind::binary, line_);
    n->text = std::move(op);
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return n;
  }
  /// A left-associative chain of `operand`s joined by any of `ops` (words such as "and", or symbols such as "+").
  node_ptr chain(node_ptr (expression_parser::*operand)(), std::initializer_list<const char*> ops) {
    node_ptr l = (this->*operand)();
    while (const char* op = one_of(ops)) {
      next();
      l = binary(op, std::move(l), (this->*operand)());
    }
    return l;
  }
  /// The operator of `ops` that comes next, or nullptr.
  const char* one_of(std::initializer_list<const char*> ops) const {
    for (const char* op : ops)
      if (is_op(op) || is_name(op)) return op;
    return nullptr;
  }
  node_ptr or_expr() { return chain(&expression_parser::and_expr, {"or"}); }
  node_ptr and_expr() { return chain(&expression_parser::not_expr, {"and"}); }
  node_ptr not_expr() {
    if (!is_name("not")) return compare();
    next();
    auto n = make(node::kind::unary, line_);
    n->text = "not";
    n->kids.push_back(not_expr());
    return n;
  }
  node_ptr compare() {
    node_ptr l = concat();
    for (;;) {
      std::string op;
      if (peek().what == token::op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                       peek().text == ">" || peek().text == "<=" || peek().text == ">="))
        op = next().text;
      else if (is_name("in"))
        op = next().text;
      else if (is_name("not") && peek(1).what == token::name && peek(1).text == "in") {
        next();
        next();
        op = "not in";
      } else
        return l;
      l = binary(op, std::move(l), concat());
    }
  }
  node_ptr concat() { return chain(&expression_parser::sum, {"~"}); }
  node_ptr sum() { return chain(&expression_parser::product, {"+", "-"}); }
  node_ptr product() { return chain(&expression_parser::power, {"*", "/", "//", "%"}); }
  node_ptr power() { return chain(&expression_parser::unary, {"**"}); }
  node_ptr unary() { return filters(signed_operand()); }
  /// A sign applied to its operand (the filters after it apply to the whole: -x|abs is (-x)|abs), or a postfix
  /// expression.
  node_ptr signed_operand() {
    const nesting level(depth_, max_depth, line_, "expressions nested too deeply");
    if (is_op("-") || is_op("+")) {
      auto n = make(node::kind::unary, line_);
      n->text = next().text;
      n->kids.push_back(signed_operand());
      return n;
    }
    return postfix(primary());
  }

  node_ptr filters(node_ptr operand) {
    for (;;) {
      if (is_op("|")) {
        next();
        auto f = make(node::kind::filter, line_);
        f->text = expect_name();
        while (is_op(".")) {  // dotted filter names are not Jinja's; refused as unknown later
          next();
          f->text += "." + expect_name();
        }
        f->kids.push_back(std::move(operand));
        if (is_op("(")) arguments(*f);
        operand = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make(node::kind::test, line_);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->text = peek().what == token::name ? next().text : peek().text == "==" ? (next(), "==") : expect_name();
        t->kids.push_back(std::move(operand));
        if (is_op("(")) {
          arguments(*t);
        } else if (!at_end() && (peek().what == token::string || peek().what == token::number ||
                                 (peek().what == token::name && peek().text != "and" && peek().text != "or" &&
                                  peek().text != "else" && peek().text != "if"))) {
          t->kids.push_back(primary());  // "is divisibleby 3", "is sameas none"
          ++t->positional;
        }
        operand = std::move(t);
      } else {
        return operand;
      }
    }
  }
  node_ptr postfix(node_ptr n) {
    for (;;) {
      if (is_op(".")) {
        next();
        auto a = make(node::kind::attribute, line_);
        a->text = peek().what == token::number ? next().text : expect_name();
        a->kids.push_back(std::move(n));
        n = std::move(a);
      } else if (is_op("[")) {
        next();
        n = subscript(std::move(n));
      } else if (is_op("(")) {
        auto c = make(node::kind::call, line_);
        c->kids.push_back(std::move(n));
        arguments(*c);
        n = std::move(c);
      } else {
        return n;
      }
    }
  }
  node_ptr subscript(node_ptr obj) {
    node_ptr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = expression();
    while (is_op(":") && colons < 2) {
      next();
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = expression();
    }
    expect_op("]");
    auto n = make(colons ? node::kind::slice : node::kind::item, line_);
    n->kids.push_back(std::move(obj));
    n->kids.push_back(std::move(parts[0]));
    if (colons) {
      n->kids.push_back(std::move(parts[1]));
      n->kids.push_back(std::move(parts[2]));
    }
    return n;
  }
  node_ptr literal(value v) {
    auto n = make(node::kind::literal, line_);
    n->constant = std::move(v);
    return n;
  }
  node_ptr primary() {
    const token& t = peek();
    if (t.what == token::number) return literal(next().number_value);
    if (t.what == token::string) {
      std::string s = next().text;
      while (peek().what == token::string) s += next().text;  // adjacent strings join
      return literal(value(json(s)));
    }
    if (t.what == token::name) {
      const std::string name = next().text;
      if (name == "true" || name == "True") return literal(value(json(true)));
      if (name == "false" || name == "False") return literal(value(json(false)));
      if (name == "none" || name == "None") return literal(value::none());
      auto n = make(node::kind::name, line_);
      n->text = name;
      return n;
    }
    if (is_op("(")) {
      next();
      node_ptr inner = expression();
      if (is_op(",")) {  // a tuple: a list here
        auto l = make(node::kind::list, line_);
        l->kids.push_back(std::move(inner));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          l->kids.push_back(expression());
        }
        inner = std::move(l);
      }
      expect_op(")");
      return inner;
    }
    if (is_op("[")) return collection(node::kind::list, "]");
    if (is_op("{")) return collection(node::kind::dict, "}");
    fail(line_, "unexpected '" + t.text + "'");
  }
  /// A list literal ([a, b]) or a dict literal ({k: v}, its kids key, value, key, value...), from its opening
  /// bracket to `closer`.
  node_ptr collection(node::kind kind, const char* closer) {
    next();
    auto n = make(kind, line_);
    while (!is_op(closer)) {
      n->kids.push_back(expression());
      if (kind == node::kind::dict) {
        expect_op(":");
        n->kids.push_back(expression());
      }
      if (!is_op(closer)) expect_op(",");
    }
    next();
    return n;
  }

  static constexpr int max_depth = 200;
  std::vector<token> t_;
  size_t at_ = 0;
  int line_;
  int depth_ = 0;
};

// ---- Statements --------------------------------------------------------------------------------------------------

class statement_parser {
 public:
  explicit statement_parser(std::vector<segment> segs) : segs_(std::move(segs)) {}

  node_ptr whole() {
    auto root = make(node::kind::block, 1);
    const std::string stop = body(*root, {});
    if (!stop.empty()) fail(line_, "'" + stop + "' without its opening tag");
    return root;
  }

 private:
  /// Reads statements into `block` until a tag whose first word is one of `stops` (returned, its parser left
  /// after that word) or the end ("").
  std::string body(node& block, const std::vector<std::string>& stops) {
    const nesting level(depth_, max_depth, line_, "blocks nested too deeply");
    while (at_ < segs_.size()) {
      segment& s = segs_[at_++];
      line_ = s.line;
      if (s.what == segment::text) {
        if (s.body.empty()) continue;
        auto t = make(node::kind::text, s.line);
        t->text = s.body;
        block.kids.push_back(std::move(t));
        continue;
      }
      if (s.what == segment::output) {
        expression_parser p(tokenize(s.body, s.line), s.line);
        auto o = make(node::kind::output, s.line);
        o->kids.push_back(p.expression());
        p.expect_end();
        block.kids.push_back(std::move(o));
        continue;
      }
      if (s.body.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // a comment
      tag_ = std::make_unique<expression_parser>(tokenize(s.body, s.line), s.line);
      const std::string word = tag_->expect_name();
      for (const std::string& stop : stops)
        if (word == stop) return word;
      block.kids.push_back(statement(word));
    }
    return "";
  }

  node_ptr statement(const std::string& word) {
    if (word == "if") return if_statement();
    if (word == "for") return for_statement();
    if (word == "set") return set_statement();
    if (word == "macro") return macro_statement();
    if (word == "filter") return filter_statement();
    if (word == "break" || word == "continue") {
      tag_->expect_end();
      return make(word == "break" ? node::kind::break_ : node::kind::continue_, line_);
    }
    if (word == "generation" || word == "raw") {  // raw's text was cut out already; generation marks a span
      tag_->expect_end();
      auto b = make(node::kind::block, line_);
      if (word == "generation") expect_close(*b, "endgeneration");
      return b;
    }
    fail(line_, "unknown statement '" + word + "'");
  }

  void expect_close(node& into, const std::string& closer) {
    const std::string stop = body(into, {closer});
    if (stop != closer) fail(line_, "missing {% " + closer + " %}");
    tag_->expect_end();
  }

  /// Ends an if or a for whose body stopped at `stop`: an {% else %} block up to `end` becomes n's last kid (for a
  /// for without one, `null_without` makes that kid null); anything but else or `end` is an error.
  void else_block(node& n, const std::string& stop, const std::string& end, bool null_without) {
    if (stop == "else") {
      tag_->expect_end();
      auto other = make(node::kind::block, line_);
      if (body(*other, {end}) != end) fail(line_, "missing {% " + end + " %}");
      n.kids.push_back(std::move(other));
    } else if (stop != end) {
      fail(line_, "missing {% " + end + " %}");
    } else if (null_without) {
      n.kids.push_back(nullptr);
    }
    tag_->expect_end();
  }

  node_ptr if_statement() {
    auto n = make(node::kind::if_, line_);
    for (;;) {
      n->kids.push_back(tag_->expression());
      tag_->expect_end();
      auto branch = make(node::kind::block, line_);
      const std::string stop = body(*branch, {"elif", "else", "endif"});
      n->kids.push_back(std::move(branch));
      if (stop == "elif") continue;
      else_block(*n, stop, "endif", false);
      return n;
    }
  }

  node_ptr for_statement() {
    auto n = make(node::kind::for_, line_);
    n->names.push_back(tag_->expect_name());
    while (tag_->is_op(",")) {
      tag_->next();
      n->names.push_back(tag_->expect_name());
    }
    if (!tag_->is_name("in")) fail(line_, "for without 'in'");
    tag_->next();
    n->kids.push_back(tag_->or_expression());
    if (tag_->is_name("if")) {
      tag_->next();
      n->kids.push_back(tag_->or_expression());
    } else {
      n->kids.push_back(nullptr);
    }
    if (tag_->is_name("recursive")) fail(line_, "recursive loops are not supported");
    tag_->expect_end();
    auto loop_body = make(node::kind::block, line_);
    const std::string stop = body(*loop_body, {"else", "endfor"});
    n->kids.push_back(std::move(loop_body));
    else_block(*n, stop, "endfor", true);
    return n;
  }

  /// {% filter name(args) %}...{% endfilter %}: the block's text through the filter (kids: the block, then the
  /// filter's arguments, as a filter expression's).
  node_ptr filter_statement() {
    auto n = make(node::kind::filter_block, line_);
    n->text = tag_->expect_name();
    auto b = make(node::kind::block, line_);
    n->kids.push_back(nullptr);  // the block, once read
    if (tag_->is_op("(")) tag_->arguments(*n);
    tag_->expect_end();
    expect_close(*b, "endfilter");
    n->kids[0] = std::move(b);
    return n;
  }

  node_ptr set_statement() {
    const std::string target = tag_->expect_name();
    std::string attribute;
    if (tag_->is_op(".")) {
      tag_->next();
      attribute = tag_->expect_name();
    }
    if (tag_->at_end() && attribute.empty()) {  // {% set x %}...{% endset %}
      auto n = make(node::kind::set_block, line_);
      n->text = target;
      auto b = make(node::kind::block, line_);
      expect_close(*b, "endset");
      n->kids.push_back(std::move(b));
      return n;
    }
    if (tag_->is_op(",")) fail(line_, "set of several names is not supported");
    tag_->expect_op("=");
    auto n = make(node::kind::set, line_);
    n->text = target;
    n->names.push_back(attribute);
    n->kids.push_back(tag_->expression());
    tag_->expect_end();
    return n;
  }

  node_ptr macro_statement() {
    auto n = make(node::kind::macro, line_);
    n->text = tag_->expect_name();
    auto body_node = make(node::kind::block, line_);
    std::vector<node_ptr> defaults;
    tag_->expect_op("(");
    while (!tag_->is_op(")")) {
      n->names.push_back(tag_->expect_name());
      if (tag_->is_op("=")) {
        tag_->next();
        defaults.push_back(tag_->expression());
      } else {
        defaults.push_back(nullptr);
      }
      if (!tag_->is_op(")")) tag_->expect_op(",");
    }
    tag_->next();
    tag_->expect_end();
    expect_close(*body_node, "endmacro");
    n->kids.push_back(std::move(body_node));
    for (auto& d : defaults) n->kids.push_back(std::move(d));
    return n;
  }

  static constexpr int max_depth = 100;
  std::vector<segment> segs_;
  size_t at_ = 0;
  int line_ = 1;
  int depth_ = 0;
  std::unique_ptr<expression_parser> tag_;
};

}  // namespace

std::unique_ptr<node> read_template(const std::string& source) {
  std::vector<segment> segs = cut(source);
  trim(segs);
  return statement_parser(std::move(segs)).whole();
}

}  // namespace illm::jinja
