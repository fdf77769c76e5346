// A discrete-event simulation of a fleet of learners and the shards' rounds under learner
// failures: simulated time, no threads, no sleeping. Rounds close when the shard's own
// server::ShouldClose says (at the times server::CloseDeadline gives, with the grace window from
// server::GraceWindow over moving averages kept as the shard keeps them) and pushes are weighed
// with server::PushWeight; what is modelled around them: learners (step time, H, streamed or
// lockstep fragments), links (latency, bandwidth), shard ingress, liveness (heartbeats and the
// worker timeout), and the failure process (benchmarks/sim/fleet_config.h). Per learner the
// state is a few words plus a few per fragment, so a million learners fit in a few hundred MB
// and a run is a few events per learner per round.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "benchmarks/sim/event_queue.h"
#include "benchmarks/sim/fleet_config.h"
#include "benchmarks/sim/sim_result.h"
#include "server/round_policy.h"

namespace diloco::sim {

class FleetSim {
 public:
  explicit FleetSim(FleetConfig c);
  SimResult Run();

 private:
  enum class State : uint8_t { kUp, kDown, kJoining };
  struct Fragment {
    uint32_t shard = 0;
    uint32_t round_id = 0;  // the open round's index
    uint64_t version = 0;
    server::OpenRound round;
    uint32_t live_in_round = 0;  // live learners whose push is in the open round
    double weight_sum = 0;
    absl::Time deadline = absl::InfiniteFuture();             // the kDeadline event pending
    std::vector<std::pair<uint32_t, uint32_t>> contributors;  // (learner, generation)
    std::vector<std::pair<uint32_t, uint32_t>> deferred;      // a generation's second push
  };
  struct ShardTimings {  // the shard's moving averages (server/shard.cc's timings_)
    double inner_steps = 0;
    double cycle_s = 0;
    double time_to_quorum_s = 0;
    double ingress_free = 0;  // the time its ingress queue empties
  };

  size_t At(uint32_t l, uint32_t p) const { return size_t{l} * c_.fragments + p; }
  double StepsAt(uint32_t l, double t) const;
  double TimeAtSteps(uint32_t l, double steps) const;
  absl::Time T(double t) const { return absl::UnixEpoch() + absl::Seconds(t); }

  void Handle(const Event& e);
  void Start(uint32_t l, double t);
  void PushDue(uint32_t l, uint32_t p, double t);
  void SendPush(uint32_t l, uint32_t p, double t);
  void Arrive(const Event& e);
  void Admit(uint32_t l, uint32_t gen, uint32_t p, double t);
  void UpdateArrive(uint32_t l, uint32_t p, double t);
  void Fail(uint32_t l, double t);
  void SetLive(uint32_t l, bool live, double t);
  void Evaluate(uint32_t p, absl::Time now);
  void Close(uint32_t p, double t);
  void ScheduleFailure(uint32_t l, double from);
  void OpenWindow(double t);
  void CloseWindow(double t);
  absl::Duration Grace(uint32_t shard) const;
  bool InWindow(double t) const { return t >= t0_ && t < t1_; }

  FleetConfig c_;
  server::RoundPolicy policy_;
  double timeout_s_;
  double t0_, t1_;
  EventQueue q_;
  bool done_ = false;

  // Per learner.
  std::vector<double> step_time_;
  std::vector<uint32_t> gen_;
  std::vector<State> state_;
  std::vector<uint8_t> live_;
  std::vector<uint8_t> waiting_;             // lockstep: answers still awaited
  std::vector<double> steps_base_, t_base_;  // steps(t) = base + (t - t_base) / step time
  std::vector<uint8_t> running_;
  std::vector<double> s0_;         // the incarnation's step count when the window opened (or 0)
  std::vector<uint32_t> fail_k_;   // draws of the failure process so far
  std::vector<uint32_t> sched_i_;  // next explicit failure
  // Per learner and fragment.
  std::vector<double> pushed_cut_;   // the step count the last push was cut at
  std::vector<double> secured_cut_;  // ... the last push a shard took
  std::vector<double> last_admit_;   // when a shard last took this learner's push of p
  std::vector<uint32_t> stamp_;      // round_id + 1 of the round its push is in
  std::vector<uint32_t> stamp_gen_;  // ... and the generation that pushed it
  std::vector<uint64_t> held_version_;
  std::vector<uint8_t> outstanding_, pending_;

  std::vector<Fragment> frags_;
  std::vector<ShardTimings> shards_;
  uint32_t live_count_ = 0;
  double min_step_time_ = 0;
  double r0_ = 0;  // the fleet's no-failure step rate per learner

  double useful_ = 0;
  double tokens_steps_ = 0;  // steps of pushes admitted in the window (x P)
  double share_sum_ = 0;
  uint64_t share_n_ = 0;
  SimResult r_;
};

}  // namespace diloco::sim
