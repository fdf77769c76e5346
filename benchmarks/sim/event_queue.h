// The simulator's clock: events in a priority queue, earliest first, ties in the order they were
// scheduled (so a run is a function of its configuration alone). 32 bytes an event.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

namespace diloco::sim {

enum class Ev : uint8_t {
  kPushDue,       // a learner's fragment (or, lockstep, all of them: frag = kAll) is due
  kPushArrive,    // a push's last byte reached its shard
  kPushAdmit,     // the shard took it from its ingress queue
  kUpdateArrive,  // a round's answer reached a contributor
  kFail,
  kRestart,
  kJoined,
  kUnlive,    // a dead learner's worker timeout ran out
  kDeadline,  // a fragment's round may close (server::CloseDeadline)
  kWindowOpen,
  kWindowClose,
};

struct Event {
  double t = 0;
  uint64_t seq = 0;
  uint32_t who = 0;  // learner, or fragment for kDeadline
  uint32_t gen = 0;  // the learner's incarnation the event belongs to
  uint16_t frag = 0;
  Ev type = Ev::kPushDue;
};

class EventQueue {
 public:
  void Push(double t, Ev type, uint32_t who, uint32_t gen = 0, uint16_t frag = 0) {
    q_.push(Event{t, next_++, who, gen, frag, type});
  }
  bool Empty() const { return q_.empty(); }
  Event Pop() {
    Event e = q_.top();
    q_.pop();
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.t != b.t ? a.t > b.t : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> q_;
  uint64_t next_ = 0;
};

}  // namespace diloco::sim
