#!/usr/bin/env python3
"""wanlib.summarize and wanlib.row count what the rows claim: pushes due under the H in force
over each progress interval, less the steps an aligned push waited (docs/worker.md,
"Alignment"), so a worker that keeps its aligned schedule reads 1.0 and one that skips pushes
reads less; bytes per parameter per round come from the counters moved after the join. Each
test writes a worker's progress and done events as diloco-worker does (no fleet, no network)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wanlib  # noqa: E402

FRAGMENTS, H, STEPS = 4, 100, 2000


def fleet(h="auto"):
    return wanlib.Fleet("tiny", FRAGMENTS, "auto" if h == "auto" else "int8:256", h, 1, 1, 60,
                        100, True)


def write_worker(out, pushes, aligned, params=1000):
    """One worker of STEPS steps at H, with `pushes` pushes and `aligned` aligned steps, its
    progress every 250 steps (the counters growing evenly after a join of 0 steps)."""
    with open(os.path.join(out, "worker0.log"), "w") as f:
        f.write(f"model ready ({params} params)\n")
    events = []
    for step in range(0, STEPS + 1, 250):
        frac = step / STEPS
        events.append({"event": "progress", "step": step, "inner_steps": H,
                       "pushes": round(pushes * frac), "aligned_steps": round(aligned * frac),
                       "updates_delta": round(pushes * frac), "updates_full": 0,
                       "bytes_sent": round(1000 * pushes * frac),
                       "bytes_received": round(500 * pushes * frac)})
    events.append({"event": "done", "steps": STEPS, "pushes": pushes, "applied": pushes,
                   "aligned_steps": aligned, "utilization": 0.99, "updates_delta": pushes,
                   "updates_full": 0, "bytes_sent": 1000 * pushes, "bytes_received": 500 * pushes,
                   "codec": "int8:256", "link_choices": 0})
    with open(os.path.join(out, "worker0.jsonl"), "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def summarize(pushes, aligned, h="auto"):
    with tempfile.TemporaryDirectory() as out:
        write_worker(out, pushes, aligned)
        f = fleet(h)
        synced = wanlib.summarize(out, f, [0])
        return synced["workers"][0], wanlib.row("p", f, synced, None)


class PushesDue(unittest.TestCase):
    def test_an_aligned_schedule_kept_reads_one(self):
        # Each fragment's pushes waited 400 steps in all: 4 x 2000 - 1600 steps at H = 100 are
        # 64 pushes due, less (F - 1) / 2 for the stagger of the first ones.
        aligned = 1600
        due = (FRAGMENTS * STEPS - aligned) / H - (FRAGMENTS - 1) / 2
        w, r = summarize(round(due), aligned)
        self.assertAlmostEqual(w["due_pushes"], due, places=6)
        self.assertAlmostEqual(r["push_ratio"], 1.0, delta=0.01)
        # Settled: since the last change of H (none: from the first progress event), without the
        # first pushes' stagger.
        self.assertAlmostEqual(w["settled_push_ratio"],
                               round(round(due) / ((FRAGMENTS * STEPS - aligned) / H), 3))

    def test_skipped_pushes_read_less_than_one(self):
        aligned = 1600
        due = (FRAGMENTS * STEPS - aligned) / H - (FRAGMENTS - 1) / 2
        _, r = summarize(round(0.8 * due), aligned)
        self.assertAlmostEqual(r["push_ratio"], 0.8, delta=0.01)

    def test_without_alignment_every_h_steps_is_due(self):
        due = FRAGMENTS * STEPS / H - (FRAGMENTS - 1) / 2
        w, r = summarize(round(due), 0)
        self.assertAlmostEqual(w["due_pushes"], due, places=6)
        self.assertAlmostEqual(r["push_ratio"], 1.0, delta=0.01)

    def test_a_fixed_h_takes_the_aligned_steps_out_too(self):
        aligned = 1600
        # Fragment i first pushes after i H / F steps, then every H: 20 + 19 + 19 + 19 = 77.
        due = 77 - aligned / H
        _, r = summarize(round(due), aligned, h=H)
        self.assertAlmostEqual(r["push_ratio"], round(due) / due, places=3)

    def test_bytes_per_parameter_per_round(self):
        _, r = summarize(60, 0)
        # 1000 bytes up per push of a fragment of 1000 / 4 parameters: 4 bytes per parameter.
        self.assertAlmostEqual(r["bytes_up_per_param_round"], 4.0, places=3)
        self.assertAlmostEqual(r["bytes_down_per_param_round"], 2.0, places=3)


if __name__ == "__main__":
    unittest.main()
