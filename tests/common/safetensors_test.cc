// The safetensors writer and reader: byte layout and alignment, escaping, and a reader that
// refuses damaged files (truncation, offsets beyond the data, a header length past the end).
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

}  // namespace
}  // namespace diloco
