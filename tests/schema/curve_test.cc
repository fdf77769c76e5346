// CURVE keys, the authorized-keys file, and the ZAP handler with real sockets in one process:
// a listed key gets through and its frames carry the key as User-Id; an unlisted key does not.
#include "schema/curve.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "tests/util/temp_dir.h"

namespace diloco::wire {
namespace {

TEST(CurveTest, KeyPairsAndPublicKeys) {
  auto a = NewCurveKeyPair();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(IsZ85Key(a->public_key));
  EXPECT_TRUE(IsZ85Key(a->secret_key));
  EXPECT_EQ(CurvePublicKey(a->secret_key).value(), a->public_key);
  EXPECT_FALSE(IsZ85Key("short"));
  EXPECT_FALSE(IsZ85Key(std::string(40, '"')));  // not in the Z85 alphabet
}

TEST(CurveTest, KeyFilesRoundTripAndSecretIsPrivate) {
  const diloco::testing::TempDir tmp("diloco_curve_");
  const std::filesystem::path& dir = tmp.dir();
  auto a = NewCurveKeyPair().value();
  const std::string prefix = (dir / "w").string();
  ASSERT_TRUE(WriteKeyPair(prefix, a).ok());
  EXPECT_EQ(ReadKeyFile(prefix + ".secret").value(), a.secret_key);
  EXPECT_EQ(ReadKeyFile(prefix + ".public").value(), a.public_key);
  struct stat st;
  ASSERT_EQ(::stat((prefix + ".secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(ReadKeyFile((dir / "missing").string()).ok());
}

TEST(CurveTest, AuthorizedKeysParse) {
  auto a = NewCurveKeyPair().value(), b = NewCurveKeyPair().value();
  auto keys =
      AuthorizedKeys::Parse("# fleet\n\n1 " + a.public_key + "\n  2\t" + b.public_key + "  \n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(keys->WorkerOf(a.public_key), std::optional<uint32_t>(1));
  EXPECT_EQ(keys->WorkerOf(b.public_key), std::optional<uint32_t>(2));
  EXPECT_EQ(keys->WorkerOf(a.secret_key), std::nullopt);
  EXPECT_FALSE(AuthorizedKeys::Parse("x " + a.public_key).ok());
  EXPECT_FALSE(AuthorizedKeys::Parse("1 notakey").ok());
  EXPECT_FALSE(AuthorizedKeys::Parse("1 " + a.public_key + "\n2 " + a.public_key).ok());
}

// Sends one frame from a DEALER with `client` keys; returns the User-Id the ROUTER saw, or
// nullopt when nothing arrived within `wait`.
std::optional<std::string> Deliver(zmq::context_t& ctx, zmq::socket_t& router,
                                   const std::string& endpoint, const std::string& server_pub,
                                   const CurveKeyPair& client, absl::Duration wait) {
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  EXPECT_TRUE(MakeCurveClient(d, server_pub, client.public_key, client.secret_key).ok());
  d.connect(endpoint);
  d.send(zmq::str_buffer("hi"), zmq::send_flags::dontwait);
  zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(absl::ToInt64Milliseconds(wait))) == 0)
    return std::nullopt;
  zmq::message_t rid, body;
  (void)router.recv(rid);
  (void)router.recv(body);
  return UserIdOf(body).value_or("");
}

TEST(CurveTest, ZapHandlerAdmitsOnlyListedKeys) {
  auto server = NewCurveKeyPair().value(), listed = NewCurveKeyPair().value(),
       stranger = NewCurveKeyPair().value();
  zmq::context_t ctx(1);
  auto zap = ZapHandler::Start(ctx, AuthorizedKeys::Parse("5 " + listed.public_key).value());
  ASSERT_TRUE(zap.ok()) << zap.status();
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  ASSERT_TRUE(MakeCurveServer(router, server.secret_key).ok());
  router.bind("tcp://127.0.0.1:*");
  const std::string ep = router.get(zmq::sockopt::last_endpoint);

  EXPECT_EQ(Deliver(ctx, router, ep, server.public_key, listed, absl::Seconds(5)),
            std::optional<std::string>(listed.public_key));
  EXPECT_EQ(Deliver(ctx, router, ep, server.public_key, stranger, absl::Milliseconds(500)),
            std::nullopt);
  EXPECT_EQ((*zap)->admitted(), 1u);
  EXPECT_GE((*zap)->refused(), 1u);
  router.close();
  zap->reset();
}

}  // namespace
}  // namespace diloco::wire
