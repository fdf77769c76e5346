// The programs' stderr lines (common/log.h): each line behind its UTC time to the millisecond
// and its level, a text of several lines split into as many stamped lines.
#include "common/log.h"

#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace diloco {
namespace {

// What `fn` writes to stderr (file descriptor 2, where LogLine writes).
template <typename Fn>
std::string CaptureStderr(Fn fn) {
  std::FILE* tmp = std::tmpfile();
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(tmp), STDERR_FILENO);
  fn();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(tmp);
  std::string out;
  for (int c; (c = std::fgetc(tmp)) != EOF;) out.push_back(static_cast<char>(c));
  std::fclose(tmp);
  return out;
}

TEST(LogTest, EachLineCarriesTheUtcTimeToTheMillisecondAndTheLevel) {
  const std::string out = CaptureStderr([] {
    Logf(LogLevel::kInfo, "diloco-worker[%u]: step %d", 3u, 40);
    LogLine(LogLevel::kError, "first\nsecond\n");
    LogLine(LogLevel::kWarning, "");
  });
  const std::vector<std::string> lines = absl::StrSplit(out, '\n');
  ASSERT_EQ(lines.size(), 5u) << out;  // four lines and the empty rest after the last newline
  const std::regex stamp(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ([IWE]) (.*)$)");
  const std::vector<std::pair<char, std::string>> want = {
      {'I', "diloco-worker[3]: step 40"}, {'E', "first"}, {'E', "second"}, {'W', ""}};
  for (size_t i = 0; i < want.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, stamp)) << lines[i];
    EXPECT_EQ(m[1].str()[0], want[i].first) << lines[i];
    EXPECT_EQ(m[2].str(), want[i].second) << lines[i];
  }
  EXPECT_TRUE(lines[4].empty());
}

TEST(LogTest, ThePrefixIsUtc) {
  // The hours of the prefix are UTC's, whatever the process's zone.
  ::setenv("TZ", "Pacific/Kiritimati", 1);  // UTC+14: a local hour would differ
  const std::string prefix = LogPrefix(LogLevel::kInfo);
  const absl::Time now = absl::Now();
  ::unsetenv("TZ");
  const std::string utc_hour = absl::FormatTime("%H", now, absl::UTCTimeZone());
  ASSERT_GE(prefix.size(), 14u);
  // Within a second of the hour's turn both may be off by one; the test accepts either.
  const std::string before = absl::FormatTime("%H", now - absl::Seconds(2), absl::UTCTimeZone());
  EXPECT_TRUE(prefix.substr(11, 2) == utc_hour || prefix.substr(11, 2) == before) << prefix;
  EXPECT_EQ(prefix.substr(prefix.size() - 4), "Z I ") << prefix;
}

}  // namespace
}  // namespace diloco
