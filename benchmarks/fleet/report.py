"""diloco-bench's outputs from its results: table.md, the PNG plots, and the check of its own
output (every expected row present, every number finite, every plot written) that quick mode
runs in deploy/test.sh. Speed is never checked: these are measurements, not tests."""
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PLOTS = ["scaling.png", "utilization.png", "failure.png"]
THROUGHPUT_KEYS = ["rounds_per_s", "params_merged_per_s", "up_b_per_param_round",
                   "down_b_per_param_round", "wire_gbps", "merged_fp32_gbps",
                   "shard_resident_b_per_param", "shard_cpu_ns_per_param", "wall_ns_per_param"]


def f(x, spec=".3g"):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _label(params):
    return f"{params / 1e9:.2g}B" if params >= 1e9 else f"{params / 1e6:.3g}M"


def not_measured(r):
    """Why a row has no figures ("" when it has them), on one line: an error's first (a crashed
    process's log tail, on the lines after, is printed whole by check's caller)."""
    if "error" in r:
        return f"failed: {r['error'].splitlines()[0]}"
    return f"skipped: {r['skipped']}" if "skipped" in r else ""


def table(res):
    c = res["ceilings"]
    L = [f"diloco-bench --mode={res['mode']} ({res['started']}; {res['machine']})", "",
         f"Ceilings, measured in this run: memcpy {c['memcpy_gbps']:.2f} GB/s (bytes read + "
         f"written), raw ZeroMQ loopback {c['zmq_raw_gbps']:.2f} GB/s (4 MiB frames). Download "
         f"codec flag: {'yes' if res['download_flag'] else 'missing, fp32 downloads only'}.", "",
         "### Throughput (learners of 10 ms steps, H = 10, 8 fragments: more than the path can "
         "take)", "",
         "| model | shards | workers | push | down | rounds/s | params merged/s | B/param/round "
         "up | down | wire GB/s (/zmq) | merged fp32 GB/s (/memcpy) | push to adopt p50 / p99 ms "
         "| shard B/param | shard CPU ns/param |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["throughput"]:
        head = (f"| {_label(r['params'])} | {r['shards']} | {r['workers']} | {r['codec']} | "
                f"{r['download_codec']} |")
        if not_measured(r):
            L.append(head + f" {not_measured(r)} |" + " |" * 8)
            continue
        L.append(head + f" {f(r['rounds_per_s'])} | {f(r['params_merged_per_s'])} | "
                 f"{f(r['up_b_per_param_round'])} | {f(r['down_b_per_param_round'])} | "
                 f"{f(r['wire_gbps'])} ({f(r['wire_ratio_zmq'], '.2f')}) | "
                 f"{f(r['merged_fp32_gbps'])} ({f(r['merged_ratio_memcpy'], '.3f')}) | "
                 f"{f(r['push_to_adopt_p50_ms'])} / {f(r['push_to_adopt_p99_ms'])} | "
                 f"{f(r['shard_resident_b_per_param'], '.1f')} | "
                 f"{f(r['shard_cpu_ns_per_param'])} |")
    L += ["", "### Utilization (time in steps / wall time, median over the learners; ceiling: "
          "the same learners without sync)", "",
          "| link | model | shards | workers | H | push / down | step | utilization (min) | "
          "ceiling | ratio | push to adopt p50 / p99 ms | applied |", "|---" * 12 + "|"]
    for r in res["utilization"] + res["wan"]["rows"]:
        model = _label(r["params"]) if "params" in r else r.get("model", "-")
        link = {"none": "no sync"}.get(r.get("link"), r.get("link", r.get("profile")))
        codec = r.get("codec", "-")
        if r.get("download_codec", "-") != "-":
            codec += f" / {r['download_codec']}"
        base = (f"| {link} | {model} | {r.get('shards', '-')} | "
                f"{r.get('workers', '-')} | {r['H']} | {codec} | "
                f"{r.get('step_time', '-')} |")
        if not_measured(r):
            L.append(base + f" {not_measured(r)} |" + " |" * 4)
            continue
        util, ceil = r.get("utilization"), r.get("ceiling")
        L.append(base + f" {f(util)} ({f(r.get('utilization_min'))}) | {f(ceil)} | "
                 f"{f(util / ceil if util is not None and ceil else None)} | "
                 f"{f(r.get('push_to_adopt_p50_ms'))} / {f(r.get('push_to_adopt_p99_ms'))} | "
                 f"{f(r.get('applied'))} |")
    if res["wan"]["skipped"]:
        L += ["", f"WAN rows: skipped ({res['wan']['skipped']})"]
    fl = res["failure"]
    if "error" in fl:
        return "\n".join(L + ["", f"### Failure run: {not_measured(fl)}"]) + "\n"
    L += ["", f"### Failure: {fl['workers']} learners, 2 shards; kill -9 of worker "
          f"{fl['killed_worker']} at {fl['worker_killed_at_s']} s and of shard "
          f"{fl['killed_shard']} at {fl['shard_killed_at_s']} s, restarted from its store at "
          f"{fl['shard_restarted_at_s']:.1f} s", "",
          "| survivor | median steps/s | lowest / median | longest below "
          f"{fl['slow_fraction']:.0%} of median, s |", "|---|---|---|---|"]
    for s in fl["survivors"]:
        L.append(f"| worker {s['worker']} | {f(s['median_steps_per_s'])} | "
                 f"{f(s['min_ratio'], '.2f')} | {f(s['longest_slow_s'], '.1f')} |")
    verdict = "**stalled**" if fl["stalled"] else "nothing stalled"
    L += ["", f"{verdict}: no surviving learner's step rate stayed below "
          f"{fl['slow_fraction']:.0%} of its own median for longer than the shard's downtime "
          f"({fl['shard_downtime_s']:.1f} s)" if not fl["stalled"] else
          f"{verdict}: a surviving learner stayed below {fl['slow_fraction']:.0%} of its median "
          f"for longer than the shard's downtime ({fl['shard_downtime_s']:.1f} s)",
          f"shard 0 closed {fl['shard0_rounds_while_shard1_down']} rounds while shard 1 was "
          f"down; the restarted shard 1 closed {fl['shard1_rounds_after_restart']} after; "
          f"{fl['survivors_saw_restart']} of {len(fl['survivors'])} survivors saw the restart."]
    return "\n".join(L) + "\n"


def _baseline(rows, **fixed):
    out = []
    for r in rows:
        if not_measured(r) or r["codec"] != "int8" or r["download_codec"] != "fp32":
            continue
        if all(r[k] == v for k, v in fixed.items()):
            out.append(r)
    return out


def plot_scaling(res, path):
    rows = res["throughput"]
    small = min((r["params"] for r in rows if not not_measured(r)), default=0)
    panels = [("workers", _baseline([r for r in rows if r["params"] == small], shards=2)),
              ("shards", _baseline([r for r in rows if r["params"] == small], workers=4)),
              ("params", _baseline(rows, shards=2, workers=1))]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (x, pts) in zip(axes, panels):
        if not pts:
            ax.text(0.5, 0.5, "no rows in this mode", ha="center", transform=ax.transAxes)
            continue
        pts = sorted(pts, key=lambda r: r[x])
        for key, name in [("wall_ns_per_param", "wall time"),
                          ("shard_cpu_ns_per_param", "shards' CPU time")]:
            ax.plot([r[x] for r in pts], [r[key] for r in pts], "o-", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel({"params": "model parameters"}.get(x, x))
        ax.set_ylabel("ns per parameter merged")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    axes[0].set_title(f"against workers ({_label(small)}, 2 shards)")
    axes[1].set_title(f"against shards ({_label(small)}, 4 workers)")
    axes[2].set_title("against model size (1 worker, 2 shards)")
    fig.suptitle("Cost of the full path (int8 pushes, fp32 downloads): lower is better")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_utilization(res, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    loop = [r for r in res["utilization"] if r["link"] == "loopback" and not not_measured(r)]
    ax.plot([r["H"] for r in loop], [r["utilization"] for r in loop], "o-", label="loopback")
    ceiling = res["utilization"][0]
    if not not_measured(ceiling):
        ax.axhline(ceiling["utilization"], ls="--", color="gray", label="no sync (ceiling)")
    profiles = sorted({r["profile"] for r in res["wan"]["rows"]})
    for p in profiles:
        pts = sorted((r for r in res["wan"]["rows"]
                      if r["profile"] == p and r.get("utilization") is not None),
                     key=lambda r: r["H"])
        ax.plot([r["H"] for r in pts], [r["utilization"] for r in pts], "s-", label=f"WAN {p}")
    ax.set_xscale("log")
    ax.set_xlabel("H (inner steps between pushes of a fragment)")
    ax.set_ylabel("utilization (time in steps / wall)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("Synthetic learners: time computing vs wall time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_failure(res, path):
    fl = res["failure"]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for wid, rates in sorted(fl["worker_rates"].items(), key=lambda kv: int(kv[0])):
        killed = int(wid) == fl["killed_worker"]
        a.plot([t for _, t, _ in rates], [r for _, _, r in rates],
               label=f"worker {wid}" + (" (killed)" if killed else ""), lw=2.5 if killed else 1)
    for sid, rates in sorted(fl["shard_round_rates"].items(), key=lambda kv: int(kv[0])):
        b.plot([t for t, _, _ in rates], [math.nan if r is None else r for _, _, r in rates],
               label=f"shard {sid}")
    for ax in (a, b):
        ax.axvline(fl["worker_killed_at_s"], color="red", ls=":", label="worker kill -9")
        ax.axvspan(fl["shard_killed_at_s"], fl["shard_restarted_at_s"], color="red", alpha=0.12,
                   label="shard 1 down")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    a.set_xlim(left=-2)  # the shards' progress before the learners joined is not of interest
    a.set_ylabel("steps/s")
    b.set_ylabel("rounds/s")
    b.set_xlabel("seconds since every learner trained")
    a.set_title("Failure run: the other learners' step rates and the shards' rounds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(res, out):
    with open(os.path.join(out, "table.md"), "w") as fh:
        fh.write(table(res))
    plot_scaling(res, os.path.join(out, "scaling.png"))
    plot_utilization(res, os.path.join(out, "utilization.png"))
    plot_failure(res, os.path.join(out, "failure.png"))


def _nonfinite(x, where):
    if isinstance(x, float) and not math.isfinite(x):
        return [where]
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in _nonfinite(v, f"{where}.{k}")]
    if isinstance(x, list):
        return [p for i, v in enumerate(x) for p in _nonfinite(v, f"{where}[{i}]")]
    return []


def check(res, expected, out):
    """Problems with the suite's own output (empty: well formed)."""
    bad = _nonfinite(res, "results")
    for k in ("memcpy_gbps", "zmq_raw_gbps"):
        if not res["ceilings"].get(k, 0) > 0:
            bad.append(f"ceiling {k} missing")
    for kind, ids in expected.items():
        got = [r["id"] for r in res[kind]]
        bad += [f"{kind} row {i} missing" for i in ids if i not in got]
    for r in res["throughput"] + res["utilization"] + [res.get("failure") or {}]:
        if "error" in r:
            bad.append(f"{r.get('id', 'failure run')}: {r['error']}")
    for r in res["throughput"]:
        if not_measured(r):
            continue
        bad += [f"{r['id']}: {k} = {r.get(k)}" for k in THROUGHPUT_KEYS
                if not (isinstance(r.get(k), (int, float)) and r[k] > 0)]
        if r["done_events"] != r["workers"]:
            bad.append(f"{r['id']}: {r['done_events']} of {r['workers']} done events")
    for r in res["utilization"]:
        if not_measured(r):
            continue
        if not 0 < (r.get("utilization") or 0) <= 1.05:
            bad.append(f"{r['id']}: utilization {r.get('utilization')}")
        if r["done_events"] != r["workers"]:
            bad.append(f"{r['id']}: {r['done_events']} of {r['workers']} done events")
    fl = res.get("failure") or {}
    if "error" not in fl and len(fl.get("survivors", [])) != fl.get("workers", 0) - 1:
        bad.append("failure: survivors missing")
    if "error" not in fl and fl.get("survivors_done") != len(fl.get("survivors", [])):
        bad.append("failure: a survivor wrote no done event")
    if not res["wan"]["rows"] and not res["wan"]["skipped"]:
        bad.append("WAN: neither rows nor a reason for skipping them")
    for p in PLOTS + ["table.md", "results.json"]:
        path = os.path.join(out, p)
        if not os.path.exists(path) or os.path.getsize(path) < 200:
            bad.append(f"{p} not written")
    return bad
