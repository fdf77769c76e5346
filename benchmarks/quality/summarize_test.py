#!/usr/bin/env python3
"""summarize.py's gates fail when they should: each test writes a study's results.tsv with one
planted regression (an arm worse than its gate, an arm that did not run, a full-study target
missed) and checks the exit status and the line naming it; the unplanted study passes. The
traffic figures (--bytes) come out of planted counters exactly, and refuse a run whose
counters are missing or disagree; group i's table and plot show the planted frontier."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import summarize  # noqa: E402

COLUMNS = "arm group workers steps tokens wall_s loss eval_tokens floor curve_loss".split()


def gate(arm):
    return next(g for g in summarize.QUICK_GATES if g[0] == arm)


def passing_quick():
    """Losses that meet every quick gate, each well inside its bound."""
    lone, lone_g = 1.6563, 1.5954
    sync = lone * (gate("a.sync4")[3] - 0.002)
    return {"a.lone4x": lone, "a.sync4": sync,
            "c.async4": sync * (gate("c.async4")[3] - 0.01),
            "c.naive4": sync * (gate("c.naive4")[3] * 2),
            "g.lone.1": lone_g, "g.main.1": lone_g * (gate("g.main.1")[3] - 0.02)}


def run(losses, mode="quick", extra=(), traffic=None, files=None, prepare=None):
    """summarize.py over a study of these losses (and bytes.tsv rows: {arm: (push codec,
    download codec, up, down, received per param per round)}); `files` receives the names of
    the files it wrote; `prepare(out)` writes more of the study first."""
    with tempfile.TemporaryDirectory() as out:
        if prepare is not None:
            prepare(out)
        with open(os.path.join(out, "results.tsv"), "w") as f:
            f.write("\t".join(COLUMNS) + "\n")
            for arm, loss in losses.items():
                f.write("\t".join([arm, arm[0], "4", "600", "1000", "10", f"{loss:.6f}",
                                   "32768", "1.0837", f"{loss:.6f}"]) + "\n")
        if traffic is not None:
            with open(os.path.join(out, "bytes.tsv"), "w") as f:
                f.write("\t".join(summarize.BYTES_COLUMNS) + "\n")
                for arm, (push, down_codec, up, down, recv) in traffic.items():
                    up_bytes = f"{float(up) * 4 * 3617280:.0f}"  # 4 workers, 30 rounds
                    f.write("\t".join([arm, push, down_codec, "4", "120576", "3617280", up_bytes,
                                       "0", "0", "0", "0", up, down, recv]) + "\n")
        p = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), f"--mode={mode}",
                            *extra, out], capture_output=True, text=True, env={
                                **os.environ, "MPLBACKEND": "Agg"})
        if files is not None:
            for n in os.listdir(out):
                with open(os.path.join(out, n), "rb") as f:
                    files[n] = f.read(8)
        return p.returncode, p.stdout + p.stderr


class QuickGates(unittest.TestCase):
    def test_unplanted_study_passes(self):
        rc, text = run(passing_quick())
        self.assertEqual(rc, 0, text)
        self.assertIn("0 missed", text)

    def test_each_gate_fails_on_its_planted_regression(self):
        for arm, base, kind, bound, _ in summarize.QUICK_GATES:
            losses = passing_quick()
            # Just past the bound, on the failing side.
            losses[arm] = losses[base] * (bound * 1.002 if kind == "max" else bound * 0.998)
            rc, text = run(losses)
            self.assertEqual(rc, 1, f"{arm}: {text}")
            self.assertIn(f"gate {arm}/{base}", text)

    def test_an_arm_that_did_not_run_fails_its_gate(self):
        losses = passing_quick()
        del losses["g.main.1"]
        rc, text = run(losses)
        self.assertEqual(rc, 1, text)
        self.assertIn("gate g.main.1/g.lone.1: not run", text)

    def test_only_the_groups_that_ran_are_gated(self):
        losses = {k: v for k, v in passing_quick().items() if k.startswith("a.")}
        rc, text = run(losses)
        self.assertEqual(rc, 0, text)

    def test_smoke_mode_reports_only(self):
        losses = passing_quick()
        losses["c.async4"] = losses["a.sync4"] * 3
        rc, text = run(losses, mode="smoke")
        self.assertEqual(rc, 0, text)


class FullTargets(unittest.TestCase):
    def test_a_missed_target_fails_the_full_study(self):
        losses = {"a.lone4x": 1.3377, "a.sync4": 1.3377 * 1.03}  # target <= 1.00
        rc, text = run(losses, mode="full")
        self.assertEqual(rc, 1, text)
        self.assertIn("missed  a.sync4/a.lone4x", text)

    def test_met_targets_pass_and_report_only_reports(self):
        losses = {"a.lone4x": 1.3377, "a.sync4": 1.3377 * 0.99}
        rc, text = run(losses, mode="full")
        self.assertEqual(rc, 0, text)
        self.assertIn("met     a.sync4/a.lone4x", text)
        losses["a.sync4"] = 1.3377 * 1.03
        rc, text = run(losses, mode="full", extra=["--report_only"])
        self.assertEqual(rc, 0, text)
        self.assertIn("--report_only", text)

    def test_a_paired_target_is_judged_against_its_own_baseline(self):
        # e.sync8-drop50 is compared with e.sync8, not with group e's c.async4.
        losses = {"c.async4": 1.30, "e.sync8": 1.34, "e.sync8-drop50": 1.34 * 1.03}
        rc, text = run(losses, mode="full")
        self.assertEqual(rc, 1, text)
        self.assertIn("missed  e.sync8-drop50/e.sync8 = 1.0300", text)
        losses["e.sync8-drop50"] = 1.34 * 1.02
        rc, text = run(losses, mode="full")
        self.assertEqual(rc, 0, text)
        self.assertIn("met     e.sync8-drop50/e.sync8 = 1.0200", text)


def stats_line(shard, rounds, versions, params, bytes_in, delta, full, codec="int8:256"):
    return (f"diloco-server[{shard}]: stopping, final checkpoint written; " + json.dumps({
        "shard": shard, "rounds": rounds, "bytes_in": bytes_in, "update_bytes_full": full,
        "update_bytes_delta": delta, "versions": versions, "params": params,
        "download_codec": codec}) + "\n")


def show_text(frags):
    """diloco-ctl show's newest-checkpoint table for {fragment: (version, elements)}."""
    rows = "".join(f"  {f:8d} {v:8d} {n:11d} {8 * n:12d}\n" for f, (v, n) in frags.items())
    return ("store      /x\nnewest checkpoint 3:\n  fragment  version    elements        bytes\n"
            + rows + "  dedup entries 8\n")


class Traffic(unittest.TestCase):
    """summarize.py --bytes on a planted run: 2 shards, fragments of 1000 / 3000 / 500 / 500
    elements through 10 / 10 / 9 / 10 rounds (version - 1), 2 workers."""

    def write_run(self, d, stats0=True, rounds0=19, killed=None):
        with open(os.path.join(d, "shard0.log"), "w") as f:
            f.write("diloco-server: shard 0/2 on tcp://127.0.0.1:1\n")
            if stats0:
                f.write(stats_line(0, rounds0, {"0": 11, "2": 10}, 1500, 99, 7000, 500))
        with open(os.path.join(d, "shard1.log"), "w") as f:
            f.write(stats_line(1, 20, {"1": 11, "3": 11}, 3500, 99, 5000, 1500))
        with open(os.path.join(d, "shard0.show"), "w") as f:
            f.write(show_text({0: (11, 1000), 2: (10, 500)}))
        with open(os.path.join(d, "shard1.show"), "w") as f:
            f.write(show_text({1: (11, 3000), 3: (11, 500)}))
        for w, (sent, recv) in enumerate([(3000, 9000), (4000, 9500)]):
            with open(os.path.join(d, f"worker{w}.jsonl"), "w") as f:
                f.write(json.dumps({"event": "progress", "step": 5, "bytes_sent": 1}) + "\n")
                if w != killed:
                    f.write(json.dumps({"event": "done", "steps": 10, "bytes_sent": sent,
                                        "bytes_received": recv}) + "\n")

    def traffic(self, d, *extra):
        p = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), "--bytes",
                            "--arm=i.x", "--codec=topk:0.01", "--workers=2", *extra, d],
                           capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def test_figures_are_the_counters_over_elements_times_rounds(self):
        with tempfile.TemporaryDirectory() as d:
            self.write_run(d)
            rc, out, err = self.traffic(d)
            self.assertEqual(rc, 0, err)
            row = dict(zip(summarize.BYTES_COLUMNS, out.rstrip("\n").split("\t")))
            # elements x rounds: 1000*10 + 500*9 + 3000*10 + 500*10 = 49,500; x 2 workers.
            self.assertEqual(row["param_rounds"], "49500.0")
            self.assertEqual(row["up_bytes"], "7000")
            self.assertAlmostEqual(float(row["up_per_param_round"]), 7000 / 99000, places=5)
            self.assertAlmostEqual(float(row["down_per_param_round"]), 12000 / 99000, places=5)
            self.assertAlmostEqual(float(row["received_per_param_round"]), 18500 / 99000,
                                   places=5)
            self.assertEqual(row["down_full_bytes"], "2000")
            self.assertEqual((row["push_codec"], row["download_codec"], row["params"]),
                             ("topk:0.01", "int8:256", "5000"))

    def test_a_shard_without_its_final_stats_fails(self):
        with tempfile.TemporaryDirectory() as d:
            self.write_run(d, stats0=False)
            rc, _, err = self.traffic(d)
            self.assertEqual(rc, 1)
            self.assertIn("shard0.log: no final Stats", err)

    def test_rounds_that_disagree_with_the_store_fail(self):
        with tempfile.TemporaryDirectory() as d:
            self.write_run(d, rounds0=20)
            rc, _, err = self.traffic(d)
            self.assertEqual(rc, 1)
            self.assertIn("19 rounds in the store, 20 in the shard's Stats", err)

    def test_a_worker_without_done_fails_unless_it_was_killed(self):
        with tempfile.TemporaryDirectory() as d:
            self.write_run(d, killed=1)
            rc, _, err = self.traffic(d)
            self.assertEqual(rc, 1)
            self.assertIn("worker1.jsonl: no done event", err)
            rc, out, err = self.traffic(d, "--killed=1")
            self.assertEqual(rc, 0, err)
            row = dict(zip(summarize.BYTES_COLUMNS, out.rstrip("\n").split("\t")))
            self.assertEqual(row["up_per_param_round"], "-")


def frontier_study(topk_ratio, topk_up="0.0210"):
    base = 1.3687
    losses = {"a.sync4": base, "d.fp32": base * 0.999, "d.int4": base * 1.002,
              "i.topk0.03": base * 1.004, "i.topk0.01": base * topk_ratio,
              "h.down-int4": base * 1.002}
    traffic = {"a.sync4": ("int8:256", "int8:256", "1.01569", "1.01569", "1.15"),
               "d.fp32": ("fp32", "int8:256", "4.00000", "1.01569", "1.15"),
               "d.int4": ("int4", "int8:256", "0.51569", "1.01569", "1.15"),
               "i.topk0.03": ("topk:0.03", "int8:256", "0.05400", "1.01569", "1.15"),
               "i.topk0.01": ("topk:0.01", "int8:256", topk_up, "1.01569", "1.15"),
               "h.down-int4": ("int8:256", "int4:256", "1.01569", "0.51569", "0.65")}
    return losses, traffic


class Frontier(unittest.TestCase):
    def test_the_table_and_plot_show_the_frontier_and_its_target_met(self):
        losses, traffic = frontier_study(1.006)
        files = {}
        rc, text = run(losses, mode="full", traffic=traffic, files=files)
        self.assertEqual(rc, 0, text)
        # The last column: bytes up per parameter per worker over the run (0.0210 x 30 rounds).
        self.assertIn("| i.topk0.01 | topk:0.01 | int8:256 | 1.3769 | 1.0060 | 0.0210 | 1.0157 | "
                      "1.1500 | 0.63 |", text)
        self.assertIn("| h.down-int4 | int8:256 | int4:256 | 1.3714 | 1.0020 | 1.0157 | 0.5157 |",
                      text)
        self.assertIn("met     frontier: i.topk0.01 sends 0.0210 B/param/round up", text)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("no matplotlib: the plot is not drawn")
        self.assertEqual(files.get("frontier.png", b"")[:4], b"\x89PNG", sorted(files))

    def test_a_frontier_arm_past_the_ratio_misses_the_target(self):
        losses, traffic = frontier_study(1.02)
        rc, text = run(losses, mode="full", traffic=traffic)
        self.assertEqual(rc, 1, text)
        self.assertIn("missed  frontier: the best arm at <= 0.05 B up is i.topk0.01 at 1.0200",
                      text)

    def test_no_arm_under_the_byte_bound_misses_the_target(self):
        losses, traffic = frontier_study(1.0, topk_up="0.0600")
        rc, text = run(losses, mode="full", traffic=traffic)
        self.assertEqual(rc, 1, text)
        self.assertIn("missed  frontier: no arm sends <= 0.05 B up", text)

    def test_without_the_int8_arm_the_target_says_so(self):
        losses, traffic = frontier_study(1.0)
        del losses["a.sync4"]
        rc, text = run(losses, mode="full", traffic=traffic)
        self.assertEqual(rc, 1, text)
        self.assertIn("missed  frontier: the int8 arm a.sync4 did not run", text)

    def test_no_group_i_no_frontier(self):
        losses = {"a.lone4x": 1.3377, "a.sync4": 1.3377 * 0.99}
        files = {}
        rc, text = run(losses, mode="full", files=files)
        self.assertEqual(rc, 0, text)
        self.assertNotIn("frontier", text)
        self.assertNotIn("frontier.png", files)


def write_events(path, events, cut=""):
    with open(path, "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
        f.write(cut)


def pushes(fragment_seq_steps, answer):
    """push events, each followed by its answer event (None: no answer, the process died)."""
    out = []
    for (fragment, seq, steps), a in zip(fragment_seq_steps, answer):
        out.append({"event": "push", "fragment": fragment, "seq": seq, "steps": steps})
        if a:
            out.append({"event": a, "fragment": fragment, "seq": seq})
    return out


class FailureFigures(unittest.TestCase):
    """The failure arms' figures from planted killed processes: a killed process loses the
    steps no applied push carried (per fragment, averaged); goodput is the rest over workers x
    wall x the baseline's step rate."""

    def test_lost_steps_goodput_and_rate_from_planted_processes(self):
        with tempfile.TemporaryDirectory() as d:
            # Worker 0 killed twice. First process: steps 1..100; fragment 0 got 50 of its 100
            # steps applied, fragment 1 all 100: 75 carried, 25 lost. Its last line was being
            # written when it died.
            write_events(os.path.join(d, "worker0.k0.jsonl"),
                         [{"event": "progress", "step": 60}] +
                         pushes([(0, 1, 50), (1, 1, 50), (0, 2, 50), (1, 2, 50)],
                                ["applied", "applied", None, "applied"]) +
                         [{"event": "progress", "step": 100}], cut='{"event": "prog')
            # Second: steps 101..180; 40 steps carried on each fragment (one answered Duplicate,
            # applied before): 40 lost.
            write_events(os.path.join(d, "worker0.k1.jsonl"),
                         pushes([(0, 3, 40), (1, 3, 40)], ["duplicate", "applied"]) +
                         [{"event": "progress", "step": 180}])
            kills, per_round, lost, goodput = summarize.failure_figures(
                d, workers=2, inner=50, steps=800, wall=10, base_steps=800, base_wall=8)
        self.assertEqual(kills, 2)
        self.assertEqual(lost, 65)
        # Baseline: 800 steps / (2 workers x 8 s) = 50 steps/s, a round of 50 steps = 1 s.
        self.assertAlmostEqual(per_round, 2 * 1.0 / 10)
        self.assertAlmostEqual(goodput, (800 - 65) / (2 * 10 * 50))

    def test_a_damaged_line_before_the_last_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "worker0.k0.jsonl"), "w") as f:
                f.write('{"event": "prog\n{"event": "progress", "step": 5}\n')
            with self.assertRaises(ValueError):
                summarize.failure_figures(d, 1, 50, 100, 10, 100, 10)

    def test_the_study_reports_the_failure_arms_and_misses_a_low_goodput(self):
        def killed_process(out):
            logs = os.path.join(out, "logs", "e.fail")
            os.makedirs(logs)
            write_events(os.path.join(logs, "worker0.k0.jsonl"),
                         [{"event": "progress", "step": 1}])

        # The arm's 1000 tokens are 1.95 steps of 512 tokens: one lost, goodput 0.49.
        rc, text = run({"a.lone4x": 1.3377, "c.async4": 1.39, "e.fail": 1.40}, mode="full",
                       prepare=killed_process)
        self.assertEqual(rc, 1, text)
        self.assertIn("| e.fail | 1 | ", text)
        self.assertIn("missed  e.fail goodput = 0.488", text)


if __name__ == "__main__":
    unittest.main()
