// diloco-ctl stats: asks a running shard for its live statistics (the Stats message) and
// prints the JSON it answers with.
#include <cstdio>

#include <zmq.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ctl/commands.h"
#include "schema/transport.h"

namespace diloco::ctl {

int Stats(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> pos;
  std::string error;
  if (!ParseArgs(argc, argv, {"server", "timeout_ms"}, &flags, &pos, &error)) return Usage(error);
  if (flags["server"].empty()) return Usage("stats needs --server=tcp://HOST:PORT");
  int timeout_ms = 5000;
  if (flags.count("timeout_ms") && !absl::SimpleAtoi(flags["timeout_ms"], &timeout_ms))
    return Usage("--timeout_ms must be an integer");
  try {
    zmq::context_t ctx(1);
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect(flags["server"]);
    wire::HeaderFields h;
    h.type = wire::MsgType::Stats;
    if (auto st = wire::Send(s, h, {}, nullptr, false); !st.ok()) return Fail(st);
    const absl::Time end = absl::Now() + absl::Milliseconds(timeout_ms);
    while (absl::Now() < end) {
      zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      auto frames = wire::TryRecvMultipart(s);
      if (!frames) continue;
      auto m = wire::ParseMessage(std::move(*frames));
      if (!m.ok()) return Fail(m.status());
      if (m->type() == wire::MsgType::Stats && m->header().message()) {
        std::printf("%s\n", m->header().message()->c_str());
        return 0;
      }
    }
  } catch (const zmq::error_t& e) {
    return Fail(absl::UnavailableError(absl::StrCat("stats: ", e.what())));
  }
  return Fail(absl::DeadlineExceededError(
      absl::StrCat("no answer from ", flags["server"], " within ", timeout_ms, " ms")));
}

}  // namespace diloco::ctl
