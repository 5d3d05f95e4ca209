// Test support: a small strict JSON parser (RFC 8259 values; no extensions), so tests can check
// that the JSON files the runtime writes parse and read what they say without a dependency.
// parse() throws std::runtime_error naming the byte offset of the first defect.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace simpler_test::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Value> items;
  std::map<std::string, Value> members;

  [[nodiscard]] bool has(const std::string& key) const {
    return kind == Kind::Object && members.count(key) != 0;
  }
  /// The member `key`; throws when this is not an object or has no such member.
  [[nodiscard]] const Value& operator[](const std::string& key) const {
    if (kind != Kind::Object)
      throw std::runtime_error("json: not an object (looking up " + key + ")");
    const auto it = members.find(key);
    if (it == members.end()) throw std::runtime_error("json: no member " + key);
    return it->second;
  }
  [[nodiscard]] std::int64_t integer() const {
    if (kind != Kind::Number) throw std::runtime_error("json: not a number");
    return static_cast<std::int64_t>(number);
  }
  [[nodiscard]] const std::string& str() const {
    if (kind != Kind::String) throw std::runtime_error("json: not a string");
    return text;
  }
};

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value document() {
    Value v = value(0);
    ws();
    if (at_ != s_.size()) fail("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at byte " + std::to_string(at_));
  }
  void ws() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t'))
      ++at_;
  }
  char peek() {
    ws();
    if (at_ >= s_.size()) fail("unexpected end");
    return s_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  void literal(std::string_view word) {
    if (s_.substr(at_, word.size()) != word) fail("bad literal");
    at_ += word.size();
  }

  Value value(int depth) {
    if (depth > 256) fail("nesting too deep");
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::Object;
      ++at_;
      if (peek() == '}') {
        ++at_;
        return v;
      }
      for (;;) {
        if (peek() != '"') fail("expected a member name");
        std::string key = string();
        expect(':');
        if (v.members.count(key) != 0) fail("duplicate member " + key);
        v.members.emplace(std::move(key), value(depth + 1));
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Kind::Array;
      ++at_;
      if (peek() == ']') {
        ++at_;
        return v;
      }
      for (;;) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::String;
      v.text = string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = Value::Kind::Bool;
      v.boolean = c == 't';
      literal(c == 't' ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    v.kind = Value::Kind::Number;
    v.number = number();
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_ >= s_.size()) fail("unterminated string");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("unterminated escape");
      const char e = s_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (at_ + 4 > s_.size()) fail("short \\u escape");
          for (int i = 0; i < 4; ++i) {
            if (std::isxdigit(static_cast<unsigned char>(s_[at_ + i])) == 0) fail("bad \\u escape");
          }
          const auto cp = std::strtoul(std::string(s_.substr(at_, 4)).c_str(), nullptr, 16);
          at_ += 4;
          out += cp < 0x80 ? static_cast<char>(cp) : '?';  // tests only compare ASCII
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  double number() {
    const std::size_t start = at_;
    if (at_ < s_.size() && s_[at_] == '-') ++at_;
    const auto digits = [&] {
      const std::size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      return at_ - from;
    };
    const std::size_t int_start = at_;
    if (digits() == 0) fail("expected a value");
    if (s_[int_start] == '0' && at_ - int_start > 1) fail("leading zero");
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      if (digits() == 0) fail("expected exponent digits");
    }
    return std::strtod(std::string(s_.substr(start, at_ - start)).c_str(), nullptr);
  }

  std::string_view s_;
  std::size_t at_ = 0;
};

/// Parses a whole JSON document; throws std::runtime_error on the first defect.
inline Value parse(std::string_view text) {
  return Parser(text).document();
}

}  // namespace simpler_test::json
