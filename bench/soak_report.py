#!/usr/bin/env python3
"""The plot and the verdict of a bench/soak.sh run, from its CSV (Python's standard library only).

    python3 bench/soak_report.py SOAK_CSV [--svg OUT.svg] [--smoke]

Prints a summary per 10 samples (markdown), then the verdict: the run is flat when, comparing the
last 15 samples with samples 5-20 (runs shorter than 35 samples: the second half with the first,
sample 1 left out as warm-up),
  - RSS: the late median is within 10% (+4 MiB) of the early median;
  - p99: the late median is at most 1.5x the early median (the machine is shared: see load1);
  - open fds: the late maximum is at most the early maximum + 2;
  - disk: the late maximum is at most 1.25x the maximum of the run's first half (the most seen
    within each chunk, when the CSV has it), and WAL segments at most one more (checkpoints
    bound the log);
  - throughput: the late median is at least 95% of the rate asked (the server keeps up);
  - queue depth: the late maximum is at most max(2x the early maximum, 200).
Exit status 0 when flat, 1 when not. --smoke checks only that the run produced sane rows (no
errors, messages moved, RSS and fds read) and the plot.
"""
import argparse
import csv
import statistics
import sys

MIB = 1024 * 1024


def load(path):
    comments, rows = [], []
    with open(path, encoding="utf-8") as f:
        lines = []
        for line in f:
            if line.startswith("#"):
                comments.append(line[1:].strip())
            else:
                lines.append(line)
    for r in csv.DictReader(lines):
        out = {}
        for k, v in r.items():
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                out[k] = v
        rows.append(out)
    return comments, rows


def windows(rows):
    n = len(rows)
    if n >= 35:
        return rows[4:20], rows[-15:], "samples 5-20", f"samples {n - 14}-{n}"
    rest = rows[1:] if n > 2 else rows
    half = max(1, len(rest) // 2)
    early, late = rest[:half], rest[half:] or rest[-1:]
    name = lambda w: f"samples {int(w[0]['minute'])}-{int(w[-1]['minute'])}"  # noqa: E731
    return early, late, name(early), name(late)


def col(rows, key):
    return [r[key] for r in rows]


def disk_keys(rows):
    """The most the data dir held within each chunk when the CSV has it (sampled every 2 s),
    else the size at each sample (CSVs of runs before that column)."""
    if rows and "disk_max_bytes" in rows[0]:
        return "disk_max_bytes", "wal_segments_max"
    return "disk_bytes", "wal_segments"


def med(rows, key):
    return statistics.median(col(rows, key))


def summary_table(rows):
    dk, sk = disk_keys(rows)
    out = ["| samples | msg/s | p50 ms | p99 ms (median / worst) | RSS MiB (end) | disk MiB (max) "
           "| WAL segs (max) | snapshots | open fds (max) | depth (max) | load1 (median) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for i in range(0, len(rows), 10):
        b = rows[i:i + 10]
        out.append(
            f"| {int(b[0]['minute'])}-{int(b[-1]['minute'])} | {med(b, 'msg_per_s'):.0f} "
            f"| {med(b, 'p50_us') / 1e3:.2f} | {med(b, 'p99_us') / 1e3:.2f} / "
            f"{max(col(b, 'p99_us')) / 1e3:.2f} | {b[-1]['rss_kb'] / 1024:.1f} "
            f"| {max(col(b, dk)) / MIB:.1f} | {max(col(b, sk)):.0f} "
            f"| {max(col(b, 'snapshots')):.0f} | {max(col(b, 'fds')):.0f} "
            f"| {max(col(b, 'depth')):.0f} | {med(b, 'load1'):.2f} |")
    return "\n".join(out)


def verdict(rows):
    early, late, early_name, late_name = windows(rows)
    half = rows[: max(1, len(rows) // 2)]
    checks = []

    def check(name, ok, detail):
        checks.append(ok)
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail}")

    print(f"verdict: early = {early_name}, late = {late_name}")
    e, l_ = med(early, "rss_kb") / 1024, med(late, "rss_kb") / 1024
    check("RSS", l_ <= e * 1.10 + 4, f"median {e:.1f} -> {l_:.1f} MiB (limit {e * 1.10 + 4:.1f})")
    e, l_ = med(early, "p99_us") / 1e3, med(late, "p99_us") / 1e3
    check("p99", l_ <= e * 1.5, f"median {e:.2f} -> {l_:.2f} ms (limit {e * 1.5:.2f}); "
          f"load1 median {med(early, 'load1'):.2f} -> {med(late, 'load1'):.2f}")
    e, l_ = max(col(early, "fds")), max(col(late, "fds"))
    check("open fds", l_ <= e + 2, f"max {e:.0f} -> {l_:.0f}")
    dk, sk = disk_keys(rows)
    e, l_ = max(col(half, dk)) / MIB, max(col(late, dk)) / MIB
    check("disk", l_ <= e * 1.25,
          f"max {e:.1f} MiB in the first half -> {l_:.1f} MiB late (limit {e * 1.25:.1f})")
    e, l_ = max(col(half, sk)), max(col(late, sk))
    snaps = len({r["snapshot"] for r in rows if r["snapshot"]})
    check("WAL segments", l_ <= e + 1,
          f"max {e:.0f} in the first half -> {l_:.0f} late; {snaps} distinct snapshots seen")
    rate, l_ = rows[-1]["rate"], med(late, "msg_per_s")
    check("throughput", l_ >= 0.95 * rate, f"late median {l_:.0f} msg/s for {rate:.0f} ops/s asked")
    e, l_ = max(col(early, "depth")), max(col(late, "depth"))
    check("queue depth", l_ <= max(2 * e, 200), f"max {e:.0f} -> {l_:.0f}")
    errors = sum(col(rows, "errors"))
    check("errors", errors == 0, f"{errors:.0f} failed requests over the run")
    flat = all(checks)
    print(f"VERDICT: {'FLAT' if flat else 'NOT FLAT'}")
    return flat


def smoke_checks(rows):
    problems = []
    if len(rows) < 2:
        problems.append(f"{len(rows)} rows, want at least 2")
    for r in rows:
        if r["errors"] != 0:
            problems.append(f"sample {r['minute']:.0f}: {r['errors']:.0f} errors")
        if r["msg_per_s"] <= 0:
            problems.append(f"sample {r['minute']:.0f}: no messages moved")
        if r["rss_kb"] <= 0 or r["fds"] <= 0 or r["disk_bytes"] <= 0 or r["wal_segments"] < 1:
            problems.append(f"sample {r['minute']:.0f}: RSS, fds, disk or WAL segments not read")
    # The chunks run on one kept queue: each enqueues as much as it dequeues (give or take the
    # one enqueue an io thread's last operation may add), so the depth stays where the first
    # chunk's standing messages put it.
    drift = rows[-1]["depth"] - rows[0]["depth"]
    if abs(drift) > 4 * len(rows) + 10:
        problems.append(f"queue depth moved by {drift:.0f} between the first and last samples")
    for p in problems:
        print(f"  FAIL {p}")
    print(f"SMOKE: {'ok' if not problems else 'FAILED'}")
    return not problems


# ---------------------------------------------------------------------------------------------
# The plot: plain SVG, one panel per series, time (minutes) along x.

PANELS = [
    ("throughput (msg/s)", [("msg_per_s", "#1f77b4", 1), ("rate", "#999999", 1)], False),
    ("latency (ms, log)", [("p50_us", "#2ca02c", 1e-3), ("p99_us", "#d62728", 1e-3)], True),
    ("memory (MiB): RSS, the engine's own account",
     [("rss_kb", "#9467bd", 1 / 1024), ("engine_bytes", "#2ca02c", 1 / MIB)], False),
    ("data dir (MiB): at the sample, the most within the minute",
     [("disk_bytes", "#8c564b", 1 / MIB), ("disk_max_bytes", "#d62728", 1 / MIB)], False),
    ("WAL segments (most within the minute), snapshots",
     [("wal_segments", "#e377c2", 1), ("wal_segments_max", "#9467bd", 1),
      ("snapshots", "#7f7f7f", 1)], False),
    ("open fds", [("fds", "#17becf", 1)], False),
    ("queue depth (pending+invisible+running)", [("depth", "#bcbd22", 1)], False),
    ("machine load (1 min)", [("load1", "#ff7f0e", 1)], False),
]


def nice_ticks(lo, hi, n=4):
    import math
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    ticks, v = [], start
    while v <= hi + step * 1e-9:
        ticks.append(v)
        v += step
    return ticks


def fmt_tick(v):
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def svg(rows, comments, path):
    import math
    W, PH, PW, ML, MT, GAP = 1120, 170, 470, 60, 70, 50
    cols = 2
    nrows = (len(PANELS) + cols - 1) // cols
    H = MT + nrows * (PH + GAP) + 10
    xs = [r["elapsed_s"] / 60 for r in rows]
    x0, x1 = 0, max(xs[-1] if xs else 1, 1e-9)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{W}" height="{H}" fill="white"/>']
    title = "Sundial soak: " + (comments[0] if comments else "")
    parts.append(f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{esc(title)}</text>')
    for i, c in enumerate(comments[1:3]):
        parts.append(f'<text x="{W / 2}" y="{38 + 14 * i}" text-anchor="middle" fill="#555">'
                     f'{esc(c)}</text>')
    for p, (name, series, logy) in enumerate(PANELS):
        series = [s for s in series if s[0] in rows[0]]  # older CSVs lack engine_bytes
        px = ML + (p % cols) * (PW + 80)
        py = MT + (p // cols) * (PH + GAP)
        vals = [r[k] * s for k, _, s in series for r in rows]
        if logy:
            vals = [math.log10(max(v, 1e-3)) for v in vals]
            lo, hi = math.floor(min(vals)), math.ceil(max(vals))
            if hi == lo:
                hi += 1
            ticks = list(range(lo, hi + 1))
        else:
            lo, hi = 0.0, max(vals) * 1.1 if vals and max(vals) > 0 else 1.0
            ticks = nice_ticks(lo, hi)
            hi = max(hi, ticks[-1])

        def X(x):
            return px + (x - x0) / (x1 - x0) * PW

        def Y(v):
            return py + PH - (v - lo) / (hi - lo) * PH

        parts.append(f'<rect x="{px}" y="{py}" width="{PW}" height="{PH}" fill="none" '
                     f'stroke="#333"/>')
        parts.append(f'<text x="{px}" y="{py - 6}" font-weight="bold">{esc(name)}</text>')
        for t in ticks:
            y = Y(t)
            label = fmt_tick(10 ** t) if logy else fmt_tick(t)
            parts.append(f'<line x1="{px}" x2="{px + PW}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'stroke="#ddd"/>')
            parts.append(f'<text x="{px - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        for t in nice_ticks(x0, x1, 6):
            if t > x1 + 1e-9:
                continue
            x = X(t)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{py + PH}" y2="{py + PH + 4}" '
                         f'stroke="#333"/>')
            parts.append(f'<text x="{x:.1f}" y="{py + PH + 16}" text-anchor="middle">'
                         f'{fmt_tick(t)}</text>')
        parts.append(f'<text x="{px + PW}" y="{py + PH + 30}" text-anchor="end" fill="#555">'
                     f'minutes</text>')
        for j, (key, color, scale) in enumerate(series):
            pts = []
            for x, r in zip(xs, rows):
                v = r[key] * scale
                if logy:
                    v = math.log10(max(v, 1e-3))
                pts.append(f"{X(x):.1f},{Y(v):.1f}")
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                         f'points="{" ".join(pts)}"/>')
            if len(pts) <= 120:
                for pt in pts:
                    cx, cy = pt.split(",")
                    parts.append(f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{color}"/>')
            label = key.replace("_us", "").replace("_kb", "").replace("_bytes", "")
            label = {"engine_bytes": "engine", "disk_max_bytes": "disk, most",
                     "wal_segments_max": "wal_segments, most"}.get(key, label)
            parts.append(f'<text x="{px + PW - 4}" y="{py + 14 + 13 * j}" text-anchor="end" '
                         f'fill="{color}">{esc(label)}</text>')
    parts.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--svg")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    comments, rows = load(a.csv)
    if not rows:
        print(f"soak_report: {a.csv}: no samples", file=sys.stderr)
        return 1
    for c in comments:
        print(f"# {c}")
    print(summary_table(rows))
    if a.svg:
        svg(rows, comments, a.svg)
        print(f"plot: {a.svg}")
    ok = smoke_checks(rows) if a.smoke else verdict(rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
