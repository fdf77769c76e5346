// The header section of diloco-bench-checksum: what the header checksum (protocol version 3,
// schema/wire.h step 3) adds to receiving a message, against what checking a header cost
// before it, measured in the same run. Per header, in ns, the best of `reps` short runs of
// `iters` calls, the three interleaved:
//   checksum  wire::HeaderChecksumMatches: the magic and the XXH3-64 of the bytes before it
//   verifier  the FlatBuffers verifier over the table (depth and table limits as the receiver
//             sets them): the bulk of what a header cost to check before version 3
//   verify    wire::VerifyHeaderFrame whole: size cap, checksum, verifier, version, enums
// ratio = checksum / verifier; share = checksum / verify. Headers are those a worker and a
// shard send most: a push of one chunk, a push of 64 chunks (a 64 Mi-parameter int8 fragment
// sent whole), a Welcome listing 64 fragments, a Stale answer with its sentence.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "schema/wire.h"

namespace diloco::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  const char* name;
  wire::HeaderFields fields;
  size_t frames;  // payload frames the header declares
};

wire::HeaderFields Push() {
  wire::HeaderFields h;
  h.type = wire::MsgType::Push;
  h.plan_fingerprint = 0x0123456789abcdef;
  h.model_fingerprint = 0xfedcba9876543210;
  h.worker_id = 17;
  h.generation = 1796000000000000;
  h.seq = 4211;
  h.fragment_id = 12;
  h.base_version = 3100;
  h.tokens = 524288;
  h.steps = 64;
  h.codec = 3;
  h.block = 256;
  h.num_elements = 1 << 20;
  h.chunk_elements = 1 << 20;
  h.step_time_us = 95000;
  return h;
}

std::vector<Sample> Samples() {
  std::vector<Sample> s;
  s.push_back({"Push, 1 chunk", Push(), 1});
  wire::HeaderFields big = Push();
  big.num_elements = uint64_t{64} << 20;
  s.push_back({"Push, 64 chunks", big, 64});
  wire::HeaderFields welcome;
  welcome.type = wire::MsgType::Welcome;
  welcome.plan_fingerprint = 0x0123456789abcdef;
  welcome.worker_id = 17;
  welcome.incarnation = 0x5eed;
  for (uint32_t i = 0; i < 64; ++i) welcome.versions.push_back(wire::FragmentVersion(i, 3100 + i));
  welcome.credit_bytes = uint64_t{1} << 30;
  s.push_back({"Welcome, 64 versions", welcome, 0});
  wire::HeaderFields stale;
  stale.type = wire::MsgType::PushAck;
  stale.ack = wire::AckStatus::Stale;
  stale.message =
      "base version 3084 of fragment 12 is more than 16 versions behind 3101: pull "
      "the fragment and push again";
  stale.worker_id = 17;
  stale.fragment_id = 12;
  stale.seq = 4211;
  stale.version = 3101;
  s.push_back({"PushAck Stale, message", stale, 0});
  return s;
}

// ns per call of fn over `iters` calls.
template <typename Fn>
double NsPer(Fn&& fn, uint64_t iters) {
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < iters; ++i) fn();
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  return ns / static_cast<double>(iters);
}

}  // namespace

void ReportHeaderChecks(int reps, uint64_t iters) {
  std::printf(
      "\nheader checks: ns per header, best of %d x %llu; ratio = checksum / verifier, share = "
      "checksum / verify\n",
      reps, static_cast<unsigned long long>(iters));
  std::printf("%-22s %6s | %9s %9s %9s | %6s %6s\n", "header", "bytes", "checksum", "verifier",
              "verify", "ratio", "share");
  for (const Sample& s : Samples()) {
    std::vector<uint64_t> lengths(s.frames, 4 << 20), sums(s.frames, 0x1234);
    zmq::message_t frame = wire::BuildHeader(s.fields, lengths, sums);
    const auto* data = static_cast<const uint8_t*>(frame.data());
    const size_t size = frame.size();
    volatile uint64_t sink = 0;
    auto checksum_once = [&] { sink = sink + wire::HeaderChecksumMatches(data, size); };
    auto verifier_once = [&] {
      flatbuffers::Verifier::Options vo;
      vo.max_depth = wire::kVerifierMaxDepth;
      vo.max_tables = wire::kVerifierMaxTables;
      flatbuffers::Verifier v(data, size - wire::kHeaderTrailerBytes, vo);
      sink = sink + v.VerifyBuffer<wire::Header>(nullptr);
    };
    auto verify_once = [&] { sink = sink + wire::VerifyHeaderFrame(frame).ok(); };
    // Short runs, the three interleaved, best of many: a run another process preempts (the
    // machine is shared) is discarded, and the three see the same conditions.
    double checksum = 1e30, verifier = 1e30, verify = 1e30;
    for (int r = 0; r < reps; ++r) {
      checksum = std::min(checksum, NsPer(checksum_once, iters));
      verifier = std::min(verifier, NsPer(verifier_once, iters));
      verify = std::min(verify, NsPer(verify_once, iters));
    }
    std::printf("%-22s %6zu | %9.1f %9.1f %9.1f | %5.0f%% %5.0f%%\n", s.name, size, checksum,
                verifier, verify, 100 * checksum / verifier, 100 * checksum / verify);
    std::fflush(stdout);
  }
}

}  // namespace diloco::bench
