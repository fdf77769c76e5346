// The tests' shared helpers: the JSON-lines reader and its number pickers, and TempDir.
#include "tests/util/jsonl.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/util/temp_dir.h"

namespace diloco::testing {
namespace {

TEST(JsonlTest, ReadsObjectsAndLeavesOutALineCutByAKill) {
  TempDir dir("jsonl_test_");
  {
    std::ofstream out(dir.Sub("a.jsonl"));
    out << R"({"event":"progress","step":10,"loss":3.5})"
        << "\n"
        << "\n"
        << R"([1,2])"
        << "\n"
        << R"({"event":"done","stats":{"rounds":4,"step":99},"ok":true})"
        << "\n"
        << R"({"event":"progr)";
  }
  const auto lines = ReadJsonLines(dir.Sub("a.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(EventName(lines[0]), "progress");
  EXPECT_EQ(EventName(lines[1]), "done");
  EXPECT_EQ(EventName(Json::object()), "");
  // Nested numbers under their own names; the top level wins; booleans are not numbers.
  const auto n = NumbersOf(lines[1]);
  EXPECT_EQ(n.at("rounds"), 4);
  EXPECT_EQ(n.at("step"), 99);
  EXPECT_EQ(n.count("ok"), 0u);
  EXPECT_EQ(NumbersOf(Json::parse(R"({"step":1,"s":{"step":2}})")).at("step"), 1);
  EXPECT_TRUE(ReadJsonLines(dir.Sub("missing.jsonl")).empty());
}

TEST(JsonlTest, NumbersByDottedPath) {
  const std::string stats = R"({"rounds":3,"versions":{"0":7,"3":9},"codec":"int8"})";
  EXPECT_EQ(JsonNumber(stats, "rounds"), std::optional<double>(3));
  EXPECT_EQ(JsonNumber(stats, "versions.3"), std::optional<double>(9));
  EXPECT_EQ(JsonNumber(stats, "versions.1"), std::nullopt);
  EXPECT_EQ(JsonNumber(stats, "codec"), std::nullopt);
  EXPECT_EQ(JsonNumber(stats, "rounds.x"), std::nullopt);
  EXPECT_EQ(JsonNumber("{\"rounds\":", "rounds"), std::nullopt);
  EXPECT_EQ(NumberAt(Json::parse(stats), "versions.0"), std::optional<double>(7));
}

TEST(TempDirTest, FreshPerObjectAndRemovedWithIt) {
  std::filesystem::path kept;
  {
    TempDir a("temp_dir_test_"), b("temp_dir_test_");
    ASSERT_TRUE(std::filesystem::is_directory(a.dir()));
    EXPECT_NE(a.dir(), b.dir());
    EXPECT_TRUE(std::filesystem::is_empty(a.dir()));
    std::ofstream(a.Sub("f")) << "x";
    kept = a.dir();
  }
  EXPECT_FALSE(std::filesystem::exists(kept));
}

}  // namespace
}  // namespace diloco::testing
