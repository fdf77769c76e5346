#include "schema/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace diloco::wire {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr size_t kKeyBytes = 32;

absl::Status ZmqError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", zmq_strerror(zmq_errno())));
}

absl::Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);  // never wider than mode
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CurveKeyPair> NewCurveKeyPair() {
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) return ZmqError("zmq_curve_keypair");
  return CurveKeyPair{pub, sec};
}

absl::StatusOr<std::string> CurvePublicKey(absl::string_view secret_z85) {
  if (!IsZ85Key(secret_z85)) return absl::InvalidArgumentError("not a Z85 CURVE key");
  const std::string sec(secret_z85);
  char pub[kZ85KeyChars + 1];
  if (zmq_curve_public(pub, sec.c_str()) != 0) return ZmqError("zmq_curve_public");
  return std::string(pub);
}

bool IsZ85Key(absl::string_view key) {
  if (key.size() != kZ85KeyChars) return false;
  const std::string k(key);
  uint8_t bin[kKeyBytes];
  return zmq_z85_decode(bin, k.c_str()) != nullptr;
}

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read key file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string key(absl::StripAsciiWhitespace(ss.str()));
  if (!IsZ85Key(key))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a Z85 CURVE key"));
  return key;
}

absl::Status WriteKeyPair(const std::string& prefix, const CurveKeyPair& pair) {
  if (auto s = WriteFile(prefix + ".secret", pair.secret_key + "\n", 0600); !s.ok()) return s;
  return WriteFile(prefix + ".public", pair.public_key + "\n", 0644);
}

absl::StatusOr<std::optional<CurveClientKeys>> CurveClientKeysFrom(
    const std::string& server_key_or_file, const std::string& secret_key_file) {
  if (server_key_or_file.empty() && secret_key_file.empty()) return std::nullopt;
  if (server_key_or_file.empty() || secret_key_file.empty())
    return absl::InvalidArgumentError(
        "CURVE needs both --curve_server_key and --curve_secret_key_file");
  CurveClientKeys k;
  k.server_public_key = server_key_or_file;
  if (!IsZ85Key(k.server_public_key)) {
    auto from_file = ReadKeyFile(k.server_public_key);
    if (!from_file.ok())
      return absl::InvalidArgumentError(absl::StrCat("--curve_server_key=", server_key_or_file,
                                                     ": neither a Z85 key nor a key file"));
    k.server_public_key = *from_file;
  }
  auto secret = ReadKeyFile(secret_key_file);
  if (!secret.ok()) return secret.status();
  auto pub = CurvePublicKey(*secret);
  if (!pub.ok()) return pub.status();
  k.public_key = *pub;
  k.secret_key = *secret;
  return k;
}

absl::StatusOr<AuthorizedKeys> AuthorizedKeys::Parse(absl::string_view text) {
  AuthorizedKeys keys;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t id = 0;
    if (f.size() != 2 || !absl::SimpleAtoi(f[0], &id) || !IsZ85Key(f[1]))
      return absl::InvalidArgumentError(
          absl::StrCat("authorized keys line ", line_no, ": expected \"worker_id z85-key\""));
    if (!keys.worker_of_key_.emplace(std::string(f[1]), id).second)
      return absl::InvalidArgumentError(
          absl::StrCat("authorized keys line ", line_no, ": key listed twice"));
  }
  return keys;
}

absl::StatusOr<AuthorizedKeys> AuthorizedKeys::Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read authorized keys ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto keys = Parse(ss.str());
  if (!keys.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", keys.status().message()));
  return keys;
}

std::optional<uint32_t> AuthorizedKeys::WorkerOf(absl::string_view public_z85) const {
  auto it = worker_of_key_.find(std::string(public_z85));
  if (it == worker_of_key_.end()) return std::nullopt;
  return it->second;
}

absl::Status MakeCurveServer(zmq::socket_t& socket, const std::string& secret_z85) {
  try {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, secret_z85);
    socket.set(zmq::sockopt::zap_domain, kZapDomain);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("CURVE server setup: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status MakeCurveClient(zmq::socket_t& socket, const std::string& server_public_z85,
                             const std::string& public_z85, const std::string& secret_z85) {
  try {
    socket.set(zmq::sockopt::curve_serverkey, server_public_z85);
    socket.set(zmq::sockopt::curve_publickey, public_z85);
    socket.set(zmq::sockopt::curve_secretkey, secret_z85);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("CURVE client setup: ", e.what()));
  }
  return absl::OkStatus();
}

std::optional<std::string> UserIdOf(const zmq::message_t& frame) {
  const char* v = zmq_msg_gets(frame.handle(), "User-Id");
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

absl::StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& ctx,
                                                              AuthorizedKeys keys) {
  try {
    zmq::socket_t rep(ctx, zmq::socket_type::rep);
    rep.set(zmq::sockopt::linger, 0);
    rep.bind(kZapEndpoint);
    return std::unique_ptr<ZapHandler>(new ZapHandler(std::move(rep), std::move(keys)));
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("ZAP handler: ", e.what()));
  }
}

ZapHandler::ZapHandler(zmq::socket_t socket, AuthorizedKeys keys)
    : socket_(std::move(socket)), keys_(std::move(keys)) {
  thread_ = std::thread([this] { Loop(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> ZapHandler::TakeRefusalNote() {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t refused = refused_;
  if (refused == noted_) return std::nullopt;
  const uint64_t n = refused - std::exchange(noted_, refused);
  return absl::StrCat(n, " CURVE handshake", n == 1 ? "" : "s", " refused, the newest ",
                      newest_refusal_);
}

// ZAP 1.0 (RFC 27): request = version, request id, domain, address, routing id, mechanism,
// credentials...; reply = version, request id, status code, status text, user id, metadata.
void ZapHandler::Loop() {
  try {
    while (!stop_) {
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> req;
      do {
        zmq::message_t m;
        if (!socket_.recv(m, zmq::recv_flags::none)) break;
        req.push_back(std::move(m));
      } while (req.back().more());
      auto text = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
      std::string code = "400", status = "unknown key", user, why;
      if (text(0) != "1.0") {
        status = "bad ZAP version";
        why = "a ZAP request of another version";
      } else if (text(5) != "CURVE" || req.size() < 7 || req[6].size() != kKeyBytes) {
        status = "CURVE required";
        why = absl::StrCat("mechanism ", text(5), " where CURVE is required");
      } else {
        char z85[kZ85KeyChars + 1];
        if (zmq_z85_encode(z85, req[6].data<uint8_t>(), kKeyBytes) == nullptr) {
          why = "a key that does not encode";
        } else if (keys_.WorkerOf(z85)) {
          code = "200";
          status = "OK";
          user = z85;
        } else {
          why = absl::StrCat("key ", z85, " is not in the authorized keys");
        }
      }
      if (code == "200") {
        ++admitted_;
      } else {
        std::lock_guard<std::mutex> g(mu_);
        newest_refusal_ = absl::StrCat("from ", text(3), ": ", why);
        ++refused_;
      }
      const std::string reply[] = {"1.0", text(1), code, status, user, ""};
      for (size_t i = 0; i < 6; ++i)
        socket_.send(zmq::buffer(reply[i]),
                     i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    // The context is terminating; nothing left to authenticate.
  }
  socket_.close();
}

}  // namespace diloco::wire
