// diloco-worker's run loop and final report (run_loop.h).
#include "worker/run_loop.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/ema.h"
#include "common/log.h"
#include "common/model_family.h"
#include "worker/eval_schedule.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/safetensors.h"
#include "worker/run_report.h"

namespace diloco::worker {

int RunTraining(const RunParts& parts) {
  const WorkerOptions& w = parts.options;
  const island::IslandSpec& spec = parts.spec;
  const uint32_t wid = w.worker_id;
  Trainer& tr = parts.trainer;
  EventLog& log = parts.log;
  SyncClient* const sync = parts.sync;
  island::IslandSteps* const island = parts.island_run.steps.get();
  StateKeeper& keeper = parts.keeper;
  const bool evaluates = parts.before.evaluates;
  const float eval0 = parts.before.eval0;
  const int64_t heldout_tokens = parts.before.heldout_tokens;
  const std::string& floor_str = parts.before.floor_str;
  const Baseline& before = parts.before;
  bool joined_logged = parts.joined_logged;
  const int64_t max_steps = w.steps;
  // Islands keep every rank on the same steps: they evaluate at the multiples.
  EvalSchedule evals(w.eval_every, sync && !island && w.sync && PushAlignment(*w.sync),
                     w.start_step + 1);
  const absl::Time start = absl::Now();
  // The run's clock (--duration, the schedule): a learner resumed from --state_dir goes on
  // from the training time it had.
  const absl::Time clock0 = start - w.resumed_elapsed;
  const absl::Time end = clock0 + w.duration;
  const absl::Duration delay = w.step_delay;
  const double slowdown = w.step_slowdown;
  const absl::Duration period = w.progress_interval;
  absl::Time next_progress = start + period;
  uint64_t tokens = 0, tokens_at_last = 0;
  absl::Time last = start;
  double loss_ema = 0;
  absl::Duration busy;          // inside Trainer::Step
  int64_t step = w.start_step;  // of the schedule; this run trains step - start_step of them
  for (;; ++step) {
    const absl::Time t0 = absl::Now();
    bool stop = StopRequested() || (max_steps > 0 && step >= max_steps) || t0 >= end;
    float lr = model::LrAt(w.lr_schedule, step + 1, t0 - clock0);
    if (island) {  // rank 0's order, and what its sync client changed, on every rank
      auto order = island->Exchange({stop, lr});
      if (!order.ok()) return Fail(order.status());
      stop = order->stop, lr = order->lr;
      // Compared here, where every rank holds what rank 0's sync client wrote up to now (after
      // the step, rank 0 may hold an adoption the others receive with this order).
      if (step > w.start_step && step % w.inner_steps == 0)
        if (auto st = island->Check(step); !st.ok()) return Fail(st);
    }
    if (stop) break;
    tr.SetLearningRate(lr);
    const float loss = tr.Step();
    busy += absl::Now() - t0;
    if (absl::Status e = tr.error(); !e.ok()) return Fail(e);
    if (slowdown > 1) absl::SleepFor((absl::Now() - t0) * (slowdown - 1));
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    const absl::Duration dt = absl::Now() - t0;
    tokens += tr.tokens_per_step() * spec.size;  // the island's, all ranks together
    loss_ema = Ema(loss_ema, loss, 0.1);
    if (sync) {
      // Parameters reached piece by piece, only where AfterStep reads or writes them (a GPU
      // trainer copies just those pieces to the host and back).
      sync->AfterStep(
          [&tr, island](uint64_t offset, uint64_t n) {
            return island ? island->Range(offset, n) : tr.ParamRange(offset, n);
          },
          tr.tokens_per_step() * spec.size, dt);
      if (auto st = keeper.AfterStep(tr, step + 1, sync->stats().applied, absl::Now() - clock0);
          !st.ok())
        Logf(LogLevel::kWarning, "diloco-worker[%u]: --state_dir: %s", wid,
             std::string(st.message()).c_str());
      WriteSyncEvents(*sync, wid, w.log_sync_events, log);
      if (!joined_logged && sync->joined()) {  // joined in the background
        joined_logged = true;
        JsonObject ev;
        ev.Add("event", "joined").Add("worker", uint64_t{wid}).Add("step", step + 1);
        ev.Add("params_checksum", ParamsChecksum(tr.params()));
        log.Write(ev);
      }
    }
    uint64_t version0 = 0;
    if (evals.Watching(step + 1)) {
      const std::vector<uint64_t> versions = sync->stats().versions;
      version0 = versions.empty() ? 0 : versions[0];
    }
    if (evals.Now(step + 1, version0)) {  // curves of the convergence study
      JsonObject ev;
      ev.Add("event", "eval").Add("worker", uint64_t{wid}).Add("step", step + 1);
      ev.Add("tokens", tokens).Add("elapsed_s", absl::ToDoubleSeconds(absl::Now() - start));
      ev.Add("loss_local", static_cast<double>(tr.EvalLoss()));
      if (sync && sync->joined())
        ev.Add("loss_global", static_cast<double>(EvalOnTrainer(tr, sync->global_params())));
      log.Write(ev);
    }
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
      ev.Add("lr", static_cast<double>(lr));
      AddUtilization(ev, busy, now - start);
      if (sync)
        sync->SetProgress(
            {static_cast<uint64_t>(step + 1), static_cast<float>(loss_ema), static_cast<float>(tps),
             static_cast<float>(Utilization(busy, now - start)), AbslUnparseFlag(w.device)});
      std::string extra;
      if (sync) {
        const auto st = sync->stats();
        extra = absl::StrCat(" | joined ", st.joined, "/", st.versions.size(), " H ",
                             st.inner_steps_now, " ", kernels::CodecName(st.codec_now), " pushes ",
                             st.pushes, " applied ", st.applied, " adopted ", st.adoptions,
                             " stale ", st.stale, " resent ", st.resends, " reanchored ",
                             st.reanchors, " staleness ",
                             absl::StrFormat("%.2f (max %d)", st.mean_staleness, st.max_staleness),
                             " sent ", st.bytes_sent >> 10, "KiB recv ", st.bytes_received >> 10,
                             "KiB sync/step ", absl::StrFormat("%.0fus", st.after_step_us),
                             " util ", absl::StrFormat("%.3f", Utilization(busy, now - start)),
                             " versions [", absl::StrJoin(st.versions, ","), "]");
        ev.Add("pushes", st.pushes).Add("applied", st.applied).Add("adoptions", st.adoptions);
        ev.Add("stale", st.stale).Add("duplicates", st.duplicates).Add("refused", st.refused);
        ev.Add("staleness", st.mean_staleness).Add("max_staleness", st.max_staleness);
        AddSyncFigures(ev, st);
        ev.Add("resends", st.resends).Add("reconnects", st.reconnects);
        ev.Add("reanchors", st.reanchors).Add("reanchored_steps", st.reanchored_steps);
        ev.Add("aligned_pushes", st.aligned_pushes).Add("aligned_steps", st.aligned_steps);
        ev.Add("shard_restarts", st.shard_restarts).Add("unacked", uint64_t{st.unacked});
        ev.Add("joined", uint64_t{st.joined}).Add("inner_steps", uint64_t{st.inner_steps_now});
        ev.Add("step_time_us", st.step_time_us).Add("fleet_step_time_us", st.fleet_step_time_us);
        ev.Add("after_step_us", st.after_step_us).Add("after_step_max_us", st.after_step_max_us);
        ev.Add("versions", st.versions);
      }
      Logf(LogLevel::kInfo, "worker %u step %6ld loss %.4f tok/s %8.0f%s", wid,
           static_cast<long>(step + 1), loss_ema, tps, extra.c_str());
      log.Write(ev);
    }
  }
  const absl::Duration wall = absl::Now() - start;  // of the training loop, without the drain
  if (sync) {
    if (auto st = sync->Drain(tr.params(), w.drain_timeout); !st.ok())
      Logf(LogLevel::kWarning, "diloco-worker[%u]: %s", wid, std::string(st.message()).c_str());
    WriteSyncEvents(*sync, wid, w.log_sync_events, log);
  }
  if (island) {  // what the drain adopted, on every rank; then the ranks must be identical
    if (auto st = island->BroadcastAll(w.drain_timeout + spec.timeout); !st.ok()) return Fail(st);
    if (auto st = island->Check(step); !st.ok()) return Fail(st);
  }
  if (auto st = keeper.Finish(tr, step); !st.ok())
    Logf(LogLevel::kWarning, "diloco-worker[%u]: --state_dir: %s", wid,
         std::string(st.message()).c_str());
  const float eval_local = evaluates ? tr.EvalLoss() : std::nanf("");
  JsonObject done;
  done.Add("event", "done").Add("worker", uint64_t{wid}).Add("steps", step - w.start_step);
  if (w.start_step > 0) done.Add("start_step", w.start_step);
  if (island) {
    done.Add("island_rank", int64_t{spec.rank}).Add("island_size", int64_t{spec.size});
    done.Add("island_floats_moved", island->floats_moved());
    // Gradients and loss, both all-reduces of each step: what the island adds to a step.
    const island::Island& is = *parts.island_run.island;
    done.Add("island_allreduce_ms_per_step",
             is.reduces() ? 2 * absl::ToDoubleMilliseconds(is.reduce_time()) / is.reduces() : 0.0);
  }
  done.Add("params_checksum", ParamsChecksum(tr.params()));
  if (evaluates)
    done.Add("eval_local", static_cast<double>(eval_local))
        .Add("eval_initial", static_cast<double>(eval0));
  AddUtilization(done, busy, wall);
  std::string global_str;
  if (sync) {
    const auto st = sync->stats();
    done.Add("pushes", st.pushes).Add("applied", st.applied).Add("stale", st.stale);
    done.Add("resends", st.resends).Add("joined", uint64_t{st.joined});
    done.Add("join_asks", st.join_asks).Add("reasks", st.reasks);
    done.Add("init_resumed", st.init_resumed).Add("init_bytes_sent", st.init_bytes_sent);
    done.Add("reanchors", st.reanchors).Add("reanchored_steps", st.reanchored_steps);
    done.Add("aligned_pushes", st.aligned_pushes).Add("aligned_steps", st.aligned_steps);
    done.Add("reconnects", st.reconnects).Add("errors", st.errors).Add("refused", st.refused);
    done.Add("after_step_us", st.after_step_us).Add("step_time_us", st.step_time_us);
    AddSyncFigures(done, st);
  }
  if (evaluates) done.Add("heldout_tokens", heldout_tokens);
  if (before.oracle >= 0) done.Add("entropy_floor", before.oracle);
  int rc = 0;
  if (const std::string& out = w.save_model; !out.empty()) {
    // The local model, in diloco-ctl export's names and layout.
    std::map<std::string, std::string> meta = ModelFileMetadata(w.model_name(), tr.manifest());
    meta["diloco.source"] = absl::StrCat("diloco-worker ", wid, " local model");
    meta["diloco.steps"] = absl::StrCat(step);
    if (auto st = model::WriteSafetensors(out, tr.manifest(), tr.params(), meta); !st.ok())
      rc = Fail(st);
    else
      done.Add("saved_model", out);
  }
  if (sync && evaluates) {
    // Last: the local parameters are overwritten by the global ones, not copied aside.
    const float g = EvalOnTrainer(tr, sync->global_params(), /*restore=*/false);
    if (std::isfinite(g)) {
      done.Add("eval_global", static_cast<double>(g));
      global_str = absl::StrFormat(", global model %.4f", g);
    }
  }
  AddMemory(done, tr.params().size());
  log.Write(done);
  const std::string util_str =
      absl::StrFormat("utilization %.3f (%.1f s in steps of %.1f s)", Utilization(busy, wall),
                      absl::ToDoubleSeconds(busy), absl::ToDoubleSeconds(wall));
  if (evaluates)
    Logf(LogLevel::kInfo,
         "diloco-worker[%u]: done after %ld steps, %s; held-out loss %.4f -> %.4f on "
         "%lld tokens%s%s",
         wid, static_cast<long>(step - w.start_step), util_str.c_str(), eval0, eval_local,
         static_cast<long long>(heldout_tokens), global_str.c_str(), floor_str.c_str());
  else
    Logf(LogLevel::kInfo, "diloco-worker[%u]: done after %ld steps, %s", wid,
         static_cast<long>(step - w.start_step), util_str.c_str());
  return rc;
}

}  // namespace diloco::worker
