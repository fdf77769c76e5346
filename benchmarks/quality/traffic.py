"""The convergence study's traffic (summarize.py's --bytes, --bytes_header and group i): bytes.tsv's
row of a fleet arm from its processes' own counters, and the bytes frontier's table, target and
plot. Kept apart from summarize.py's loss table and gates, which import it."""
import csv
import glob
import json
import math
import os

# Group i, the bytes frontier: group d's fleet (synchronous, 4 workers), its loss against the
# bytes each worker sends up per parameter per round. (arm, what it is); every other arm named
# i.* joins the table after these. The ratio is to the int8 arm (a.sync4).
FRONTIER_BASE = "a.sync4"
FRONTIER = [("d.fp32", "fp32 pushes"), ("a.sync4", "int8 pushes (baseline)"),
            ("d.int4", "int4 pushes"), ("i.topk0.03", "top-k 3% pushes"),
            ("i.topk0.01", "top-k 1% pushes"), ("h.down-int4", "int8 pushes, int4 downloads")]
# The target: some arm sends at most this many bytes up per parameter per round and ends within
# this ratio of the int8 arm's held-out loss (full mode; a target, not a quick-mode gate).
FRONTIER_UP_BYTES, FRONTIER_RATIO = 0.05, 1.01

BYTES_COLUMNS = ["arm", "push_codec", "download_codec", "workers", "params", "param_rounds",
                 "up_bytes", "shard_in_bytes", "down_update_bytes", "down_full_bytes",
                 "received_bytes", "up_per_param_round", "down_per_param_round",
                 "received_per_param_round"]
STATS_MARK = "stopping, final checkpoint"


def shard_stats(log):
    """The final Stats JSON a shard prints on SIGTERM ("... stopping, final checkpoint written;
    {...}"), or None."""
    found = None
    with open(log, errors="replace") as f:
        for line in f:
            if STATS_MARK in line and "; {" in line:
                found = json.loads(line[line.index("; {") + 2:])
    return found


def fragment_rounds(show):
    """{fragment: (elements, rounds)} from `diloco-ctl show --store` output (its newest
    checkpoint's table; a fragment at version v has gone through v - 1 rounds)."""
    frags, table = {}, False
    with open(show) as f:
        for line in f:
            cols = line.split()
            if cols[:3] == ["fragment", "version", "elements"]:
                table = True
            elif table and len(cols) == 4 and all(c.isdigit() for c in cols):
                frags[int(cols[0])] = (int(cols[2]), int(cols[1]) - 1)
            elif table:
                table = False
    return frags


def traffic(run_dir, arm, codec, workers, killed=None):
    """bytes.tsv's fields for one fleet arm. Up: the push payload bytes every worker counted as
    sent (SyncStats bytes_sent: each send of a push, resends included). Down: the shards' update
    payload bytes (update_bytes_delta: the quantized updates; update_bytes_full: whole fragments,
    the joins) and the workers' bytes_received (both, the whole run). Per parameter per round: over
    workers x the sum over fragments of elements x rounds (RUN_DIR/shard*.show: diloco-ctl show
    of each shard's store after its final checkpoint, checked against the Stats' rounds). A killed
    worker (`killed`) leaves no done event: its
    arm's per-parameter figures are '-'."""
    stats = []
    for log in sorted(glob.glob(os.path.join(run_dir, "shard*.log"))):
        st = shard_stats(log)
        if st is None:
            raise ValueError(f"{log}: no final Stats (the shard's '{STATS_MARK}' line)")
        stats.append(st)
    if not stats:
        raise ValueError(f"{run_dir}: no shard logs")
    param_rounds = 0
    for i, st in enumerate(stats):
        show = os.path.join(run_dir, f"shard{i}.show")
        frags = fragment_rounds(show) if os.path.exists(show) else {}
        if sorted(frags) != sorted(int(f) for f in st["versions"]):
            raise ValueError(f"{show}: fragments {sorted(frags)}, the shard's Stats name "
                             f"{sorted(st['versions'])}")
        if sum(r for _, r in frags.values()) != st["rounds"]:
            raise ValueError(f"{show}: {sum(r for _, r in frags.values())} rounds in the store, "
                             f"{st['rounds']} in the shard's Stats")
        param_rounds += sum(n * r for n, r in frags.values())
    up = received = 0
    partial = False
    for w in range(workers):
        path = os.path.join(run_dir, f"worker{w}.jsonl")
        done = [e for e in read_jsonl(path) if e["event"] == "done"] if os.path.exists(path) else []
        if glob.glob(os.path.join(run_dir, f"worker{w}.k*.jsonl")):
            partial = True  # it failed and came back: its killed runs' bytes are not counted
        if not done:
            if w == killed:
                partial = True
                continue
            raise ValueError(f"{path}: no done event")
        up += done[-1]["bytes_sent"]
        received += done[-1]["bytes_received"]
    down_codecs = sorted({st["download_codec"] for st in stats})
    delta = sum(st["update_bytes_delta"] for st in stats)
    per = (lambda b: "-") if partial or param_rounds == 0 else (
        lambda b: f"{b / (workers * param_rounds):.5f}")
    return [arm, codec, "/".join(down_codecs), str(workers),
            str(sum(st["params"] for st in stats)), f"{param_rounds:.1f}", str(up),
            str(sum(st["bytes_in"] for st in stats)), str(delta),
            str(sum(st["update_bytes_full"] for st in stats)), str(received), per(up), per(delta),
            per(received)]


def read_bytes(out):
    """bytes.tsv as {arm: row}, {} when the study wrote none."""
    path = os.path.join(out, "bytes.tsv")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["arm"]: r for r in csv.DictReader(f, delimiter="\t")}


def figure(row, column):
    """A per-parameter figure of bytes.tsv as a float (nan for '-' or a missing row)."""
    try:
        return float(row[column]) if row else math.nan
    except ValueError:
        return math.nan


def run_up_bytes(row):
    """Bytes a worker sent up per parameter over its whole run (every arm trains the same steps,
    so arms of different H compare here at equal steps; per round they do not)."""
    try:
        return float(row["up_bytes"]) / (float(row["params"]) * float(row["workers"]))
    except (TypeError, KeyError, ValueError, ZeroDivisionError):
        return math.nan


def frontier_arms(loss):
    named = [a for a, _ in FRONTIER]
    return [a for a in named if a in loss] + sorted(
        a for a in loss if a.startswith("i.") and a not in named)


def frontier(loss, traffic_rows):
    """(table lines, target line, missed) of group i; ([], None, []) when it did not run."""
    if not any(a.startswith("i.") for a in loss):
        return [], None, []
    base = loss.get(FRONTIER_BASE)
    lines = ["", f"Group i, the bytes frontier (ratio to the int8 arm {FRONTIER_BASE}; bytes per "
             "parameter per round from the workers' bytes_sent (up) and the shards' "
             "update_bytes_delta (down); target: some arm <= "
             f"{FRONTIER_UP_BYTES} B up within {FRONTIER_RATIO} of int8)", "",
             "| arm | pushes | downloads | held-out loss | ratio to int8 | B up/param/round | "
             "B down/param/round | B received/param/round (joins included) | "
             "B up/param per worker, whole run |",
             "|---|---|---|---|---|---|---|---|---|"]
    best = None  # the smallest-upload arm within the ratio, among those under the byte bound
    for arm in frontier_arms(loss):
        t = traffic_rows.get(arm)
        ratio = loss[arm] / base if base else math.nan
        up = figure(t, "up_per_param_round")
        down = figure(t, "down_per_param_round")
        recv = figure(t, "received_per_param_round")
        push = t["push_codec"] if t else "?"
        dl = t["download_codec"] if t else "?"
        lines.append(f"| {arm} | {push} | {dl} | {loss[arm]:.4f} | {ratio:.4f} | {up:.4f} | "
                     f"{down:.4f} | {recv:.4f} | {run_up_bytes(t):.2f} |")
        if up <= FRONTIER_UP_BYTES and ratio <= FRONTIER_RATIO and (best is None or up < best[1]):
            best = (arm, up, ratio)
    if base is None:
        return lines, (f"  missed  frontier: the int8 arm {FRONTIER_BASE} did not run (no "
                       "ratio)"), [f"frontier: {FRONTIER_BASE} did not run"]
    if best:
        target = (f"  met     frontier: {best[0]} sends {best[1]:.4f} B/param/round up "
                  f"(<= {FRONTIER_UP_BYTES}) at {best[2]:.4f} of int8 (<= {FRONTIER_RATIO})")
        return lines, target, []
    close = [(figure(traffic_rows.get(a), "up_per_param_round"), loss[a] / base, a)
             for a in frontier_arms(loss) if base]
    under = sorted((r, a, u) for u, r, a in close if u <= FRONTIER_UP_BYTES)
    gap = (f"the best arm at <= {FRONTIER_UP_BYTES} B up is {under[0][1]} at "
           f"{under[0][0]:.4f} of int8" if under else f"no arm sends <= {FRONTIER_UP_BYTES} B up")
    target = (f"  missed  frontier: {gap} (target <= {FRONTIER_RATIO})")
    return lines, target, [f"frontier: {gap}, not <= {FRONTIER_RATIO}"]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def frontier_points(loss, traffic_rows):
    """Group i's plotted points: (arm, bytes up per parameter per round, loss), arms with a
    measured figure only."""
    pts = []
    for arm in frontier_arms(loss):
        up = figure(traffic_rows.get(arm), "up_per_param_round")
        if up > 0:
            pts.append((arm, up, loss[arm]))
    return pts


def plot_frontier(out, loss, traffic_rows):
    """frontier.png: group i's held-out loss against bytes up per parameter per round for the
    push codecs (left, int8 downloads; the target's corner drawn), against the bytes a worker
    sent up per parameter over its whole run (middle: the arms that push at another H compare
    here, at equal steps) and against bytes down for the download codecs (right, int8 pushes),
    log x; nothing when group i did not run."""
    pts = frontier_points(loss, traffic_rows)
    if not any(a.startswith("i.") for a, _, _ in pts):
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax, aw, ad) = plt.subplots(1, 3, figsize=(16, 4.2), sharey=True)
    xs = {ax: [], aw: [], ad: []}  # each panel's x values, for its limits

    def point(panel, x, y, label, marker="o"):
        xs[panel].append(x)
        panel.plot([x], [y], marker, markersize=7)
        panel.annotate(label, (x, y), fontsize=7, xytext=(5, 4), textcoords="offset points")

    for arm, up, l in pts:
        codec = traffic_rows[arm]["push_codec"]
        down = traffic_rows[arm]["download_codec"]
        other = not down.startswith("int8")  # another download codec: the right panel's
        if not other:
            point(ax, up, l, f"{arm}\n{codec}")
            whole = run_up_bytes(traffic_rows[arm])
            if whole > 0:
                point(aw, whole, l, f"{arm}\n{codec}")
        d = figure(traffic_rows.get(arm), "down_per_param_round")
        if d > 0 and codec.startswith("int8"):  # the download arms: int8 pushes
            point(ad, d, l, f"{arm}\ndown {down}", "s" if other else "o")
    if FRONTIER_BASE in loss:
        for a_ in (ax, aw, ad):
            a_.axhline(loss[FRONTIER_BASE] * FRONTIER_RATIO, ls="--", lw=0.8, color="gray",
                       label=f"int8 loss x {FRONTIER_RATIO}")
    ax.axvline(FRONTIER_UP_BYTES, ls=":", lw=0.8, color="gray",
               label=f"{FRONTIER_UP_BYTES} B/param/round")
    xs[ax].append(FRONTIER_UP_BYTES)  # the bound stays in view
    ax.set_ylabel("held-out loss of the export, nats/token")
    for panel, xlabel, title in (
            (ax, "bytes sent up per parameter per round (workers' bytes_sent), log",
             "pushes (int8 downloads)"),
            (aw, "bytes sent up per parameter per worker over the run (equal steps), log",
             "pushes, whole run: arms of another H compare here"),
            (ad, "update bytes down per parameter per round (shards' counters), log",
             "downloads (int8 pushes)")):
        if xs[panel]:
            panel.set_xscale("log")
            panel.set_xlim(min(xs[panel]) / 2, max(xs[panel]) * 4)
        panel.set_xlabel(xlabel)
        panel.set_title(title, fontsize=9)
        panel.legend(fontsize=7)
        panel.grid(alpha=0.3, which="both")
    fig.suptitle("group i: the bytes frontier (sync DiLoCo, 4 workers)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "frontier.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
