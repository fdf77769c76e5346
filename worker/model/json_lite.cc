#include "worker/model/json_lite.h"

#include "absl/strings/str_cat.h"

namespace diloco::model::json {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(absl::string_view s) : s_(s) {}

  absl::StatusOr<Value> Document() {
    Value v;
    if (absl::Status st = ParseValue(v, 0); !st.ok()) return st;
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("json: ", what, " at byte ", pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Literal(absl::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  absl::Status ParseValue(Value& v, int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return ParseObject(v, depth);
    if (c == '[') return ParseArray(v, depth);
    if (c == '"') {
      v.kind = Value::Kind::kString;
      return ParseString(v.text);
    }
    if (Literal("true")) {
      v.kind = Value::Kind::kBool;
      v.boolean = true;
      return absl::OkStatus();
    }
    if (Literal("false")) {
      v.kind = Value::Kind::kBool;
      return absl::OkStatus();
    }
    if (Literal("null")) return absl::OkStatus();
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = pos_;
      ++pos_;
      while (pos_ < s_.size() &&
             ((s_[pos_] >= '0' && s_[pos_] <= '9') || s_[pos_] == '.' || s_[pos_] == 'e' ||
              s_[pos_] == 'E' || s_[pos_] == '+' || s_[pos_] == '-'))
        ++pos_;
      v.kind = Value::Kind::kNumber;
      v.text = std::string(s_.substr(start, pos_ - start));
      return absl::OkStatus();
    }
    return Error("unexpected character");
  }

  absl::Status ParseString(std::string& out) {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return Error("short \\u escape");
          unsigned cp = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = s_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= h - '0';
            else if (h >= 'a' && h <= 'f')
              cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              cp |= h - 'A' + 10;
            else
              return Error("bad \\u escape");
          }
          // UTF-8 encode (surrogate pairs are kept as two 3-byte sequences: names are ASCII).
          if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  absl::Status ParseArray(Value& v, int depth) {
    ++pos_;
    v.kind = Value::Kind::kArray;
    if (Consume(']')) return absl::OkStatus();
    while (true) {
      v.array.emplace_back();
      if (absl::Status st = ParseValue(v.array.back(), depth + 1); !st.ok()) return st;
      if (Consume(']')) return absl::OkStatus();
      if (!Consume(',')) return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseObject(Value& v, int depth) {
    ++pos_;
    v.kind = Value::Kind::kObject;
    if (Consume('}')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a key");
      std::string key;
      if (absl::Status st = ParseString(key); !st.ok()) return st;
      if (!Consume(':')) return Error("expected ':'");
      v.object.emplace_back(std::move(key), Value());
      if (absl::Status st = ParseValue(v.object.back().second, depth + 1); !st.ok()) return st;
      if (Consume('}')) return absl::OkStatus();
      if (!Consume(',')) return Error("expected ',' or '}'");
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Value> Parse(absl::string_view text) { return Parser(text).Document(); }

}  // namespace diloco::model::json
