#include "worker/model/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/model/json_lite.h"

namespace diloco::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

int DtypeBytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

absl::StatusOr<uint64_t> AsUint(const json::Value& v, absl::string_view what) {
  uint64_t x = 0;
  if (v.kind != json::Value::Kind::kNumber || !absl::SimpleAtoi(v.text, &x) || v.text[0] == '-')
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, " must be a non-negative integer"));
  return x;
}

const json::Value* Field(const json::Value& obj, absl::string_view key) {
  for (const auto& [k, v] : obj.object)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

absl::StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<char> bytes;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f.get())) > 0)
    bytes.insert(bytes.end(), buf, buf + got);
  if (bytes.size() < 8) return absl::DataLossError(absl::StrCat(path, ": shorter than 8 bytes"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8)
    return absl::DataLossError(absl::StrCat(path, ": header length ", n, " exceeds the file (",
                                            bytes.size(), " bytes) or the 100 MiB cap"));
  absl::StatusOr<json::Value> header = json::Parse(absl::string_view(bytes.data() + 8, n));
  if (!header.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
  if (header->kind != json::Value::Kind::kObject)
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not a JSON object"));
  const char* data = bytes.data() + 8 + n;
  const uint64_t data_size = bytes.size() - 8 - n;
  SafetensorsContents out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, v] : header->object) {
    if (name == "__metadata__") {
      if (v.kind != json::Value::Kind::kObject)
        return absl::InvalidArgumentError(absl::StrCat(path, ": __metadata__ is not an object"));
      for (const auto& [k, s] : v.object) {
        if (s.kind != json::Value::Kind::kString)
          return absl::InvalidArgumentError(absl::StrCat(path, ": metadata values are strings"));
        out.metadata[k] = s.text;
      }
      continue;
    }
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", why));
    };
    if (v.kind != json::Value::Kind::kObject) return bad("not an object");
    const json::Value* dtype = Field(v, "dtype");
    const json::Value* shape = Field(v, "shape");
    const json::Value* offsets = Field(v, "data_offsets");
    if (!dtype || dtype->kind != json::Value::Kind::kString) return bad("no dtype");
    if (!shape || shape->kind != json::Value::Kind::kArray) return bad("no shape");
    if (!offsets || offsets->kind != json::Value::Kind::kArray || offsets->array.size() != 2)
      return bad("data_offsets must be [begin, end]");
    SafetensorsTensor t;
    t.dtype = dtype->text;
    const int elem = DtypeBytes(t.dtype);
    if (elem == 0) return bad(absl::StrCat("unknown dtype ", t.dtype));
    uint64_t numel = 1;
    for (const json::Value& d : shape->array) {
      absl::StatusOr<uint64_t> x = AsUint(d, "a dimension");
      if (!x.ok()) return bad(x.status().message());
      if (*x != 0 && numel > (uint64_t{1} << 62) / *x) return bad("shape too large");
      numel *= *x;
      t.shape.push_back(static_cast<int64_t>(*x));
    }
    absl::StatusOr<uint64_t> begin = AsUint(offsets->array[0], "data_offsets[0]");
    absl::StatusOr<uint64_t> end = AsUint(offsets->array[1], "data_offsets[1]");
    if (!begin.ok()) return bad(begin.status().message());
    if (!end.ok()) return bad(end.status().message());
    if (*begin > *end || *end > data_size) return bad("data_offsets outside the file");
    if (*end - *begin != numel * elem)
      return bad(
          absl::StrCat("data_offsets span ", *end - *begin, " bytes, shape needs ", numel * elem));
    ranges.emplace_back(*begin, *end);
    if (t.dtype == "F32") {
      t.data.resize(numel);
      if (numel) std::memcpy(t.data.data(), data + *begin, numel * 4);
    }
    if (!out.tensors.emplace(name, std::move(t)).second) return bad("duplicate name");
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensors overlap"));
  return out;
}

absl::StatusOr<std::vector<float>> ReadSafetensorsParams(const std::string& path,
                                                         const Manifest& manifest) {
  absl::StatusOr<SafetensorsContents> c = ReadSafetensors(path);
  if (!c.ok()) return c.status();
  std::vector<float> flat(manifest.total_elements());
  for (const TensorSpec& spec : manifest.tensors()) {
    auto it = c->tensors.find(spec.name);
    if (it == c->tensors.end())
      return absl::NotFoundError(absl::StrCat(path, ": missing tensor ", spec.name));
    if (it->second.dtype != "F32")
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", spec.name, " is ", it->second.dtype, ", expected F32"));
    if (it->second.shape != spec.shape)
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", spec.name,
                                                     " has a shape other "
                                                     "than the manifest's"));
    std::copy(it->second.data.begin(), it->second.data.end(), flat.begin() + spec.offset);
  }
  return flat;
}

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", c);
      out += esc;
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const Manifest& manifest,
                              std::span<const float> params,
                              const std::map<std::string, std::string>& metadata) {
  if (params.size() != manifest.total_elements())
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: ", params.size(), " values for a manifest of ", manifest.total_elements()));
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ",";
      first = false;
      h += JsonString(k) + ":" + JsonString(v);
    }
    h += "},";
  }
  uint64_t off = 0;
  for (size_t i = 0; i < manifest.tensors().size(); ++i) {
    const TensorSpec& t = manifest.tensors()[i];
    if (i) h += ",";
    h += JsonString(t.name) + ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) h += absl::StrCat(d ? "," : "", t.shape[d]);
    h += absl::StrCat("],\"data_offsets\":[", off, ",", off + t.numel() * 4, "]}");
    off += t.numel() * 4;
  }
  h += "}";
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(h.size()) >> (8 * i));
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  bool ok =
      std::fwrite(len, 8, 1, f.get()) == 1 && std::fwrite(h.data(), h.size(), 1, f.get()) == 1;
  // Tensors are contiguous in manifest order, so the data section is the flat buffer itself.
  if (ok && !params.empty())
    ok = std::fwrite(params.data(), sizeof(float), params.size(), f.get()) == params.size();
  if (!ok) return absl::DataLossError(absl::StrCat("write error on ", path));
  if (std::fclose(f.release()) != 0) return absl::DataLossError(absl::StrCat("close ", path));
  return absl::OkStatus();
}

}  // namespace diloco::model
