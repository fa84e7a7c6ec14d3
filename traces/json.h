#pragma once
// The JSON document model of the importers, parsed by nlohmann-json (Debian's
// nlohmann-json3-dev, through its SAX interface) so that each value keeps the
// line and column where it starts, for error messages.
//
// Strict means: RFC 8259 as nlohmann checks it (no comments, no trailing commas,
// no NaN/Infinity, no leading zeros, no control characters inside strings,
// nothing but whitespace after the value, no lone surrogates), plus no duplicate
// keys and at most 512 levels of nesting. Every error is an InputError
// "<name>:<line>:<col>: ..." saying what was expected.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mobisim::traces::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // file order kept; duplicate keys rejected

class Value {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Value() = default;
  static Value make_bool(bool b);
  static Value make_number(double d);
  static Value make_string(std::string s);
  static Value make_array(Array a);
  static Value make_object(Object o);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_number() const { return type_ == Type::kNumber; }

  bool as_bool() const { return b_; }
  double as_number() const { return d_; }
  const std::string& as_string() const { return s_; }
  const Array& as_array() const { return *a_; }
  const Object& as_object() const { return *o_; }
  // Object member or nullptr.
  const Value* find(std::string_view key) const;

  // Where the value started in its source (1-based), for error messages.
  int line = 0, column = 0;

 private:
  Type type_ = Type::kNull;
  bool b_ = false;
  double d_ = 0.0;
  std::string s_;
  std::shared_ptr<Array> a_;
  std::shared_ptr<Object> o_;
};

const char* type_name(Value::Type t);

// Throws the InputError "<name>:<line>:<col>: <what>" at the value `at` of document `name`.
[[noreturn]] void fail_at(const std::string& name, const Value& at, const std::string& what);

// Parses one JSON document. `name` (usually the file path) prefixes errors;
// `first_line` lets the JSONL reader report file line numbers.
Value parse(std::string_view text, const std::string& name, int first_line = 1);

}  // namespace mobisim::traces::json
