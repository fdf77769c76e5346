#include "common/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"

namespace diloco {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's cap

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A minimal JSON reader for safetensors headers: objects, arrays, strings, integers, and the
// literals; enough to read any header the reference writer produces.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  int64_t number = 0;
  std::string str;
  std::vector<Json> items;
  // Object members: names and values side by side (a pair<string, Json> would need Json
  // complete here, which libstdc++ refuses under clang).
  std::vector<std::string> keys;
  std::vector<Json> values;
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}
  absl::StatusOr<Json> ParseDocument() {
    Json v;
    if (!Value(&v, 0)) return Error();
    Skip();
    if (pos_ != s_.size()) return Error();
    return v;
  }

 private:
  absl::Status Error() const {
    return absl::DataLossError(absl::StrCat("safetensors: malformed JSON header near byte ", pos_));
  }
  void Skip() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) return false;
        const char e = s_[pos_++];
        if (e == 'u') {
          if (pos_ + 4 > s_.size()) return false;
          const unsigned long cp =
              std::strtoul(std::string(s_.substr(pos_, 4)).c_str(), nullptr, 16);
          pos_ += 4;
          if (cp >= 0x80) return false;  // names here are ASCII
          c = static_cast<char>(cp);
        } else {
          static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
          const size_t i = kFrom.find(e);
          if (i == std::string_view::npos) return false;
          c = kTo[i];
        }
      }
      out->push_back(c);
    }
    return Eat('"');
  }
  bool Value(Json* v, int depth) {
    if (depth > 16) return false;
    Skip();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '"') {
      v->kind = Json::kString;
      return String(&v->str);
    }
    if (c == '{') {
      ++pos_;
      v->kind = Json::kObject;
      if (Eat('}')) return true;
      do {
        std::string key;
        Json value;
        if (!String(&key) || !Eat(':') || !Value(&value, depth + 1)) return false;
        v->keys.push_back(std::move(key));
        v->values.push_back(std::move(value));
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      ++pos_;
      v->kind = Json::kArray;
      if (Eat(']')) return true;
      do {
        v->items.emplace_back();
        if (!Value(&v->items.back(), depth + 1)) return false;
      } while (Eat(','));
      return Eat(']');
    }
    for (std::string_view lit : {"true", "false", "null"}) {
      if (s_.substr(pos_, lit.size()) == lit) {
        pos_ += lit.size();
        v->kind = lit == "null" ? Json::kNull : Json::kBool;
        return true;
      }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = pos_ + 1;
      while (end < s_.size() && s_[end] >= '0' && s_[end] <= '9') ++end;
      if (end - pos_ > 18) return false;
      v->kind = Json::kNumber;
      v->number = std::stoll(std::string(s_.substr(pos_, end - pos_)));
      pos_ = end;
      return true;
    }
    return false;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

const Json* Field(const Json& obj, std::string_view name) {
  for (size_t i = 0; i < obj.keys.size(); ++i)
    if (obj.keys[i] == name) return &obj.values[i];
  return nullptr;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    std::vector<std::string> kv;
    for (const auto& [k, v] : metadata) kv.push_back(JsonString(k) + ":" + JsonString(v));
    absl::StrAppend(&header, "\"__metadata__\":{", absl::StrJoin(kv, ","), "}");
  }
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(t.name, ": negative dimension"));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.data.size())
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": shape holds ", numel, " values, data has ", t.data.size()));
    if (t.name == "__metadata__")
      return absl::InvalidArgumentError("a tensor may not be named __metadata__");
    const uint64_t end = offset + t.data.size_bytes();
    absl::StrAppend(&header, header.size() > 1 ? "," : "", JsonString(t.name),
                    ":{\"dtype\":\"F32\",\"shape\":[", absl::StrJoin(t.shape, ","),
                    "],\"data_offsets\":[", offset, ",", end, "]}");
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  const uint64_t n = header.size();
  std::vector<std::span<const char>> pieces;
  pieces.reserve(2 + tensors.size());
  pieces.emplace_back(reinterpret_cast<const char*>(&n), sizeof(n));
  pieces.emplace_back(header.data(), header.size());
  for (const SafetensorsTensor& t : tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size_bytes());
  return WriteFileAtomically(path, pieces);
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(
        absl::StrCat("safetensors file ", path, ": ", absl::string_view(why.data(), why.size())));
  };
  uint64_t n = 0;
  if (bytes.size() < 8) return bad("shorter than its header length");
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) return bad("header length beyond the file");
  absl::StatusOr<Json> doc = JsonParser(std::string_view(bytes).substr(8, n)).ParseDocument();
  if (!doc.ok()) return doc.status();
  if (doc->kind != Json::kObject) return bad("header is not a JSON object");
  const std::string_view data = std::string_view(bytes).substr(8 + n);
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, LoadedTensor>> found;
  for (size_t field = 0; field < doc->keys.size(); ++field) {
    const std::string& name = doc->keys[field];
    const Json& v = doc->values[field];
    if (name == "__metadata__") {
      if (v.kind != Json::kObject) return bad("__metadata__ is not an object");
      for (size_t i = 0; i < v.keys.size(); ++i) {
        if (v.values[i].kind != Json::kString) return bad("metadata values must be strings");
        file.metadata[v.keys[i]] = v.values[i].str;
      }
      continue;
    }
    const Json* dtype = Field(v, "dtype");
    const Json* shape = Field(v, "shape");
    const Json* offsets = Field(v, "data_offsets");
    if (!dtype || dtype->kind != Json::kString || dtype->str != "F32")
      return bad(absl::StrCat(name, ": only F32 tensors are read"));
    if (!shape || shape->kind != Json::kArray || !offsets || offsets->kind != Json::kArray ||
        offsets->items.size() != 2)
      return bad(absl::StrCat(name, ": missing shape or data_offsets"));
    LoadedTensor t;
    t.name = name;
    uint64_t numel = 1;
    for (const Json& d : shape->items) {
      if (d.kind != Json::kNumber || d.number < 0 || d.number > (int64_t{1} << 40))
        return bad(absl::StrCat(name, ": bad dimension"));
      t.shape.push_back(d.number);
      numel *= static_cast<uint64_t>(d.number);
      if (numel > (uint64_t{1} << 40)) return bad(absl::StrCat(name, ": too large"));
    }
    const Json& b = offsets->items[0];
    const Json& e = offsets->items[1];
    if (b.kind != Json::kNumber || e.kind != Json::kNumber || b.number < 0 || e.number < b.number ||
        static_cast<uint64_t>(e.number) > data.size() ||
        static_cast<uint64_t>(e.number - b.number) != numel * sizeof(float))
      return bad(absl::StrCat(name, ": data_offsets disagree with its shape or the file"));
    t.data.resize(numel);
    if (numel > 0) std::memcpy(t.data.data(), data.data() + b.number, numel * sizeof(float));
    found.emplace_back(static_cast<uint64_t>(b.number), std::move(t));
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [off, t] : found) file.tensors.push_back(std::move(t));
  return file;
}

}  // namespace diloco
