// JsonObject, the event log's builder over nlohmann::ordered_json: members keep the order they
// were added in, strings are escaped, non-finite numbers become null, raw JSON text is parsed
// in (and text that is not JSON stops the program: it is a bug, never outside input).
#include "common/event_log.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace diloco {
namespace {

TEST(JsonObjectTest, KeepsOrderAndTypes) {
  JsonObject o;
  o.Add("event", "progress").Add("step", 3).Add("bytes", uint64_t{1} << 40);
  o.Add("loss", 2.5).Add("name", std::string("a\"b\n")).Add("ok", true);
  o.Add("versions", std::vector<uint64_t>{1, 2});
  EXPECT_EQ(o.str(),
            R"({"event":"progress","step":3,"bytes":1099511627776,"loss":2.5,"name":"a\"b\n",)"
            R"("ok":true,"versions":[1,2]})");
}

TEST(JsonObjectTest, NonFiniteNumbersAreNull) {
  JsonObject o;
  o.Add("a", std::nan("")).Add("b", INFINITY).Add("c", std::nanf(""));
  EXPECT_EQ(o.str(), R"({"a":null,"b":null,"c":null})");
}

TEST(JsonObjectTest, FloatsAreWrittenAsTheirShortestDecimal) {
  JsonObject o;
  o.Add("loss", 3.2f).Add("tiny", 1e-7f).Add("exact", 0.5f).Add("wide", 3.2);
  EXPECT_EQ(o.str(), R"({"loss":3.2,"tiny":1e-07,"exact":0.5,"wide":3.2})");
}

TEST(JsonObjectTest, AddRawNestsParsedJson) {
  JsonObject o;
  o.Add("event", "shutdown").AddRaw("stats", R"({"rounds":4, "versions":{"0":2}})");
  EXPECT_EQ(o.str(), R"({"event":"shutdown","stats":{"rounds":4,"versions":{"0":2}}})");
  EXPECT_EQ(o.json()["stats"]["versions"]["0"], 2);
}

TEST(JsonObjectDeathTest, AddRawOfTextThatIsNotJsonAborts) {
  EXPECT_DEATH(JsonObject().AddRaw("stats", "{\"rounds\":"), "AddRaw\\(\"stats\"\\): not JSON");
}

TEST(JsonStringTest, QuotesAndEscapes) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("q\"b\\c\x01"), R"("q\"b\\c\u0001")");
  EXPECT_EQ(JsonString("\xff"), "\"\xEF\xBF\xBD\"");  // not UTF-8: U+FFFD, no exception
}

// Every line of the event log says when it was written (wall clock, Unix seconds to the ms),
// as its last member, so that the logs of several hosts interleave by time.
TEST(EventLogTest, EveryLineCarriesItsWallTimeLast) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("event_log_test." + std::to_string(getpid())))
          .string();
  const double before = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  {
    auto log = EventLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    JsonObject a;
    a.Add("event", "progress").Add("step", 3);
    log->Write(a);
    log->Write(JsonObject());
  }
  const double after = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::ordered_json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::ordered_json::parse(line));
  std::remove(path.c_str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["event"], "progress");
  EXPECT_EQ(lines[0].size(), 3u);
  EXPECT_EQ(lines[0].items().begin().key(), "event");
  EXPECT_EQ(lines[1].size(), 1u);
  for (const auto& j : lines) {
    ASSERT_TRUE(j.contains("wall_time")) << j.dump();
    const double t = j["wall_time"];
    EXPECT_GE(t, before - 0.001);
    EXPECT_LE(t, after + 0.001);
  }
}

}  // namespace
}  // namespace diloco
