#include "worker/island/rendezvous_store.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/common/error.h"

namespace diloco::island {
namespace {

constexpr std::string_view kSet = "set", kGet = "get";
constexpr std::string_view kOk = "ok", kMissing = "missing";

std::string Text(const zmq::message_t& m) { return std::string(m.data<char>(), m.size()); }

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    const std::string& host, int port, const std::optional<wire::CurveKeyPair>& keys) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("island rendezvous address ", host, ": ", gai_strerror(rc)));
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, ip, sizeof ip);
  freeaddrinfo(found);
  std::unique_ptr<StoreServer> s(new StoreServer());
  const std::string endpoint = absl::StrCat("tcp://", ip, ":", port);
  if (keys) {
    auto admitted = wire::AuthorizedKeys::Parse(absl::StrCat("0 ", keys->public_key));
    if (!admitted.ok()) return admitted.status();
    auto zap = wire::ZapHandler::Start(s->ctx_, *std::move(admitted));
    if (!zap.ok()) return zap.status();
    s->zap_ = *std::move(zap);
  }
  try {
    s->router_ = zmq::socket_t(s->ctx_, zmq::socket_type::router);
    s->router_.set(zmq::sockopt::linger, 0);
    if (keys)
      if (absl::Status st = wire::MakeCurveServer(s->router_, keys->secret_key); !st.ok())
        return st;
    s->router_.bind(endpoint);
    s->stop_pull_ = zmq::socket_t(s->ctx_, zmq::socket_type::pull);
    s->stop_pull_.bind("inproc://stop");
    s->stop_push_ = zmq::socket_t(s->ctx_, zmq::socket_type::push);
    s->stop_push_.connect("inproc://stop");
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("island rendezvous: cannot listen on ", endpoint,
                                               " (", host, "): ", e.what()));
  }
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  return s;
}

StoreServer::~StoreServer() {
  if (thread_.joinable()) {
    stop_push_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
    thread_.join();
  }
}

void StoreServer::Serve() {
  std::map<std::string, std::string> kv;
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {stop_pull_.handle(), 0, ZMQ_POLLIN, 0}};
  while (true) {
    zmq::poll(items, 2, std::chrono::milliseconds(-1));
    if (items[1].revents & ZMQ_POLLIN) return;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait))
      continue;
    // [identity, op, key, value?]: anything else is dropped (the asker times out, named).
    if (parts.size() < 3) continue;
    const std::string op = Text(parts[1]), key = Text(parts[2]);
    std::vector<zmq::message_t> reply;
    reply.push_back(std::move(parts[0]));
    if (op == kSet && parts.size() == 4) {
      kv[key] = Text(parts[3]);
      reply.emplace_back(kOk.data(), kOk.size());
    } else if (op == kGet && parts.size() == 3) {
      auto it = kv.find(key);
      if (it == kv.end()) {
        reply.emplace_back(kMissing.data(), kMissing.size());
      } else {
        reply.emplace_back(kOk.data(), kOk.size());
        reply.emplace_back(it->second.data(), it->second.size());
      }
    } else {
      continue;
    }
    zmq::send_multipart(router_, reply, zmq::send_flags::dontwait);
  }
}

StoreClient::StoreClient(const std::string& host, int port, absl::Duration timeout,
                         const std::optional<wire::CurveKeyPair>& keys)
    : address_(absl::StrCat(host, ":", port)), timeout_(timeout), keys_(keys) {
  Connect();
}

void StoreClient::Connect() {
  dealer_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
  dealer_.set(zmq::sockopt::linger, 0);
  // A key refused here is a Status the first Ask turns into its timeout's error: the keys
  // were read and checked when the flags were.
  if (keys_)
    (void)wire::MakeCurveClient(dealer_, keys_->public_key, keys_->public_key, keys_->secret_key);
  dealer_.connect(absl::StrCat("tcp://", address_));
}

std::vector<zmq::message_t> StoreClient::Ask(std::vector<zmq::message_t> request,
                                             absl::Time deadline) {
  zmq::send_multipart(dealer_, request);
  zmq::pollitem_t item{dealer_.handle(), 0, ZMQ_POLLIN, 0};
  const absl::Duration left = deadline - absl::Now();
  zmq::poll(&item, 1,
            std::chrono::milliseconds(std::max<int64_t>(0, absl::ToInt64Milliseconds(left))));
  std::vector<zmq::message_t> reply;
  if (!(item.revents & ZMQ_POLLIN) ||
      !zmq::recv_multipart(dealer_, std::back_inserter(reply), zmq::recv_flags::dontwait)) {
    // The request may still be queued for a store that comes up later; its late reply would
    // answer the next request. A fresh socket forgets it.
    Connect();
    throw gloo::IoException(absl::StrCat("island rendezvous: no answer from rank 0's store at ",
                                         address_, " within ", absl::FormatDuration(timeout_),
                                         " (is rank 0 running, and MASTER_ADDR its address?)"));
  }
  return reply;
}

void StoreClient::set(const std::string& key, const std::vector<char>& data) {
  std::vector<zmq::message_t> req;
  req.emplace_back(kSet.data(), kSet.size());
  req.emplace_back(key.data(), key.size());
  req.emplace_back(data.data(), data.size());
  Ask(std::move(req), absl::Now() + timeout_);
}

std::optional<std::vector<char>> StoreClient::TryGet(const std::string& key) {
  return TryGet(key, absl::Now() + timeout_);
}

std::optional<std::vector<char>> StoreClient::TryGet(const std::string& key, absl::Time deadline) {
  std::vector<zmq::message_t> req;
  req.emplace_back(kGet.data(), kGet.size());
  req.emplace_back(key.data(), key.size());
  std::vector<zmq::message_t> reply = Ask(std::move(req), deadline);
  if (reply.size() == 2 && Text(reply[0]) == kOk)
    return std::vector<char>(reply[1].data<char>(), reply[1].data<char>() + reply[1].size());
  return std::nullopt;
}

std::vector<char> StoreClient::get(const std::string& key) {
  wait({key});
  return *TryGet(key);
}

void StoreClient::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void StoreClient::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  const absl::Duration limit = std::min(timeout_, absl::FromChrono(timeout));
  const absl::Time deadline = absl::Now() + limit;
  std::vector<std::string> missing = keys;
  while (true) {
    std::erase_if(missing, [this, deadline](const std::string& k) {
      return TryGet(k, std::max(deadline, absl::Now() + absl::Milliseconds(100))).has_value();
    });
    if (missing.empty()) return;
    if (absl::Now() >= deadline)
      throw gloo::IoException(
          absl::StrCat("island rendezvous at ", address_, ": after ", absl::FormatDuration(limit),
                       " these keys are still missing (ranks that never arrived): ",
                       absl::StrJoin(missing, ", ")));
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace diloco::island
