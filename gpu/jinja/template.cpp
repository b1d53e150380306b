#include "gpu/jinja/template.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>

#include "gpu/jinja/builtins.hpp"
#include "gpu/jinja/syntax.hpp"

namespace illm::jinja {

namespace {

/// Names visible where a node renders: its own, then its parent's, up to the template's.
struct scope {
  std::map<std::string, value> names;
  scope* parent = nullptr;

  const value* find(const std::string& name) const {
    for (const scope* s = this; s; s = s->parent)
      if (auto it = s->names.find(name); it != s->names.end()) return &it->second;
    return nullptr;
  }
};

enum class flow { normal, break_loop, continue_loop };

class renderer {
 public:
  explicit renderer(scope& top) : top_(top) {}

  flow run(const node& n, scope& s, std::string& out) {
    switch (n.what) {
      case node::kind::text: return write(n, n.text, out);
      case node::kind::output: return write(n, eval(*n.kids[0], s).render(), out);
      case node::kind::block:
        for (const auto& k : n.kids)
          if (flow f = run(*k, s, out); f != flow::normal) return f;
        return flow::normal;
      case node::kind::if_: return run_if(n, s, out);
      case node::kind::for_: return run_for(n, s, out);
      case node::kind::set: run_set(n, s); return flow::normal;
      case node::kind::set_block: {
        std::string captured;
        run(*n.kids[0], s, captured);
        s.names[n.text] = value(json(captured));
        return flow::normal;
      }
      case node::kind::filter_block: {
        std::string captured;
        run(*n.kids[0], s, captured);
        return write(n, apply_filter(n.text, value(json(captured)), arguments(n, 1, s)).render(), out);
      }
      case node::kind::macro: s.names[n.text] = make_macro(n); return flow::normal;
      case node::kind::break_: return flow::break_loop;
      case node::kind::continue_: return flow::continue_loop;
      default: throw error(n, "an expression where a statement belongs");
    }
  }

 private:
  /// Appends `text` to a render's output (or a captured block's, a macro's), bounded by max_text_bytes.
  flow write(const node& n, const std::string& text, std::string& out) {
    if (out.size() + text.size() > max_text_bytes) throw error(n, "the output is longer than max_text_bytes");
    out += text;
    return flow::normal;
  }

  template_error error(const node& n, const std::string& what, error_kind kind = error_kind::type) const {
    return template_error("template line " + std::to_string(n.line) + ": " + what, kind);
  }

  flow run_if(const node& n, scope& s, std::string& out) {
    size_t i = 0;
    for (; i + 1 < n.kids.size(); i += 2)
      if (eval(*n.kids[i], s).truthy()) return run(*n.kids[i + 1], s, out);
    return i < n.kids.size() ? run(*n.kids[i], s, out) : flow::normal;
  }

  /// The items a for loop walks: a list's elements, a dict's keys, a string's characters; undefined: none.
  std::vector<value> items_of(const value& v, const node& n) {
    std::vector<value> out;
    if (v.is_undefined() || v.is_none()) {
      if (v.is_none()) throw error(n, "'NoneType' object is not iterable");
      return out;
    }
    if (v.is_list() || v.is_generator())
      for (const json& e : v.data()) out.emplace_back(e);
    else if (v.is_dict())
      for (const auto& [k, e] : v.data().items()) out.emplace_back(json(k));
    else if (v.is_string())
      for (const std::string& c : characters(v.str())) out.emplace_back(json(c));
    else
      throw error(n, "'" + v.type_name() + "' object is not iterable");
    return out;
  }

  flow run_for(const node& n, scope& s, std::string& out) {
    std::vector<value> all = items_of(eval(*n.kids[0], s), n);
    // The filter runs first: loop.* counts only the items it keeps.
    std::vector<value> kept;
    for (value& item : all) {
      if (!n.kids[1]) {
        kept.push_back(std::move(item));
        continue;
      }
      scope probe{{}, &s};
      bind_targets(n, item, probe);
      if (eval(*n.kids[1], probe).truthy()) kept.push_back(std::move(item));
    }
    if (kept.empty()) return n.kids[3] ? run(*n.kids[3], s, out) : flow::normal;
    for (size_t i = 0; i < kept.size(); ++i) {
      charge(n, iteration_steps + 3 * work_of(kept[i]));  // and the item's copies (target, previtem, nextitem)
      scope inner{{}, &s};
      bind_targets(n, kept[i], inner);
      const int64_t length = int64_t(kept.size()), index = int64_t(i);
      json loop = {{"index", index + 1}, {"index0", index}, {"revindex", length - index},
                   {"revindex0", length - index - 1}, {"first", i == 0}, {"last", i + 1 == kept.size()},
                   {"length", length}};
      loop["previtem"] = i > 0 ? kept[i - 1].data() : json();
      loop["nextitem"] = i + 1 < kept.size() ? kept[i + 1].data() : json();
      inner.names["loop"] = value(std::move(loop));
      if (run(*n.kids[2], inner, out) == flow::break_loop) break;
    }
    return flow::normal;
  }

  void bind_targets(const node& n, const value& item, scope& s) {
    if (n.names.size() == 1) {
      s.names[n.names[0]] = item;
      return;
    }
    if (!item.is_list() || item.data().size() != n.names.size())
      throw error(n, "cannot unpack " + item.type_name() + " into " + std::to_string(n.names.size()) + " names");
    for (size_t k = 0; k < n.names.size(); ++k) s.names[n.names[k]] = value(item.data()[k]);
  }

  void run_set(const node& n, scope& s) {
    value v = eval(*n.kids[0], s);
    if (n.names[0].empty()) {
      s.names[n.text] = std::move(v);
      return;
    }
    const value* target = s.find(n.text);
    if (!target || !target->is_namespace()) throw error(n, "cannot set an attribute of '" + n.text + "': not a namespace");
    if (!v.is_data()) throw error(n, "a namespace holds data only");
    target->ns()[n.names[0]] = v.data();
  }

  value make_macro(const node& n) {
    const node* def = &n;
    return value::make_callable([this, def](const call_args& args) {
      if (calls_ >= max_calls) throw error(*def, "macros nested too deeply");
      struct leave {
        int& c;
        ~leave() { --c; }
      } guard{++calls_};
      scope frame{{}, &top_};
      for (size_t i = 0; i < def->names.size(); ++i) {
        const value* given = args.get(i, def->names[i]);
        frame.names[def->names[i]] = given ? *given : def->kids[i + 1] ? eval(*def->kids[i + 1], frame) : value();
      }
      std::string out;
      run(*def->kids[0], frame, out);
      return value(json(out));
    });
  }

  value lookup(const node& n, scope& s) {
    if (const value* v = s.find(n.text)) return *v;
    return global(n.text);
  }

  call_args arguments(const node& n, size_t first, scope& s) {
    call_args a;
    for (size_t i = first; i < first + n.positional; ++i) a.positional.push_back(eval(*n.kids[i], s));
    for (size_t k = 0; k < n.names.size(); ++k)
      a.keywords.emplace_back(n.names[k], eval(*n.kids[first + n.positional + k], s));
    return a;
  }

 public:
  value eval(const node& n, scope& s) {
    charge(n, 1);
    try {
      value v = eval_node(n, s);
      charge(n, work_of(v));
      return v;
    } catch (const template_error& e) {
      const std::string what = e.what();
      if (what.rfind("template line", 0) == 0) throw;
      throw error(n, what, e.kind);
    }
  }

 private:
  value eval_node(const node& n, scope& s) {
    switch (n.what) {
      case node::kind::literal: return n.constant;
      case node::kind::name: return lookup(n, s);
      case node::kind::attribute: return attribute(eval(*n.kids[0], s), n.text);
      case node::kind::item: return item(eval(*n.kids[0], s), eval(*n.kids[1], s));
      case node::kind::slice: {
        const auto part = [&](size_t i) { return n.kids[i] ? eval(*n.kids[i], s) : value::none(); };
        return slice(eval(*n.kids[0], s), part(1), part(2), part(3));
      }
      case node::kind::call: {
        value callee = eval(*n.kids[0], s);
        if (!callee.is_callable())
          throw error(n, "'" + callee.type_name() + "' object is not callable",
                      callee.is_undefined() ? error_kind::undefined : error_kind::type);
        return callee.fn()(arguments(n, 1, s));
      }
      case node::kind::filter: return apply_filter(n.text, eval(*n.kids[0], s), arguments(n, 1, s));
      case node::kind::test: {
        const bool r = apply_test(n.text, eval(*n.kids[0], s), arguments(n, 1, s));
        return value(json(n.negated ? !r : r));
      }
      case node::kind::unary: {
        value v = eval(*n.kids[0], s);
        if (n.text == "not") return value(json(!v.truthy()));
        return negate(v, n.text == "-");
      }
      case node::kind::binary: return binary(n, s);
      case node::kind::conditional:
        if (eval(*n.kids[1], s).truthy()) return eval(*n.kids[0], s);
        return n.kids[2] ? eval(*n.kids[2], s) : value();
      case node::kind::list: {
        json l = json::array();
        for (const auto& k : n.kids) l.push_back(as_data(eval(*k, s)));
        check_data_depth(l, "a list");
        return value(std::move(l));
      }
      case node::kind::dict: {
        json d = json::object();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) d[eval(*n.kids[i], s).render()] = as_data(eval(*n.kids[i + 1], s));
        check_data_depth(d, "a dict");
        return value(std::move(d));
      }
      default: throw error(n, "a statement where an expression belongs");
    }
  }

  value binary(const node& n, scope& s) {
    const std::string& op = n.text;
    if (op == "and") {
      value l = eval(*n.kids[0], s);
      return l.truthy() ? eval(*n.kids[1], s) : l;
    }
    if (op == "or") {
      value l = eval(*n.kids[0], s);
      return l.truthy() ? l : eval(*n.kids[1], s);
    }
    return apply_operator(op, eval(*n.kids[0], s), eval(*n.kids[1], s));
  }

  /// Counts `steps` more of the render's; past max_steps, a template_error.
  void charge(const node& n, uint64_t steps) {
    steps_ += steps;
    if (steps_ > max_steps) throw error(n, "the template takes too many steps");
  }

  /// The steps an evaluation's value costs beyond its own: one per bytes_per_step of a string and per
  /// items_per_step of a list (a value is copied where it is read, and a repetition or a concatenation builds it),
  /// so that a render's time is bounded by max_steps whatever sizes its values reach.
  static uint64_t work_of(const value& v) {
    if (v.is_string()) return v.str().size() / bytes_per_step;
    if (v.is_list() || v.is_dict()) return v.data().size() / items_per_step;
    return 0;
  }

  /// Evaluations a render may take, and macro calls it may nest: a template is a few pages, not a program.
  static constexpr uint64_t max_steps = 20'000'000;
  static constexpr uint64_t bytes_per_step = 16, items_per_step = 4;
  /// What an iteration of a for loop costs: its loop variable (a dict of nine) and its scope are built anew.
  static constexpr uint64_t iteration_steps = 16;
  static constexpr int max_calls = 64;
  scope& top_;
  uint64_t steps_ = 0;
  int calls_ = 0;
};

}  // namespace

template_program template_program::parse(const std::string& source) {
  template_program p;
  try {
    p.root_ = read_template(source);
  } catch (const template_error&) {
    throw;
  } catch (const std::exception& e) {  // a library's error on odd input: the template's
    throw template_error(std::string("cannot read the template: ") + e.what(), error_kind::syntax);
  }
  return p;
}

template_program::~template_program() = default;
template_program::template_program(template_program&&) noexcept = default;
template_program& template_program::operator=(template_program&&) noexcept = default;

std::string template_program::render(const json& variables) const {
  scope top;
  if (variables.is_object())
    for (const auto& [k, v] : variables.items()) top.names[k] = value(v);
  renderer r(top);
  std::string out;
  try {
    r.run(*root_, top, out);
  } catch (const template_error&) {
    throw;
  } catch (const std::exception& e) {  // a type the data has that an operation does not take
    throw template_error(std::string("cannot render the template: ") + e.what());
  }
  return out;
}

}  // namespace illm::jinja
