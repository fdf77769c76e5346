// JsonObject, the event log's builder over nlohmann::ordered_json: members keep the order they
// were added in, strings are escaped, non-finite numbers become null, raw JSON text is parsed
// in (and text that is not JSON stops the program: it is a bug, never outside input).
#include "common/event_log.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace diloco
