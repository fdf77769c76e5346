// diloco-ctl keys: the directory it makes is what the shard and the workers read (a shard
// started on it welcomes each listed worker's key as that worker), secret keys are 0600, keys
// already there are never replaced unless asked, and --add lists one more learner.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/security/security_util.h"

namespace diloco::testing {
namespace {

namespace fs = std::filesystem;

struct Ctl {
  std::optional<int> status;
  std::string out;
};

Ctl Keys(const fs::path& dir, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {DILOCO_CTL_BINARY, "keys"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const auto log = dir / "ctl.log";
  fs::remove(log);
  Ctl c;
  {
    Process p(argv, log.string());
    c.status = p.Wait(absl::Seconds(30));
  }
  std::ifstream in(log);
  c.out.assign(std::istreambuf_iterator<char>(in), {});
  return c;
}

std::string Text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

mode_t Mode(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

class KeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    keys_ = dir_ / "keys";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Every worker of `ids` has a 0600 secret key whose public key authorized_keys lists for it.
  void ExpectListed(const std::vector<uint32_t>& ids) {
    auto auth = wire::AuthorizedKeys::Read((keys_ / "authorized_keys").string());
    ASSERT_TRUE(auth.ok()) << auth.status();
    EXPECT_EQ(auth->size(), ids.size());
    for (uint32_t id : ids) {
      const fs::path secret = keys_ / absl::StrCat("worker-", id, ".secret");
      EXPECT_EQ(Mode(secret), 0600u) << secret;
      auto sec = wire::ReadKeyFile(secret.string());
      ASSERT_TRUE(sec.ok()) << sec.status();
      const std::string pub = wire::CurvePublicKey(*sec).value();
      EXPECT_EQ(
          wire::ReadKeyFile((keys_ / absl::StrCat("worker-", id, ".public")).string()).value(),
          pub);
      EXPECT_EQ(auth->WorkerOf(pub), std::optional<uint32_t>(id)) << id;
    }
    EXPECT_EQ(Mode(keys_ / "server.secret"), 0600u);
    EXPECT_EQ(
        wire::CurvePublicKey(wire::ReadKeyFile((keys_ / "server.secret").string()).value()).value(),
        wire::ReadKeyFile((keys_ / "server.public").string()).value());
  }

  fs::path dir_, keys_;
};

TEST_F(KeysTest, MakesASetForACountOrAList) {
  auto made = Keys(dir_, {"--out=" + keys_.string(), "--workers=3"});
  ASSERT_EQ(made.status, std::optional<int>(0)) << made.out;
  ExpectListed({0, 1, 2});
  fs::remove_all(keys_);
  made = Keys(dir_, {"--out=" + keys_.string(), "--worker_ids=4,9"});
  ASSERT_EQ(made.status, std::optional<int>(0)) << made.out;
  ExpectListed({4, 9});
  EXPECT_FALSE(fs::exists(keys_ / "worker-0.secret"));
}

TEST_F(KeysTest, RefusesToReplaceKeysUnlessAsked) {
  ASSERT_EQ(Keys(dir_, {"--out=" + keys_.string(), "--workers=2"}).status, std::optional<int>(0));
  const std::string server = Text(keys_ / "server.secret");
  const std::string authorized = Text(keys_ / "authorized_keys");
  auto again = Keys(dir_, {"--out=" + keys_.string(), "--workers=2"});
  EXPECT_EQ(again.status, std::optional<int>(1)) << again.out;
  EXPECT_NE(again.out.find("already holds keys"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("--overwrite"), std::string::npos) << again.out;
  EXPECT_EQ(Text(keys_ / "server.secret"), server);
  EXPECT_EQ(Text(keys_ / "authorized_keys"), authorized);

  auto replaced = Keys(dir_, {"--out=" + keys_.string(), "--worker_ids=5", "--overwrite"});
  ASSERT_EQ(replaced.status, std::optional<int>(0)) << replaced.out;
  EXPECT_NE(Text(keys_ / "server.secret"), server);
  EXPECT_FALSE(fs::exists(keys_ / "worker-0.secret"));  // the old set is gone whole
  ExpectListed({5});
}

TEST_F(KeysTest, AddsOneLearner) {
  ASSERT_EQ(Keys(dir_, {"--out=" + keys_.string(), "--workers=2"}).status, std::optional<int>(0));
  const std::string server = Text(keys_ / "server.secret");
  const std::string w0 = Text(keys_ / "worker-0.secret");
  auto added = Keys(dir_, {"--out=" + keys_.string(), "--add=7"});
  ASSERT_EQ(added.status, std::optional<int>(0)) << added.out;
  ExpectListed({0, 1, 7});
  EXPECT_EQ(Text(keys_ / "server.secret"), server);
  EXPECT_EQ(Text(keys_ / "worker-0.secret"), w0);

  auto twice = Keys(dir_, {"--out=" + keys_.string(), "--add=7"});
  EXPECT_EQ(twice.status, std::optional<int>(1)) << twice.out;
  EXPECT_NE(twice.out.find("already lists a key for worker 7"), std::string::npos) << twice.out;
  ExpectListed({0, 1, 7});

  auto nowhere = Keys(dir_, {"--out=" + (dir_ / "empty").string(), "--add=1"});
  EXPECT_EQ(nowhere.status, std::optional<int>(1)) << nowhere.out;
  EXPECT_NE(nowhere.out.find("holds no key set"), std::string::npos) << nowhere.out;
}

TEST_F(KeysTest, BadCommandLinesAreUsageErrors) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--out=" + keys_.string()},
        {"--out=" + keys_.string(), "--worker_ids=1,1"},
        {"--out=" + keys_.string(), "--worker_ids=1,x"},
        {"--out=" + keys_.string(), "--workers=0"},
        {"--out=" + keys_.string(), "--workers=2", "--worker_ids=1"},
        {"--out=" + keys_.string(), "--add=1", "--workers=2"},
        {"--workers=2"}}) {
    auto r = Keys(dir_, flags);
    EXPECT_EQ(r.status, std::optional<int>(2)) << absl::StrJoin(flags, " ") << "\n" << r.out;
    EXPECT_FALSE(fs::exists(keys_)) << absl::StrJoin(flags, " ");
  }
}

// The set as the shard and its workers use it: each worker's key is welcomed as that worker.
TEST_F(KeysTest, AShardOnTheSetWelcomesItsWorkers) {
  ASSERT_EQ(Keys(dir_, {"--out=" + keys_.string(), "--workers=2"}).status, std::optional<int>(0));
  ASSERT_EQ(Keys(dir_, {"--out=" + keys_.string(), "--add=5"}).status, std::optional<int>(0));
  Process server(
      {ServerBinary(), "--bind=tcp://127.0.0.1:*", "--port_file=" + (dir_ / "port").string(),
       "--fragments=4", std::string("--model=") + kModel, "--progress_interval=1000s",
       "--curve_secret_key_file=" + (keys_ / "server.secret").string(),
       "--curve_authorized_keys=" + (keys_ / "authorized_keys").string()},
      (dir_ / "server.log").string());
  auto ep = WaitForLine(dir_ / "port", absl::Seconds(20));
  ASSERT_TRUE(ep.has_value()) << "the shard did not start; see " << dir_;
  const std::string server_public = wire::ReadKeyFile((keys_ / "server.public").string()).value();
  for (uint32_t id : {0u, 1u, 5u}) {
    auto secret = wire::ReadKeyFile((keys_ / absl::StrCat("worker-", id, ".secret")).string());
    ASSERT_TRUE(secret.ok());
    const wire::CurveKeyPair pair{wire::CurvePublicKey(*secret).value(), *secret};
    auto r =
        Ask(*ep, TinyHeader(wire::MsgType::Hello, id), server_public, &pair, absl::Seconds(10));
    ASSERT_TRUE(r.has_value()) << "worker " << id << " got no answer";
    EXPECT_EQ(r->type(), wire::MsgType::Welcome) << id;
  }
}

}  // namespace
}  // namespace diloco::testing
