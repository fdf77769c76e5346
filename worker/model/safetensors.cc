#include "worker/model/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hf_folder.h"
#include "common/safetensors.h"
#include "common/safetensors_header.h"
#include "common/tensor_decl.h"
#include "worker/model/gpt/gpt_hf.h"

namespace diloco::model {

namespace {

// The manifest's tensors out of a file in the project's layout (other tensors ignored).
absl::StatusOr<std::vector<float>> FlatFromOwn(const SafetensorsFile& file,
                                               const Manifest& manifest, const std::string& path) {
  std::map<std::string, const LoadedTensor*> by_name;
  for (const auto& t : file.tensors) by_name[t.name] = &t;
  std::vector<float> flat(manifest.total_elements());
  for (const auto& spec : manifest.tensors()) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      return absl::NotFoundError(absl::StrCat(path, ": no tensor ", spec.name));
    if (it->second->shape != spec.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", spec.name, " has shape [", absl::StrJoin(it->second->shape, ","),
          "], the model needs [", absl::StrJoin(spec.shape, ","), "]"));
    std::copy(it->second->data.begin(), it->second->data.end(), flat.begin() + spec.offset);
  }
  return flat;
}

// One tensor of a safetensors header that ReadSafetensorsDecls has accepted: its range lies
// inside the data section and holds exactly shape x dtype bytes.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // in the data section
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct HeaderEntries {
  std::string path;
  uint64_t data_start = 0;     // 8 + the header's length
  std::vector<Entry> entries;  // in data order
  std::set<std::string> tied;  // names over the same bytes as an earlier one
};

// The whole header checked first (common/safetensors_header.h), then its entries taken.
absl::StatusOr<HeaderEntries> ReadHeaderEntries(const std::string& path) {
  absl::StatusOr<SafetensorsDecls> decls = ReadSafetensorsDecls(path);
  if (!decls.ok()) return decls.status();
  HeaderEntries h;
  h.path = path;
  for (const auto& [alias, kept] : decls->aliases) h.tied.insert(alias);
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  if (!in || !in.read(reinterpret_cast<char*>(&n), 8))
    return absl::DataLossError(absl::StrCat(path, ": changed while it was read"));
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n)))
    return absl::DataLossError(absl::StrCat(path, ": changed while it was read"));
  h.data_start = 8 + n;
  try {
    const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(header);
    for (const auto& [name, v] : doc.items()) {
      if (name == "__metadata__") continue;
      Entry e;
      e.name = name;
      e.dtype = v.at("dtype").get<std::string>();
      e.shape = v.at("shape").get<std::vector<int64_t>>();
      e.begin = v.at("data_offsets").at(0).get<uint64_t>();
      e.end = v.at("data_offsets").at(1).get<uint64_t>();
      h.entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": changed while it was read: ", e.what()));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const Entry& x, const Entry& y) { return x.begin < y.begin; });
  return h;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  const float v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  return sign ? -v : v;
}

// float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN.
float E4m3ToFloat(uint8_t b) {
  const uint32_t sign = uint32_t{b & 0x80u} << 24;
  const uint32_t exp = (b >> 3) & 0xf, mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 120) << 23) | (mant << 20));
  const float v = std::ldexp(static_cast<float>(mant), -9);
  return sign ? -v : v;
}

// One entry's values, widened to fp32, into `out`, a chunk of the file at a time.
absl::Status ReadValues(const HeaderEntries& h, const Entry& e, float* out) {
  std::ifstream in(h.path, std::ios::binary);
  if (!in || !in.seekg(static_cast<std::streamoff>(h.data_start + e.begin)))
    return absl::DataLossError(absl::StrCat(h.path, ": cannot read tensor ", e.name));
  const std::optional<int> bytes = FloatDtypeBytes(e.dtype);  // checked, unless the file changed
  if (!bytes) return absl::DataLossError(absl::StrCat(h.path, ": changed while it was read"));
  const size_t width = static_cast<size_t>(*bytes);
  const size_t total = static_cast<size_t>(e.numel());
  constexpr size_t kChunkBytes = 16u << 20;
  std::vector<char> buf(std::min(total * width, kChunkBytes));
  for (size_t done = 0; done < total;) {
    const size_t n = std::min(total - done, buf.size() / width);
    if (!in.read(buf.data(), static_cast<std::streamsize>(n * width)))
      return absl::DataLossError(absl::StrCat(h.path, ": tensor ", e.name, " cut short"));
    if (!WidenToF32(e.dtype, buf.data(), n, out + done))
      return absl::InvalidArgumentError(
          absl::StrCat(h.path, ": tensor ", e.name, ": dtype ", e.dtype, " is not read"));
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<float>> ReadSafetensorsParams(const std::string& path,
                                                         const Manifest& manifest) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  return FlatFromOwn(*file, manifest, path);
}

bool WidenToF32(const std::string& dtype, const char* bytes, size_t n, float* out) {
  const auto u16 = [bytes](size_t i) {
    uint16_t v;
    std::memcpy(&v, bytes + 2 * i, 2);
    return v;
  };
  if (dtype == "F32") {
    std::memcpy(out, bytes, n * sizeof(float));
  } else if (dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, bytes + 8 * i, 8);
      // Beyond float's range the cast is undefined: what rounding to nearest gives, spelled out.
      constexpr double kRoundsToInfinity = 0x1.ffffffp127;  // FLT_MAX + half its last step
      constexpr float kInf = std::numeric_limits<float>::infinity();
      out[i] = std::abs(v) < kRoundsToInfinity || std::isnan(v) ? static_cast<float>(v)
               : v > 0                                          ? kInf
                                                                : -kInf;
    }
  } else if (dtype == "BF16") {
    for (size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t{u16(i)} << 16);
  } else if (dtype == "F16") {
    for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(u16(i));
  } else if (dtype == "F8_E5M2") {  // the top byte of an F16
    for (size_t i = 0; i < n; ++i)
      out[i] = HalfToFloat(static_cast<uint16_t>(static_cast<uint8_t>(bytes[i]) << 8));
  } else if (dtype == "F8_E4M3") {
    for (size_t i = 0; i < n; ++i) out[i] = E4m3ToFloat(static_cast<uint8_t>(bytes[i]));
  } else {
    return false;
  }
  return true;
}

absl::Status ReadModelForInitInto(const std::string& path, const Manifest& manifest,
                                  std::span<float> out) {
  if (out.size() != manifest.total_elements())
    return absl::InvalidArgumentError(
        absl::StrCat("init: ", out.size(), " values for a model of ", manifest.total_elements()));
  std::error_code ec;
  std::vector<std::string> files{path};
  if (std::filesystem::is_directory(path, ec)) {
    absl::StatusOr<HfFolderFiles> folder = FindHfFolderFiles(path);
    if (!folder.ok()) return folder.status();
    files = folder->weights;
  }
  std::vector<HeaderEntries> headers;
  for (const std::string& f : files) {
    absl::StatusOr<HeaderEntries> h = ReadHeaderEntries(f);
    if (!h.ok()) return h.status();
    headers.push_back(*std::move(h));
  }
  // GPT-2 in Hugging Face's layout: only for a manifest that does not use those names itself.
  bool hf_names = false;
  for (const HeaderEntries& h : headers)
    for (const Entry& e : h.entries) hf_names |= absl::StartsWith(e.name, "transformer.");
  const bool own_names = !headers.empty() && !headers[0].entries.empty() &&
                         manifest.Find(headers[0].entries[0].name) != nullptr;
  if (hf_names && !own_names) {
    SafetensorsFile file;  // the built-in GPT: small enough to hold twice
    for (const HeaderEntries& h : headers)
      for (const Entry& e : h.entries) {
        LoadedTensor& t = file.tensors.emplace_back();
        t.name = e.name;
        t.shape = e.shape;
        t.data.resize(static_cast<size_t>(e.numel()));
        if (absl::Status s = ReadValues(h, e, t.data.data()); !s.ok()) return s;
      }
    absl::StatusOr<std::vector<float>> flat = FlatFromHf(file, manifest, files[0]);
    if (!flat.ok()) return flat.status();
    std::copy(flat->begin(), flat->end(), out.begin());
    return absl::OkStatus();
  }
  std::vector<bool> found(manifest.tensors().size(), false);
  for (const HeaderEntries& h : headers)
    for (const Entry& e : h.entries) {
      const TensorSpec* spec = manifest.Find(e.name);
      if (spec == nullptr) {
        if (h.tied.contains(e.name)) continue;  // the same bytes as a tensor of the model
        return absl::InvalidArgumentError(
            absl::StrCat(h.path, ": tensor ", e.name, " is not a parameter of this model"));
      }
      if (e.shape != spec->shape)
        return absl::InvalidArgumentError(
            absl::StrCat(h.path, ": tensor ", e.name, " has shape [", absl::StrJoin(e.shape, ","),
                         "], the model needs [", absl::StrJoin(spec->shape, ","), "]"));
      const size_t index = static_cast<size_t>(spec - manifest.tensors().data());
      if (found[index])  // the index maps every name to one file; a second copy is a lie
        return absl::InvalidArgumentError(
            absl::StrCat(h.path, ": tensor ", e.name, " is given twice in ", path));
      if (absl::Status s = ReadValues(h, e, out.data() + spec->offset); !s.ok()) return s;
      found[index] = true;
    }
  for (size_t i = 0; i < found.size(); ++i)
    if (!found[i])
      return absl::NotFoundError(absl::StrCat(files.size() == 1 ? files[0] : path, ": no tensor ",
                                              manifest.tensors()[i].name));
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const Manifest& manifest,
                              std::span<const float> params,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors = ManifestTensors(manifest, params);
  if (!tensors.ok()) return tensors.status();
  return diloco::WriteSafetensors(path, *tensors, metadata);
}

absl::Status CheckWritable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return absl::InvalidArgumentError("empty output path");
  if (fs::is_directory(path, ec))
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a file name"));
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat(path, ": directory ", dir.string(), " does not exist"));
  if (::access(dir.c_str(), W_OK) != 0)
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": directory ", dir.string(), " is not writable"));
  return absl::OkStatus();
}

}  // namespace diloco::model
