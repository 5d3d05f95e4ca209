// Test support: a minimal JSON parser (RFC 8259 values; \u escapes outside ASCII are kept as
// '?'), so tests can read the trace and graph files without python. Throws std::runtime_error
// naming the offset of the first syntax error.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace simpler::testing {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  [[nodiscard]] bool has(const std::string& k) const {
    return type == Type::Object && obj.count(k) != 0;
  }
  /// Member `k` of an object (throws when missing).
  [[nodiscard]] const Json& operator[](const std::string& k) const {
    auto it = obj.find(k);
    if (type != Type::Object || it == obj.end()) throw std::runtime_error("json: no member " + k);
    return it->second;
  }
  [[nodiscard]] const Json& operator[](std::size_t i) const { return arr.at(i); }
  [[nodiscard]] long long integer() const { return static_cast<long long>(num); }
};

namespace json_detail {
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}
  Json parse_document() {
    Json v = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("json: ") + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail("unexpected character");
    ++i_;
  }
  void word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) fail("bad literal");
    i_ += w.size();
  }
  Json value() {
    Json v;
    switch (peek()) {
      case '{': {
        v.type = Json::Type::Object;
        ++i_;
        if (peek() == '}') {
          ++i_;
          return v;
        }
        for (;;) {
          if (peek() != '"') fail("object key expected");
          std::string k = string();
          expect(':');
          v.obj[k] = value();
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect('}');
          return v;
        }
      }
      case '[': {
        v.type = Json::Type::Array;
        ++i_;
        if (peek() == ']') {
          ++i_;
          return v;
        }
        for (;;) {
          v.arr.push_back(value());
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect(']');
          return v;
        }
      }
      case '"':
        v.type = Json::Type::String;
        v.str = string();
        return v;
      case 't':
        word("true");
        v.type = Json::Type::Bool;
        v.b = true;
        return v;
      case 'f':
        word("false");
        v.type = Json::Type::Bool;
        return v;
      case 'n':
        word("null");
        return v;
      default:
        return number();
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
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
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          const std::string hex(s_.substr(i_, 4));
          char* end = nullptr;
          const long cp = std::strtol(hex.c_str(), &end, 16);
          if (end != hex.c_str() + 4) fail("bad \\u escape");
          i_ += 4;
          out += cp < 0x80 ? static_cast<char>(cp) : '?';
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }
  Json number() {
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    const auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > d;
    };
    if (!digits()) fail("value expected");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) fail("digits expected after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) fail("exponent digits expected");
    }
    Json v;
    v.type = Json::Type::Number;
    v.num = std::strtod(std::string(s_.substr(start, i_ - start)).c_str(), nullptr);
    return v;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};
}  // namespace json_detail

inline Json parse_json(std::string_view text) {
  return json_detail::Parser(text).parse_document();
}

}  // namespace simpler::testing
