// diloco-worker: one learner. Trains the GPT locally (AdamW, H inner steps), and through the
// SyncClient pushes quantised deltas to the shards and adopts the fragments they send back,
// without the training loop ever waiting on the network.
#include <csignal>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "common/model_spec.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/evaluate.h"
#include "worker/sync_client.h"

ABSL_FLAG(std::string, servers, "",
          "comma-separated shard endpoints, shard i at position i (empty: train without sync)");
ABSL_FLAG(uint32_t, worker_id, 0, "this worker's id (unique in the fleet)");
ABSL_FLAG(uint64_t, generation, 0, "worker generation (0: from the clock, new on each start)");
ABSL_FLAG(uint32_t, fragments, 4, "number of fragments (same as the servers')");
ABSL_FLAG(std::string, model, "small", "model preset or spec (same as the servers')");
ABSL_FLAG(std::string, codec, "int8:256", "push codec: fp32, bf16, fp8, int8, int4 [:block]");
ABSL_FLAG(uint32_t, inner_steps, 50, "H: inner steps between pushes of a fragment");
ABSL_FLAG(bool, dylu, false, "Dynamic Local Updates: scale H by this worker's relative speed");
ABSL_FLAG(bool, stream, true, "stagger fragments' pushes across the H steps");
ABSL_FLAG(double, adopt_alpha, 0.0, "adoption: local = global + alpha*(local - global)");
ABSL_FLAG(int64_t, steps, 0, "inner steps to run (0: until --duration or a signal)");
ABSL_FLAG(absl::Duration, duration, absl::InfiniteDuration(), "stop after this long");
ABSL_FLAG(int, batch, 8, "sequences per inner step");
ABSL_FLAG(int, seq_len, 0, "tokens per sequence (0: the model's context)");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay");
ABSL_FLAG(uint64_t, seed, 1234, "seed of theta(0) and of the batch order");
ABSL_FLAG(std::string, data, "synthetic",
          "synthetic, bin:PATH (llm.c token file) or text:PATH (bytes)");
ABSL_FLAG(int, num_workers, 0, "workers sharing the data (0: the number of --worker_id + 1)");
ABSL_FLAG(int, threads, 1, "CPU threads for the matrix products");
ABSL_FLAG(absl::Duration, step_delay, absl::ZeroDuration(),
          "test flag: extra time per inner step (a slower machine)");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(5), "progress line period");
ABSL_FLAG(int, eval_batches, 4, "held-out batches per evaluation");
ABSL_FLAG(std::string, metrics_jsonl, "", "append JSON-lines events here");
ABSL_FLAG(absl::Duration, join_timeout, absl::Seconds(60), "give up joining after this long");

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "diloco-worker: %s\n", std::string(s.message()).c_str());
  return 2;
}

absl::StatusOr<diloco::data::DataOptions> ParseData(const std::string& spec, int index, int n) {
  diloco::data::DataOptions d;
  d.worker_index = index;
  d.num_workers = n;
  if (spec == "synthetic") return d;
  std::vector<std::string> kv = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  if (kv.size() == 2 && kv[0] == "bin") {
    d.kind = diloco::data::DataKind::kTokenFile;
    d.path = kv[1];
    return d;
  }
  if (kv.size() == 2 && kv[0] == "text") {
    d.kind = diloco::data::DataKind::kTextFile;
    d.path = kv[1];
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--data=", spec, ": expected synthetic, bin:PATH or text:PATH"));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-worker --servers=tcp://h:p,... --worker_id=N [flags]");
  absl::ParseCommandLine(argc, argv);
  using namespace diloco;

  auto cfg = ParseGptConfig(absl::GetFlag(FLAGS_model));
  if (!cfg.ok()) return Fail(cfg.status());
  auto codec = kernels::ParseCodec(absl::GetFlag(FLAGS_codec));
  if (!codec.ok()) return Fail(codec.status());
  const uint32_t wid = absl::GetFlag(FLAGS_worker_id);
  const int nw = absl::GetFlag(FLAGS_num_workers) > 0 ? absl::GetFlag(FLAGS_num_workers)
                                                     : static_cast<int>(wid) + 1;
  auto data = ParseData(absl::GetFlag(FLAGS_data), static_cast<int>(wid) % nw, nw);
  if (!data.ok()) return Fail(data.status());

  model::TrainerOptions to;
  to.model = *cfg;
  to.batch_size = absl::GetFlag(FLAGS_batch);
  to.seq_len = absl::GetFlag(FLAGS_seq_len);
  to.adamw.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  to.adamw.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  to.seed = absl::GetFlag(FLAGS_seed);
  to.data = *data;
  to.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  to.threads = absl::GetFlag(FLAGS_threads);
  auto trainer = model::MakeCpuTrainer(to);
  if (!trainer.ok()) return Fail(trainer.status());
  Trainer& tr = **trainer;
  auto log = EventLog::Open(absl::GetFlag(FLAGS_metrics_jsonl));
  if (!log.ok()) return Fail(log.status());

  std::unique_ptr<worker::SyncClient> sync;
  const std::string servers = absl::GetFlag(FLAGS_servers);
  if (!servers.empty()) {
    worker::SyncOptions so;
    so.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
    so.worker_id = wid;
    so.generation = absl::GetFlag(FLAGS_generation);
    so.num_fragments = absl::GetFlag(FLAGS_fragments);
    so.codec = *codec;
    so.inner_steps = absl::GetFlag(FLAGS_inner_steps);
    so.dylu = absl::GetFlag(FLAGS_dylu);
    so.stream = absl::GetFlag(FLAGS_stream);
    so.adopt_alpha = static_cast<float>(absl::GetFlag(FLAGS_adopt_alpha));
    auto s = worker::SyncClient::Create(so, tr.manifest());
    if (!s.ok()) return Fail(s.status());
    sync = std::move(*s);
    if (auto st = sync->Join(tr.params(), absl::GetFlag(FLAGS_join_timeout)); !st.ok())
      return Fail(st);
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const float eval0 = tr.EvalLoss();
  std::fprintf(stderr,
               "diloco-worker[%u]: model %s (%lu params), codec %s, H=%u, %s; held-out loss %.4f\n",
               wid, GptConfigString(*cfg).c_str(),
               static_cast<unsigned long>(tr.manifest().total_elements()),
               kernels::CodecName(*codec).c_str(), absl::GetFlag(FLAGS_inner_steps),
               sync ? absl::StrCat("plan ", absl::Hex(sync->plan_fingerprint())).c_str()
                    : "no sync",
               eval0);

  const int64_t max_steps = absl::GetFlag(FLAGS_steps);
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::GetFlag(FLAGS_duration);
  const absl::Duration delay = absl::GetFlag(FLAGS_step_delay);
  const absl::Duration period = absl::GetFlag(FLAGS_progress_interval);
  absl::Time next_progress = start + period;
  uint64_t tokens = 0, tokens_at_last = 0;
  absl::Time last = start;
  double loss_ema = 0;
  int64_t step = 0;
  for (; !g_stop && (max_steps == 0 || step < max_steps) && absl::Now() < end; ++step) {
    const absl::Time t0 = absl::Now();
    const float loss = tr.Step();
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    const absl::Duration dt = absl::Now() - t0;
    tokens += tr.tokens_per_step();
    loss_ema = loss_ema == 0 ? loss : 0.9 * loss_ema + 0.1 * loss;
    if (sync) sync->AfterStep(tr.params(), tr.tokens_per_step(), dt);
    const absl::Time now = absl::Now();
    if (now >= next_progress) {
      const double tps = (tokens - tokens_at_last) / absl::ToDoubleSeconds(now - last);
      tokens_at_last = tokens;
      last = now;
      next_progress = now + period;
      JsonObject ev;
      ev.Add("event", "progress").Add("worker", uint64_t{wid}).Add("step", step + 1);
      ev.Add("elapsed_s", absl::ToDoubleSeconds(now - start));
      ev.Add("loss", loss_ema).Add("tokens_per_s", tps).Add("tokens", tokens);
      std::string extra;
      if (sync) {
        const auto st = sync->stats();
        extra = absl::StrCat(" | H ", st.inner_steps_now, " pushes ", st.pushes, " adopted ",
                             st.adoptions, " stale ", st.stale, " staleness ",
                             absl::StrFormat("%.2f", st.mean_staleness), " sent ",
                             st.bytes_sent >> 10, "KiB recv ", st.bytes_received >> 10,
                             "KiB versions [", absl::StrJoin(st.versions, ","), "]");
        ev.Add("pushes", st.pushes).Add("adoptions", st.adoptions).Add("stale", st.stale);
        ev.Add("staleness", st.mean_staleness).Add("bytes_sent", st.bytes_sent);
        ev.Add("bytes_received", st.bytes_received).Add("resends", st.resends);
        ev.Add("inner_steps", uint64_t{st.inner_steps_now});
        ev.AddRaw("versions", absl::StrCat("[", absl::StrJoin(st.versions, ","), "]"));
      }
      std::fprintf(stderr, "worker %u step %6ld loss %.4f tok/s %8.0f%s\n", wid,
                   static_cast<long>(step + 1), loss_ema, tps, extra.c_str());
      log->Write(ev);
    }
  }
  const float eval_local = tr.EvalLoss();
  JsonObject done;
  done.Add("event", "done").Add("worker", uint64_t{wid}).Add("steps", step);
  done.Add("eval_local", static_cast<double>(eval_local)).Add("eval_initial",
                                                              static_cast<double>(eval0));
  std::string global_str;
  if (sync) {
    auto g = model::EvaluateParams(to, sync->global_params());
    if (g.ok()) {
      done.Add("eval_global", *g);
      global_str = absl::StrFormat(", global model %.4f", *g);
    }
  }
  log->Write(done);
  std::fprintf(stderr, "diloco-worker[%u]: done after %ld steps; held-out loss %.4f -> %.4f%s\n",
               wid, static_cast<long>(step), eval0, eval_local, global_str.c_str());
  return 0;
}
