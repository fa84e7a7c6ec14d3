#include "traces/json.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
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

// Deep inputs would otherwise overflow the stack through recursion.
constexpr int kMaxDepth = 512;

class Parser {
 public:
  Parser(std::string_view text, const std::string& name, int first_line)
      : t_(text), name_(name), line_(first_line) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (pos_ != t_.size()) fail(fmt::format("unexpected {} after the JSON value", describe()));
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("{}:{}:{}: malformed JSON: {}", name_, line_, col_, what));
  }

  std::string describe() const {
    if (pos_ >= t_.size()) return "end of input";
    unsigned char c = static_cast<unsigned char>(t_[pos_]);
    if (c < 0x20 || c >= 0x7f) return fmt::format("byte 0x{:02x}", c);
    return fmt::format("'{}'", static_cast<char>(c));
  }

  void advance() {
    if (t_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  void skip_ws() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r'))
      advance();
  }

  void expect_literal(std::string_view lit) {
    if (t_.substr(pos_, lit.size()) != lit) fail(fmt::format("expected a JSON value, got {}", describe()));
    for (std::size_t i = 0; i < lit.size(); ++i) advance();
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail(fmt::format("nesting deeper than {} levels", kMaxDepth));
    if (pos_ >= t_.size()) fail("expected a JSON value, got end of input");
    const int l = line_, c = col_;
    Value v;
    switch (t_[pos_]) {
      case '{': v = object(depth); break;
      case '[': v = array(depth); break;
      case '"': v = Value::make_string(string()); break;
      case 't': expect_literal("true"); v = Value::make_bool(true); break;
      case 'f': expect_literal("false"); v = Value::make_bool(false); break;
      case 'n': expect_literal("null"); break;
      default:
        if (t_[pos_] == '-' || (t_[pos_] >= '0' && t_[pos_] <= '9'))
          v = number();
        else
          fail(fmt::format("expected a JSON value, got {}", describe()));
    }
    v.line = l;
    v.column = c;
    return v;
  }

  Value object(int depth) {
    advance();  // {
    Object o;
    std::set<std::string> seen;
    skip_ws();
    if (pos_ < t_.size() && t_[pos_] == '}') {
      advance();
      return Value::make_object(std::move(o));
    }
    for (;;) {
      skip_ws();
      if (pos_ >= t_.size() || t_[pos_] != '"') fail(fmt::format("expected a string key, got {}", describe()));
      std::string key = string();
      if (!seen.insert(key).second) fail(fmt::format("duplicate key \"{}\"", key));
      skip_ws();
      if (pos_ >= t_.size() || t_[pos_] != ':') fail(fmt::format("expected ':' after key, got {}", describe()));
      advance();
      skip_ws();
      o.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (pos_ < t_.size() && t_[pos_] == ',') {
        advance();
        continue;
      }
      if (pos_ < t_.size() && t_[pos_] == '}') {
        advance();
        return Value::make_object(std::move(o));
      }
      fail(fmt::format("expected ',' or '}}' in object, got {}", describe()));
    }
  }

  Value array(int depth) {
    advance();  // [
    Array a;
    skip_ws();
    if (pos_ < t_.size() && t_[pos_] == ']') {
      advance();
      return Value::make_array(std::move(a));
    }
    for (;;) {
      skip_ws();
      a.push_back(value(depth + 1));
      skip_ws();
      if (pos_ < t_.size() && t_[pos_] == ',') {
        advance();
        continue;
      }
      if (pos_ < t_.size() && t_[pos_] == ']') {
        advance();
        return Value::make_array(std::move(a));
      }
      fail(fmt::format("expected ',' or ']' in array, got {}", describe()));
    }
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      if (pos_ >= t_.size()) fail("truncated \\u escape");
      char c = t_[pos_];
      unsigned d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail(fmt::format("invalid hex digit {} in \\u escape", describe()));
      v = v * 16 + d;
      advance();
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    advance();  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= t_.size()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(t_[pos_]);
      if (c == '"') {
        advance();
        return out;
      }
      if (c < 0x20) fail(fmt::format("unescaped control character 0x{:02x} in string", c));
      if (c != '\\') {
        out += static_cast<char>(c);
        advance();
        continue;
      }
      advance();
      if (pos_ >= t_.size()) fail("unterminated escape");
      char e = t_[pos_];
      advance();
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (t_.substr(pos_, 2) != "\\u") fail("high surrogate not followed by a low surrogate");
            advance();
            advance();
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone low surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(fmt::format("invalid escape '\\{}'", e));
      }
    }
  }

  Value number() {
    const std::size_t start = pos_;
    auto digit = [&] { return pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9'; };
    if (t_[pos_] == '-') advance();
    if (!digit()) fail("expected a digit");
    if (t_[pos_] == '0') {
      advance();
      if (digit()) fail("leading zeros are not allowed");
    } else {
      while (digit()) advance();
    }
    if (pos_ < t_.size() && t_[pos_] == '.') {
      advance();
      if (!digit()) fail("expected a digit after '.'");
      while (digit()) advance();
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      advance();
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-')) advance();
      if (!digit()) fail("expected a digit in exponent");
      while (digit()) advance();
    }
    std::string s(t_.substr(start, pos_ - start));
    double d = std::strtod(s.c_str(), nullptr);
    if (!std::isfinite(d)) fail(fmt::format("number {} out of range", s));
    return Value::make_number(d);
  }

  std::string_view t_;
  const std::string& name_;
  std::size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

}  // namespace

Value parse(std::string_view text, const std::string& name, int first_line) {
  return Parser(text, name, first_line).document();
}

}  // namespace mobisim::traces::json
