// diloco-ctl top end to end: 2 shards and 2 tiny workers on 127.0.0.1. `top --once` and
// `top --json` list every worker with the step and loss of one of its own progress events (the
// figures its heartbeats carry), a shard that does not answer shows as "no answer" without
// holding the view, and `top` live in a detached tmux session redraws its table in place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/integration/cluster.h"
#include "tests/integration/shell.h"

namespace diloco::testing {
namespace {

class TopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.dir = TestDir();
    c_.StartShards(2);
    for (int w = 0; w < 2; ++w) {
      auto argv = TinyWorkerArgs(w, c_.endpoints, Jsonl(w));
      argv.push_back("--duration=90s");
      workers_.push_back(
          std::make_unique<Process>(argv, (c_.dir / absl::StrCat("worker", w, ".log")).string()));
    }
  }
  void TearDown() override {
    for (auto& w : workers_) {
      w->Signal(SIGTERM);
      EXPECT_TRUE(w->Wait(absl::Seconds(30)).has_value());
    }
  }
  std::filesystem::path Jsonl(int w) const { return c_.dir / absl::StrCat("w", w, ".jsonl"); }
  std::string Top(const std::string& flags) const {
    return absl::StrCat(DILOCO_CTL_BINARY, " top --servers=", absl::StrJoin(c_.endpoints, ","),
                        " --interval=0.3s ", flags);
  }
  // `top --json` until every worker shows a step (bounded).
  nlohmann::json JsonWithSteps() {
    nlohmann::json d;
    for (int i = 0; i < 60; ++i) {
      auto [rc, out] = Shell(Top("--json 2>/dev/null"));
      EXPECT_EQ(rc, 0) << out;
      d = nlohmann::json::parse(out, nullptr, false);
      int with_step = 0;
      if (d.is_object())
        for (const auto& l : d["learners"]) with_step += l["step"].is_number();
      if (with_step == 2) return d;
      absl::SleepFor(absl::Milliseconds(500));
    }
    ADD_FAILURE() << "workers never showed their steps: " << d.dump();
    return d;
  }
  // Whether `step` and `loss` are those of one of worker w's progress events.
  bool MatchesProgress(int w, double step, double loss) const {
    for (const auto& e : ReadEvents(Jsonl(w), "progress"))
      if (e.at("step") == step && std::abs(e.at("loss") - loss) <= 1e-3 * std::abs(loss) + 1e-4)
        return true;
    return false;
  }
  LocalShards c_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(TopTest, OnceAndJsonShowEveryWorkerWithItsOwnProgress) {
  const nlohmann::json d = JsonWithSteps();
  ASSERT_EQ(d["learners"].size(), 2u) << d.dump();
  for (const auto& l : d["learners"]) {
    const int w = l["worker"].get<int>();
    EXPECT_TRUE(MatchesProgress(w, l["step"].get<double>(), l["loss"].get<double>())) << l.dump();
    EXPECT_EQ(l["device"], "cpu");
    EXPECT_FALSE(l["host"].get<std::string>().empty());
    EXPECT_EQ(l["inner_steps"], 10);
  }
  ASSERT_EQ(d["shards"].size(), 2u);
  for (const auto& s : d["shards"]) {
    EXPECT_TRUE(s["answered"].get<bool>());
    EXPECT_TRUE(s["rounds_per_s"].is_number()) << s.dump();
  }
  EXPECT_EQ(d["totals"]["learners"], 2);

  auto [rc, out] = Shell(Top("--once"));
  ASSERT_EQ(rc, 0) << out;
  std::map<int, std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cells.size() == 12 && (cells[0] == "0" || cells[0] == "1"))
      rows[std::stoi(cells[0])] = cells;
  }
  ASSERT_EQ(rows.size(), 2u) << out;
  for (const auto& [w, cells] : rows) {
    if (cells[3] == "-") continue;  // a heartbeat before the first progress tick
    EXPECT_TRUE(MatchesProgress(w, std::stod(cells[3]), std::stod(cells[4]))) << out;
  }
  EXPECT_NE(out.find("total: 2 learners"), std::string::npos) << out;
}

TEST_F(TopTest, ShardThatDoesNotAnswerShowsAsNoAnswer) {
  const absl::Time t0 = absl::Now();
  auto [rc, out] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " top --servers=", c_.endpoints[0],
                         ",tcp://127.0.0.1:9 --timeout_ms=700 --interval=0.2s --once"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("shard tcp://127.0.0.1:9: no answer"), std::string::npos) << out;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

// top live in a detached tmux session: two captures of its pane each hold one table (redrawn
// in place, not scrolled) and differ (refreshed).
TEST_F(TopTest, LiveViewRefreshesInPlaceInTmux) {
  if (Shell("command -v tmux").first != 0) GTEST_SKIP() << "tmux is missing";
  JsonWithSteps();
  const std::string session = absl::StrCat("diloco-top-", getpid());
  ASSERT_EQ(Shell(absl::StrCat("tmux -L ", session, " new-session -d -s ", session,
                               " -x 160 -y 40 '", Top(""), "'"))
                .first,
            0);
  auto capture = [&] {
    return Shell(absl::StrCat("tmux -L ", session, " capture-pane -p -t ", session)).second;
  };
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  absl::SleepFor(absl::Seconds(2));
  const std::string first = capture();
  absl::SleepFor(absl::Seconds(2));
  const std::string second = capture();
  Shell(absl::StrCat("tmux -L ", session, " kill-server"));
  EXPECT_EQ(count(first, "worker host"), 1u) << first;
  EXPECT_EQ(count(second, "worker host"), 1u) << second;
  EXPECT_EQ(count(second, "total: "), 1u) << second;
  EXPECT_NE(first, second);
}

}  // namespace
}  // namespace diloco::testing
