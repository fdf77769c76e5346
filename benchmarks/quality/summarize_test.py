#!/usr/bin/env python3
"""summarize.py's gates fail when they should: each test writes a study's results.tsv with one
planted regression (an arm worse than its gate, an arm that did not run, a full-study target
missed) and checks the exit status and the line naming it; the unplanted study passes."""
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


def run(losses, mode="quick", extra=()):
    with tempfile.TemporaryDirectory() as out:
        with open(os.path.join(out, "results.tsv"), "w") as f:
            f.write("\t".join(COLUMNS) + "\n")
            for arm, loss in losses.items():
                f.write("\t".join([arm, arm[0], "4", "600", "1000", "10", f"{loss:.6f}",
                                   "32768", "1.0837", f"{loss:.6f}"]) + "\n")
        p = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), f"--mode={mode}",
                            *extra, out], capture_output=True, text=True, env={
                                **os.environ, "MPLBACKEND": "Agg"})
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


if __name__ == "__main__":
    unittest.main()
