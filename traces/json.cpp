#include "traces/json.h"

#include <fmt/format.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "sim/error.h"

namespace mobisim::traces::json {

Value Value::make_bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}
Value Value::make_number(double d) {
  Value v;
  v.type_ = Type::kNumber;
  v.d_ = d;
  return v;
}
Value Value::make_string(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::make_array(Array a) {
  Value v;
  v.type_ = Type::kArray;
  v.a_ = std::make_shared<Array>(std::move(a));
  return v;
}
Value Value::make_object(Object o) {
  Value v;
  v.type_ = Type::kObject;
  v.o_ = std::make_shared<Object>(std::move(o));
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : *o_)
    if (k == key) return &v;
  return nullptr;
}

const char* type_name(Value::Type t) {
  switch (t) {
    case Value::Type::kNull: return "null";
    case Value::Type::kBool: return "boolean";
    case Value::Type::kNumber: return "number";
    case Value::Type::kString: return "string";
    case Value::Type::kArray: return "array";
    case Value::Type::kObject: return "object";
  }
  return "?";
}

namespace {

constexpr std::size_t kMaxDepth = 512;  // deeper documents are refused (no importer needs them)

// An input iterator over the text that records how far the parser has read, so values can be
// given the line and column where they start.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  CountingIterator(const char* p, const char* begin, std::size_t* consumed) : p_(p), begin_(begin), consumed_(consumed) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    ++p_;
    *consumed_ = static_cast<std::size_t>(p_ - begin_);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char* begin_;
  std::size_t* consumed_;
};

bool number_char(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

// Builds Values from nlohmann's SAX events; strictness beyond RFC 8259 (duplicate keys, depth) is
// checked here, the grammar by nlohmann.
class Builder : public nlohmann::json_sax<nlohmann::json> {
 public:
  Builder(std::string_view text, const std::string& name, int first_line, const std::size_t* consumed)
      : text_(text), name_(name), first_line_(first_line), consumed_(consumed) {}

  Value take() { return std::move(root_); }

  bool null() override { return add(Value(), literal_start(4)); }
  bool boolean(bool b) override { return add(Value::make_bool(b), literal_start(b ? 4 : 5)); }
  bool number_integer(number_integer_t v) override { return add(Value::make_number(static_cast<double>(v)), number_start()); }
  bool number_unsigned(number_unsigned_t v) override { return add(Value::make_number(static_cast<double>(v)), number_start()); }
  bool number_float(number_float_t v, const string_t&) override { return add(Value::make_number(v), number_start()); }
  bool string(string_t& s) override { return add(Value::make_string(std::move(s)), string_start()); }
  bool binary(binary_t&) override { return false; }  // not produced by the JSON grammar

  bool start_object(std::size_t) override { return open(Value::make_object({})); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    for (const auto& [existing, v] : f.object)
      if (existing == k) fail(string_start(), fmt::format("duplicate key \"{}\"", k));
    f.key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Value::make_array({})); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // nlohmann: "[json.exception.parse_error.101] parse error at line L, column C: <what>"
    std::string what = e.what();
    if (const auto colon = what.find(": "); what.rfind("[json.exception", 0) == 0 && colon != std::string::npos)
      what = what.substr(colon + 2);
    fail(*consumed_, what);
  }

 private:
  struct Frame {
    Value value;  // carries the type and the position of the container
    Array array;
    Object object;
    std::string key;
  };

  [[noreturn]] void fail(std::size_t offset, const std::string& what) const {
    const auto [line, column] = line_column(offset);
    throw InputError(fmt::format("{}:{}:{}: {}", name_, line, column, what));
  }

  // Offsets mostly grow, so a cursor keeps this linear in the text size.
  std::pair<int, int> line_column(std::size_t offset) const {
    offset = std::min(offset, text_.size());
    if (offset < cursor_.offset) cursor_ = Cursor{0, first_line_, 1};
    for (; cursor_.offset < offset; ++cursor_.offset) {
      if (text_[cursor_.offset] == '\n') {
        ++cursor_.line;
        cursor_.column = 1;
      } else {
        ++cursor_.column;
      }
    }
    return {cursor_.line, cursor_.column};
  }

  // Where the token just read started (the parser has read exactly up to its end, plus one
  // character of look-ahead after a number).
  std::size_t literal_start(std::size_t len) const { return *consumed_ >= len ? *consumed_ - len : 0; }
  std::size_t number_start() const {
    std::size_t e = *consumed_;
    if (e > 0 && !number_char(text_[e - 1])) --e;
    while (e > 0 && number_char(text_[e - 1])) --e;
    return e;
  }
  std::size_t string_start() const {
    std::size_t i = *consumed_ >= 2 ? *consumed_ - 2 : 0;  // before the closing quote
    for (; i > 0; --i) {
      if (text_[i] != '"') continue;
      std::size_t slashes = 0;
      while (i > slashes && text_[i - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) break;
    }
    return i;
  }

  void place(Value v, std::size_t offset) {
    std::tie(v.line, v.column) = line_column(offset);
    if (stack_.empty()) {
      root_ = std::move(v);
    } else if (stack_.back().value.is_array()) {
      stack_.back().array.push_back(std::move(v));
    } else {
      stack_.back().object.emplace_back(std::move(stack_.back().key), std::move(v));
    }
  }
  bool add(Value v, std::size_t offset) {
    place(std::move(v), offset);
    return true;
  }
  bool open(Value container) {
    const std::size_t at = *consumed_ > 0 ? *consumed_ - 1 : 0;
    if (stack_.size() >= kMaxDepth) fail(at, fmt::format("nesting deeper than {} levels", kMaxDepth));
    std::tie(container.line, container.column) = line_column(at);
    stack_.push_back(Frame{std::move(container), {}, {}, {}});
    return true;
  }
  bool close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    Value v = f.value.is_array() ? Value::make_array(std::move(f.array)) : Value::make_object(std::move(f.object));
    v.line = f.value.line;
    v.column = f.value.column;
    if (stack_.empty()) {
      root_ = std::move(v);
    } else if (stack_.back().value.is_array()) {
      stack_.back().array.push_back(std::move(v));
    } else {
      stack_.back().object.emplace_back(std::move(stack_.back().key), std::move(v));
    }
    return true;
  }

  struct Cursor {
    std::size_t offset;
    int line, column;
  };
  std::string_view text_;
  const std::string& name_;
  int first_line_;
  mutable Cursor cursor_{0, first_line_, 1};
  const std::size_t* consumed_;
  std::vector<Frame> stack_;
  Value root_;
};

}  // namespace

void fail_at(const std::string& name, const Value& at, const std::string& what) {
  throw InputError(fmt::format("{}:{}:{}: {}", name, at.line, at.column, what));
}

Value parse(std::string_view text, const std::string& name, int first_line) {
  std::size_t consumed = 0;
  Builder builder(text, name, first_line, &consumed);
  CountingIterator first(text.data(), text.data(), &consumed), last(text.data() + text.size(), text.data(), &consumed);
  nlohmann::json::sax_parse(first, last, &builder, nlohmann::json::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/false);
  return builder.take();
}

}  // namespace mobisim::traces::json
