// The safetensors writer and reader: byte layout and alignment, escaping, and a reader that
// refuses damaged files (truncation, offsets beyond the data, a header length past the end, a
// header that is not JSON or describes impossible tensors).
#include "common/safetensors.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "gtest/gtest.h"
#include "tests/storage/test_util.h"

namespace diloco {
namespace {

using storage::testutil::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SafetensorsTest, LayoutIsTheReferenceFormat) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1.5f};
  const std::vector<SafetensorsTensor> t = {{"a.weight", {2, 3}, a}, {"b\"q", {1}, b}};
  ASSERT_TRUE(WriteSafetensors(dir.Sub("f"), t, {{"k", "v"}}).ok());
  const std::string bytes = Slurp(dir.Sub("f"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 7 * sizeof(float));
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("b\"q":{"dtype":"F32","shape":[1],"data_offsets":[24,28]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("__metadata__":{"k":"v"})"), std::string::npos) << header;
  float last;
  std::memcpy(&last, bytes.data() + bytes.size() - 4, 4);
  EXPECT_EQ(last, -1.5f);

  auto file = ReadSafetensors(dir.Sub("f"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 2u);
  EXPECT_EQ(file->tensors[0].name, "a.weight");
  EXPECT_EQ(file->tensors[0].data, a);
  EXPECT_EQ(file->tensors[1].name, "b\"q");
  EXPECT_EQ(file->metadata.at("k"), "v");
}

TEST(SafetensorsTest, RefusesAShapeThatDisagreesWithTheData) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3};
  const std::vector<SafetensorsTensor> t = {{"a", {2, 2}, a}};
  EXPECT_EQ(WriteSafetensors(dir.Sub("f"), t, {}).code(), absl::StatusCode::kInvalidArgument);
}

class DamagedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<SafetensorsTensor> t = {{"a", {4}, data_}};
    ASSERT_TRUE(WriteSafetensors(dir_.Sub("f"), t, {}).ok());
    bytes_ = Slurp(dir_.Sub("f"));
  }
  absl::StatusCode ReadBack(const std::string& bytes) {
    std::ofstream(dir_.Sub("g"), std::ios::binary) << bytes;
    return ReadSafetensors(dir_.Sub("g")).status().code();
  }
  TempDir dir_;
  std::vector<float> data_ = {1, 2, 3, 4};
  std::string bytes_;
};

TEST_F(DamagedFileTest, Intact) { EXPECT_EQ(ReadBack(bytes_), absl::StatusCode::kOk); }
TEST_F(DamagedFileTest, TruncatedData) {
  EXPECT_EQ(ReadBack(bytes_.substr(0, bytes_.size() - 1)), absl::StatusCode::kDataLoss);
}
TEST_F(DamagedFileTest, ShorterThanTheLength) {
  EXPECT_EQ(ReadBack(bytes_.substr(0, 5)), absl::StatusCode::kDataLoss);
}
TEST_F(DamagedFileTest, HeaderLengthPastTheEnd) {
  std::string b = bytes_;
  b[6] = 0x7f;
  EXPECT_EQ(ReadBack(b), absl::StatusCode::kDataLoss);
}
TEST_F(DamagedFileTest, BrokenJson) {
  std::string b = bytes_;
  b[8] = '[';
  EXPECT_EQ(ReadBack(b), absl::StatusCode::kDataLoss);
}

// A header cut short: its JSON ends inside the object (the length and data still agree).
TEST_F(DamagedFileTest, TruncatedHeaderJson) {
  uint64_t n;
  std::memcpy(&n, bytes_.data(), 8);
  std::string header = bytes_.substr(8, n);
  header.resize(header.rfind('}'));  // the closing brace and its padding gone
  header.append(n - header.size(), ' ');
  const std::string b = bytes_.substr(0, 8) + header + bytes_.substr(8 + n);
  std::ofstream(dir_.Sub("g"), std::ios::binary) << b;
  const auto r = ReadSafetensors(dir_.Sub("g"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("malformed JSON header"), std::string::npos) << r.status();
}

// Headers that parse but describe impossible tensors are refused, each with its reason.
TEST_F(DamagedFileTest, WrongDtypeShapeOrOffsetsAreRefused) {
  const struct {
    std::string header;
    const char* reason;
  } cases[] = {
      {R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}})", "only F32"},
      {R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "bad dimension"},
      {R"({"a":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})", "bad dimension"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[4,20]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", "shape"},
      {R"({"a":[1,2]})", "not a tensor entry"},
      {R"({"__metadata__":{"k":1}})", "metadata"},
      {R"([1,2])", "not a JSON object"},
      {"{\"a\":" + std::string(20, '[') + "1" + std::string(20, ']') + "}", "nested deeper"},
  };
  for (const auto& c : cases) {
    std::string header = c.header;
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string b(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    b += header;
    b.append(16, '\0');  // the four floats
    std::ofstream(dir_.Sub("g"), std::ios::binary | std::ios::trunc) << b;
    const auto r = ReadSafetensors(dir_.Sub("g"));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.header;
    EXPECT_NE(r.status().message().find(c.reason), std::string::npos) << r.status();
  }
}

// Two tensors of one name cannot both be in the header (a JSON object's keys are unique).
TEST(SafetensorsTest, RefusesTwoTensorsOfOneName) {
  TempDir dir;
  const std::vector<float> a = {1};
  const std::vector<SafetensorsTensor> t = {{"a", {1}, a}, {"a", {1}, a}};
  EXPECT_EQ(WriteSafetensors(dir.Sub("f"), t, {}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace diloco
