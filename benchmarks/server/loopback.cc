// Part 3 of diloco-bench-server: real diloco-server processes on 127.0.0.1 fed by pushing
// threads, one DEALER per (thread, shard). Each thread pushes encoded deltas of every fragment
// and waits for the Applied update of each before pushing that fragment again: int8 pushes with
// int8 downloads (the default), with fp32 downloads, then int4 both ways. The ratio column is
// wire bytes per second (encoded pushes in, the updates' payload bytes out, counted as
// received) over memcpy's bandwidth: every one of those bytes is copied at least once on the
// loopback path.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmarks/server/spawn.h"
#include "common/model_spec.h"
#include "common/plan.h"
#include "kernels/codec.h"
#include "schema/transport.h"

namespace {

using namespace diloco;

std::string WaitEndpoint(const std::filesystem::path& p) {
  for (int i = 0; i < 400; ++i) {
    std::ifstream in(p);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    absl::SleepFor(absl::Milliseconds(25));
  }
  return "";
}

struct Pusher {
  std::vector<std::unique_ptr<zmq::socket_t>> socks;
};

}  // namespace

int Loopback(const std::string& model, uint32_t fragments, double seconds, double memcpy_gbps) {
  std::printf("\n== loopback (diloco-server processes, Applied acks awaited)\n");
  std::printf("%-9s %-9s %6s %8s %12s %14s %14s %8s\n", "up", "down", "shards", "workers",
              "pushes/s", "params/s", "wire GB/s", "ratio");
  const auto manifest = *GptManifest(*ParseGptConfig(model));
  const std::pair<const char*, const char*> codecs[] = {
      {"int8:256", "int8:256"}, {"int8:256", "fp32"}, {"int4:256", "int4:256"}};
  for (const auto& [codec_name, down_name] : codecs) {
    const kernels::Codec codec = *kernels::ParseCodec(codec_name);
    const auto dir =
        std::filesystem::temp_directory_path() / absl::StrCat("diloco-bench-server-", ::getpid());
    for (uint32_t shards : {1u, 2u, 4u}) {
      const Plan plan = *Plan::Create(manifest, fragments, shards);
      // Encoded payload per fragment, shared by every pusher (read-only, sent zero-copy).
      std::vector<std::shared_ptr<const wire::Bytes>> enc(fragments);
      for (const auto& f : plan.fragments()) {
        std::mt19937 rng(f.id);
        std::normal_distribution<float> d(0.0f, 1e-3f);
        std::vector<float> v(f.numel);
        for (auto& x : v) x = d(rng);
        auto b = std::make_shared<wire::Bytes>();
        const uint64_t chunk = wire::ChunkElements(codec.block);
        for (uint64_t off = 0; off < f.numel; off += chunk) {
          const uint64_t n = std::min<uint64_t>(chunk, f.numel - off);
          const size_t at = b->size();
          b->resize(at + kernels::EncodedSize(codec, n));
          (void)kernels::Encode(codec, std::span<const float>(v.data() + off, n),
                                std::span<uint8_t>(b->data() + at, b->size() - at));
        }
        enc[f.id] = std::move(b);
      }
      for (uint32_t workers : {1u, 4u, 8u}) {
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        std::vector<pid_t> pids;
        std::vector<std::string> eps;
        for (uint32_t s = 0; s < shards; ++s)
          pids.push_back(
              bench::Spawn({DILOCO_SERVER_BINARY, "--bind=tcp://127.0.0.1:*",
                            absl::StrCat("--port_file=", (dir / absl::StrCat("p", s)).string()),
                            absl::StrCat("--shard=", s), absl::StrCat("--shards=", shards),
                            absl::StrCat("--fragments=", fragments), "--model=" + model,
                            absl::StrCat("--quorum=", workers), "--progress_interval=1000s",
                            absl::StrCat("--download_codec=", down_name)},
                           (dir / "server.log").string()));
        for (uint32_t s = 0; s < shards; ++s)
          eps.push_back(WaitEndpoint(dir / absl::StrCat("p", s)));
        std::atomic<uint64_t> applied{0}, params{0}, wire_bytes{0};
        std::atomic<bool> stop{false}, init_done{false};
        std::atomic<uint32_t> ready{0};
        auto header = [&](wire::MsgType t, uint32_t w) {
          wire::HeaderFields h;
          h.type = t;
          h.plan_fingerprint = plan.fingerprint();
          h.model_fingerprint = manifest.fingerprint();
          h.worker_id = w;
          h.generation = 1;
          return h;
        };
        zmq::context_t ctx(2);
        std::vector<std::thread> threads;
        for (uint32_t w = 0; w < workers; ++w) {
          threads.emplace_back([&, w] {
            std::vector<std::unique_ptr<zmq::socket_t>> socks;
            for (const auto& ep : eps) {
              socks.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer));
              socks.back()->set(zmq::sockopt::linger, 0);
              socks.back()->connect(ep);
              (void)wire::Send(*socks.back(), header(wire::MsgType::Hello, w), {}, nullptr, false);
            }
            std::map<zmq::socket_t*, wire::TrainAssembler> trains;  // FragmentUpdate trains
            auto recv_until = [&](zmq::socket_t& s, auto pred) {
              while (!stop) {
                zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
                zmq::poll(&item, 1, std::chrono::milliseconds(20));
                auto m = wire::TryRecvMessage(s, trains[&s]);
                if (m.ok() && m->has_value() && pred(**m)) return std::move(*m);
              }
              return std::optional<wire::Message>();
            };
            for (auto& s : socks)
              recv_until(*s,
                         [](const wire::Message& m) { return m.type() == wire::MsgType::Welcome; });
            if (w == 0) {  // theta(0)
              const kernels::Codec fp32{kernels::CodecKind::kFp32, 256};
              for (const auto& f : plan.fragments()) {
                auto b = std::make_shared<wire::Bytes>(f.numel * 4, 0);
                auto h = header(wire::MsgType::InitFragment, w);
                h.fragment_id = f.id;
                wire::SetPayloadLayout(h, fp32, f.numel);
                (void)wire::Send(*socks[f.shard], h, wire::PayloadFrames(b, fp32, f.numel), nullptr,
                                 false);
                recv_until(*socks[f.shard], [](const wire::Message& m) {
                  return m.type() == wire::MsgType::PushAck;
                });
              }
              init_done = true;
            }
            while (!init_done) absl::SleepFor(absl::Milliseconds(5));
            ++ready;
            while (ready < workers) absl::SleepFor(absl::Milliseconds(1));
            std::vector<uint64_t> base(fragments, 1), seq(fragments, 0);
            while (!stop) {
              for (const auto& f : plan.fragments()) {  // one push per fragment in flight
                auto h = header(wire::MsgType::Push, w);
                h.fragment_id = f.id;
                h.seq = ++seq[f.id];
                h.base_version = base[f.id];
                h.tokens = 1000;
                h.steps = 10;
                wire::SetPayloadLayout(h, codec, f.numel);
                (void)wire::Send(*socks[f.shard], h, wire::PayloadFrames(enc[f.id], codec, f.numel),
                                 nullptr, false);
              }
              for (const auto& f : plan.fragments()) {
                auto m = recv_until(*socks[f.shard], [&](const wire::Message& m) {
                  const auto& x = m.header();
                  return x.fragment_id() == f.id && x.seq() == seq[f.id] &&
                         ((m.type() == wire::MsgType::FragmentUpdate &&
                           x.ack() == wire::AckStatus::Applied) ||
                          (m.type() == wire::MsgType::PushAck &&
                           x.ack() == wire::AckStatus::Stale));
                });
                if (!m) break;
                base[f.id] = m->header().version();
                if (m->type() == wire::MsgType::FragmentUpdate) {
                  ++applied;
                  params += f.numel;
                  wire_bytes += enc[f.id]->size() + m->payload_bytes();
                }
              }
            }
          });
        }
        while (ready < workers) absl::SleepFor(absl::Milliseconds(5));
        const uint64_t a0 = applied, p0 = params, w0 = wire_bytes;
        const absl::Time t0 = absl::Now();
        absl::SleepFor(absl::Seconds(seconds));
        const double dt = absl::ToDoubleSeconds(absl::Now() - t0);
        const uint64_t a1 = applied, p1 = params, w1 = wire_bytes;
        stop = true;
        for (auto& t : threads) t.join();
        for (pid_t p : pids) {
          ::kill(p, SIGTERM);
          ::waitpid(p, nullptr, 0);
        }
        const double pps = (p1 - p0) / dt;
        const double wire = (w1 - w0) / dt / 1e9;  // pushes sent and their answers received
        std::printf("%-9s %-9s %6u %8u %12.1f %14.3e %14.2f %8.2f\n", codec_name, down_name, shards,
                    workers, (a1 - a0) / dt, pps, wire, wire / memcpy_gbps);
      }
    }
    std::filesystem::remove_all(dir);
  }
  return 0;
}
