#!/usr/bin/env python3
"""hcomm-visualize: one self-contained HTML page from an hcomm profile or from
hcomm_bench --json output.

  python3 tools/hcomm_visualize.py hcomm_profile.json      # -> hcomm_profile.html
  python3 tools/hcomm_visualize.py bench.jsonl -o bench.html
  DIR/bin/hcomm-visualize hcomm_profile.json                # installed

The kind of input is told by its content:
  profile  a JSON object with "traceEvents" (the Chrome trace event format that
           hcomm writes with HCOMM_PROFILE=1; shared/API.md, "Profiling");
  bench    lines each holding one JSON object with "op", as hcomm_bench --json
           prints them, several runs concatenated. Text before a line's "{"
           (hcomm_run's "[rank 0] ") and lines that are not JSON are skipped.

The page needs no network: its CSS, script and charts are inline. Without -o
it is written beside the input, named as the input with ".html" for ".json".

A profile's page: a header (ranks, events, dropped events and clock error per
rank, missing ranks), a zoomable timeline (a row group per rank, a lane per thread or stream,
nested spans stacked), statistics per operation, bandwidth against message
size per operation, the outliers, and the stragglers of slow collectives.
A bench page: bus bandwidth against size, one line per series (library, op,
mode, algorithm, transport, ranks; a size that does not grow starts a new
run of the series), and a table of every row.

The rules, also written in the page:
  size class  a span's args.bytes rounded to the nearest power of two on a log
              scale (0 or missing: class 0).
  outlier     a span whose duration is at least 5 times the median duration
              of the spans of its name and size class, and at least 100 us
              longer than that median.
  collective  the spans of cat "collective" with one (args.comm, args.seq) on
              2 or more ranks; a rank's arrival is the start (ts) of its span
              (the file's clocks are aligned).
  slow        a collective with an outlier span on some rank, or one of the 20
              whose longest span is longest.
  straggler   of a slow collective, the rank that arrived last; the page gives
              how much later than the first and than the median arrival.
  statistics  p50 and p99 are nearest-rank percentiles of the durations; GB/s
              is the median, over spans with bytes, of bytes / duration
              (1 GB = 1e9 bytes).
With more than --max-spans spans (default 200000) the timeline draws the
longest ones and every outlier, and says so; every statistic counts them all.

Exit status: 0 when the page was written; 1 when the input cannot be read or
is neither kind, or the page cannot be written (stderr: "hcomm-visualize:
..."); 2 on bad usage.
"""

import argparse
import html
import json
import math
import os
import statistics
import sys
from collections import defaultdict

PROG = "hcomm-visualize"
OUTLIER_FACTOR = 5.0
OUTLIER_MIN_EXCESS_US = 100.0
SLOW_TOP = 20
MAX_SPANS = 200_000
TABLE_ROWS = 1000  # rows shown in the outlier and straggler tables
CATS = ("collective", "p2p", "stream", "task")
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
           "#ff9da7", "#9c755f", "#5b5b5b")


class InputError(Exception):
    """The input cannot be read or is neither a profile nor bench output."""


# ---------------------------------------------------------------------------
# Formatting

def esc(value):
    return html.escape(str(value), quote=True)


def fmt_us(us):
    if us is None:
        return "-"
    a = abs(us)
    if a < 1000:
        return f"{us:.1f} us"
    if a < 1e6:
        return f"{us / 1e3:.2f} ms"
    return f"{us / 1e6:.3f} s"


def fmt_bytes(n):
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_num(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def number(x):
    """x as a float when it is a finite JSON number, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def size_class(nbytes):
    if nbytes is None or nbytes <= 0:
        return 0
    return 1 << max(0, math.floor(math.log2(nbytes) + 0.5))


def percentile(sorted_values, p):
    """Nearest-rank percentile of a non-empty sorted list."""
    k = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[k - 1]


def sort_key(x):
    return (0, x, "") if isinstance(x, (int, float)) else (1, 0, str(x))


def script_json(value):
    """JSON that is safe inside a <script> element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def cell(text, value=None, cls=None):
    attrs = ""
    if value is not None:
        attrs += f' data-v="{esc(value)}"'
    if cls:
        attrs += f' class="{cls}"'
    return f"<td{attrs}>{esc(text)}</td>"


def table(cls, headers, rows):
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (f'<table class="sortable {cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


# ---------------------------------------------------------------------------
# Reading the input

def read_input(path):
    """Returns ("profile", events, other_data) or ("bench", rows, skipped)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not JSON (not UTF-8 text)") from e
    if not text.strip():
        raise InputError(f"{path} is empty")
    whole_error = None
    try:
        doc = json.loads(text)
    except ValueError as e:
        doc, whole_error = None, e
    if whole_error is not None and '"traceEvents"' in text[:4096]:
        raise InputError(f"{path} is not JSON ({whole_error}): a profile cut short? Rank 0 "
                         "writes it when the communicator is destroyed")
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        other = doc.get("otherData")
        return "profile", doc["traceEvents"], other if isinstance(other, dict) else {}
    if isinstance(doc, list) and doc and all(isinstance(e, dict) and "ph" in e for e in doc):
        return "profile", doc, {}  # the trace format's bare array form

    rows, skipped, any_json = [], 0, whole_error is None
    for line in text.splitlines():
        brace = line.find("{")
        if brace < 0:
            skipped += bool(line.strip())
            continue
        try:
            obj = json.loads(line[brace:])
        except ValueError:
            skipped += 1
            continue
        any_json = True
        if isinstance(obj, dict) and isinstance(obj.get("op"), str):
            rows.append(obj)
        else:
            skipped += 1
    if rows:
        return "bench", rows, skipped
    if not any_json:
        raise InputError(f"{path} is not JSON ({whole_error})")
    raise InputError(f"{path} is neither an hcomm profile (a JSON object with traceEvents) "
                     "nor hcomm_bench --json output (lines of JSON objects with \"op\")")


# ---------------------------------------------------------------------------
# Profile analysis

class Span:
    __slots__ = ("pid", "tid", "ts", "dur", "name", "cat", "args", "depth", "factor", "median",
                 "index")

    def __init__(self, pid, tid, ts, dur, name, cat, args):
        self.pid, self.tid, self.ts, self.dur = pid, tid, ts, dur
        self.name, self.cat, self.args = name, cat, args
        self.depth = 0
        self.factor = 0.0  # duration / its kind's median, for outliers
        self.median = None
        self.index = -1  # in the timeline's arrays, when drawn

    def bytes(self):
        n = number(self.args.get("bytes"))
        return n if n is not None and n >= 0 else None


class Profile:
    def __init__(self, events, other):
        self.other = other
        self.spans = []
        self.rank_names, self.rank_order = {}, {}
        self.lane_names, self.lane_order = {}, {}
        self.metadata = self.other_events = self.malformed = 0
        for e in events:
            self._add(e)
        self.total_events = len(events)
        self.ranks = sorted({s.pid for s in self.spans} | set(self.rank_names),
                            key=lambda p: (sort_key(self.rank_order.get(p, p)), sort_key(p)))
        self.t0 = min((s.ts for s in self.spans), default=0.0)
        self.t1 = max((s.ts + s.dur for s in self.spans), default=0.0)
        self._nest()

    def _add(self, e):
        if not isinstance(e, dict):
            self.malformed += 1
            return
        ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
        if not isinstance(pid, (int, str)) or not isinstance(tid, (int, str)):
            self.malformed += 1
            return
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if ph == "M":
            self.metadata += 1
            name = e.get("name")
            if name == "process_name" and "name" in args:
                self.rank_names[pid] = str(args["name"])
            elif name == "process_sort_index" and number(args.get("sort_index")) is not None:
                self.rank_order[pid] = args["sort_index"]
            elif name == "thread_name" and "name" in args:
                self.lane_names[(pid, tid)] = str(args["name"])
            elif name == "thread_sort_index" and number(args.get("sort_index")) is not None:
                self.lane_order[(pid, tid)] = args["sort_index"]
        elif ph == "X":
            ts, dur = number(e.get("ts")), number(e.get("dur"))
            if ts is None or dur is None or dur < 0:
                self.malformed += 1
                return
            self.spans.append(Span(pid, tid, ts, dur, str(e.get("name", "?")),
                                   str(e.get("cat", "")), args))
        else:
            self.other_events += 1

    def _nest(self):
        """Sets each span's depth on its track (spans of one track nest)."""
        by_lane = defaultdict(list)
        for s in self.spans:
            by_lane[(s.pid, s.tid)].append(s)
        self.lanes = {}
        for key, spans in by_lane.items():
            spans.sort(key=lambda s: (s.ts, -s.dur))
            ends = []
            for s in spans:
                while ends and ends[-1] <= s.ts + 1e-6:
                    ends.pop()
                s.depth = len(ends)
                ends.append(s.ts + s.dur)
            self.lanes[key] = spans

    def rank_label(self, pid):
        return self.rank_names.get(pid, f"rank {pid}")

    def lane_label(self, pid, tid):
        return self.lane_names.get((pid, tid), f"thread {tid}")

    def per_rank(self, key, pid):
        values = self.other.get(key)
        if isinstance(values, list) and isinstance(pid, int) and 0 <= pid < len(values):
            return number(values[pid])
        return None


def find_outliers(spans):
    """Marks outliers (see the module comment); returns them, worst first."""
    kinds = defaultdict(list)
    for s in spans:
        kinds[(s.name, size_class(s.bytes()))].append(s.dur)
    medians = {k: statistics.median(v) for k, v in kinds.items()}
    out = []
    for s in spans:
        m = medians[(s.name, size_class(s.bytes()))]
        s.median = m
        if s.dur >= OUTLIER_FACTOR * m and s.dur - m >= OUTLIER_MIN_EXCESS_US:
            s.factor = s.dur / m if m > 0 else math.inf
            out.append(s)
    out.sort(key=lambda s: s.dur - s.median, reverse=True)
    return out, {k: len(v) for k, v in kinds.items()}


def find_stragglers(spans):
    """The slow collectives (see the module comment), longest first."""
    by_key = defaultdict(dict)
    for s in spans:
        if s.cat != "collective":
            continue
        comm, seq = s.args.get("comm"), s.args.get("seq")
        if comm is None or seq is None or isinstance(comm, (list, dict)) or \
                isinstance(seq, (list, dict)):
            continue
        ranks = by_key[(comm, seq)]
        if s.pid not in ranks or s.ts < ranks[s.pid].ts:
            ranks[s.pid] = s
    colls = [(key, ranks) for key, ranks in by_key.items() if len(ranks) >= 2]
    longest = lambda c: max(s.dur for s in c[1].values())
    colls.sort(key=longest, reverse=True)
    slow = [c for i, c in enumerate(colls)
            if i < SLOW_TOP or any(s.factor for s in c[1].values())]
    result = []
    for (comm, seq), ranks in slow:
        arrivals = sorted(ranks.values(), key=lambda s: (s.ts, sort_key(s.pid)))
        first, last = arrivals[0], arrivals[-1]
        median = statistics.median(s.ts for s in arrivals)
        result.append({
            "comm": comm, "seq": seq, "spans": arrivals,
            "name": "/".join(sorted({s.name for s in arrivals})),
            "bytes": last.bytes(), "longest": max(s.dur for s in arrivals),
            "first": first, "last": last, "late_first": last.ts - first.ts,
            "late_median": last.ts - median,
            "outlier": any(s.factor for s in arrivals),
            "start": first.ts, "end": max(s.ts + s.dur for s in arrivals),
        })
    return result, len(colls)


def op_stats(spans):
    groups = defaultdict(list)
    for s in spans:
        groups[(s.name, s.cat)].append(s)
    rows = []
    for (name, cat), group in groups.items():
        durs = sorted(s.dur for s in group)
        sized = [s for s in group if s.bytes() is not None]
        rates = [s.bytes() / s.dur / 1e3 for s in sized if s.bytes() > 0 and s.dur > 0]
        rows.append({"name": name, "cat": cat, "count": len(group), "total": sum(durs),
                     "p50": percentile(durs, 50), "p99": percentile(durs, 99), "max": durs[-1],
                     "bytes": sum(s.bytes() for s in sized) if sized else None,
                     "gbs": statistics.median(rates) if rates else None})
    rows.sort(key=lambda r: r["total"], reverse=True)
    return rows


def bandwidth_series(spans):
    """Per (name, cat) with bytes: per size class, (median bytes, median GB/s)."""
    series = defaultdict(lambda: defaultdict(list))
    for s in spans:
        n = s.bytes()
        if s.cat == "task" or not n or s.dur <= 0:
            continue
        label = s.name if s.cat in ("collective", "p2p") else f"{s.name} ({s.cat})"
        series[label][size_class(n)].append((n, n / s.dur / 1e3))
    out = []
    for label in sorted(series):
        points = []
        for cls in sorted(series[label]):
            group = series[label][cls]
            x = statistics.median(n for n, _ in group)
            y = statistics.median(r for _, r in group)
            points.append((x, y, f"{label}, {fmt_bytes(x)}: {y:.3f} GB/s "
                                 f"(median of {len(group)} calls)"))
        out.append((label, points))
    return out


# ---------------------------------------------------------------------------
# SVG line chart with a log2 x axis

def nice_step(span, target):
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def line_chart(series, y_label, chart_id):
    """series: [(label, [(x, y, tip)])] with x > 0. Returns SVG + legend HTML."""
    points = [(x, y) for _, ps in series for x, y, _ in ps if x > 0 and y is not None]
    if not points:
        return '<p class="empty">No sizes with a bandwidth to draw.</p>'
    w, h, ml, mr, mt, mb = 820, 360, 64, 16, 12, 44
    pw, ph = w - ml - mr, h - mt - mb
    lo = math.floor(math.log2(min(x for x, _ in points)))
    hi = math.ceil(math.log2(max(x for x, _ in points)))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    ymax = max(y for _, y in points) * 1.08 or 1.0
    ystep = nice_step(ymax, 5)
    ymax = math.ceil(ymax / ystep) * ystep
    sx = lambda x: ml + (math.log2(x) - lo) / (hi - lo) * pw
    sy = lambda y: mt + ph - y / ymax * ph
    parts = [f'<svg class="chart" id="{chart_id}" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img">']
    every = max(1, math.ceil((hi - lo + 1) / 14))
    for k in range(lo, hi + 1):
        x = sx(2 ** k)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}"/>')
        if (k - lo) % every == 0:
            parts.append(f'<text class="tick" x="{x:.1f}" y="{mt + ph + 16}" '
                         f'text-anchor="middle">{esc(fmt_bytes(2 ** k))}</text>')
    y = 0.0
    while y <= ymax + ystep / 2:
        py = sy(y)
        parts.append(f'<line class="grid" x1="{ml}" y1="{py:.1f}" x2="{ml + pw}" y2="{py:.1f}"/>')
        parts.append(f'<text class="tick" x="{ml - 6}" y="{py + 4:.1f}" '
                     f'text-anchor="end">{y:g}</text>')
        y += ystep
    parts.append(f'<text class="axis-label" x="{ml + pw / 2}" y="{h - 6}" text-anchor="middle">'
                 'message size (bytes, log2 scale)</text>')
    parts.append(f'<text class="axis-label" transform="translate(14 {mt + ph / 2}) rotate(-90)" '
                 f'text-anchor="middle">{esc(y_label)}</text>')
    legend = []
    for i, (label, ps) in enumerate(series):
        ps = [p for p in ps if p[0] > 0 and p[1] is not None]
        if not ps:
            continue
        color = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6 3"' if (i // len(PALETTE)) % 2 else ""
        d = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}"
                     for j, (x, y, _) in enumerate(ps))
        parts.append(f'<path class="series" data-series="{esc(label)}" d="{d}" '
                     f'stroke="{color}"{dash}/>')
        for x, y, tip in ps:
            parts.append(f'<circle class="point" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" '
                         f'fill="{color}"><title>{esc(tip)}</title></circle>')
        legend.append(f'<li><span class="swatch" style="background:{color}"></span>'
                      f'{esc(label)}</li>')
    parts.append("</svg>")
    return "".join(parts) + f'<ul class="legend">{"".join(legend)}</ul>'


# ---------------------------------------------------------------------------
# The profile page

def timeline_data(profile, outliers, max_spans):
    """The timeline's spans as columns, grouped by lane and sorted by start."""
    spans = profile.spans
    drawn = spans
    if len(spans) > max_spans:
        keep = set(map(id, outliers[:max_spans]))
        rest = sorted((s for s in spans if id(s) not in keep), key=lambda s: s.dur, reverse=True)
        keep.update(map(id, rest[:max(0, max_spans - len(keep))]))
        drawn = [s for s in spans if id(s) in keep]
    drawn_ids = set(map(id, drawn))
    strings, string_index = [], {}

    def intern(value):
        if value is None:
            return -1
        value = str(value)
        if value not in string_index:
            string_index[value] = len(strings)
            strings.append(value)
        return string_index[value]

    def num_or_none(value):
        n = number(value)
        return None if n is None else (int(n) if n == int(n) else n)

    cols = {k: [] for k in ("ts", "dur", "depth", "name", "cat", "bytes", "peer", "tag", "algo",
                            "seq", "comm", "status", "factor", "median", "stream")}
    groups = []
    lanes = []
    for pid in profile.ranks:
        tids = {tid for (p, tid) in profile.lanes if p == pid}
        tids |= {tid for (p, tid) in profile.lane_names if p == pid}
        order = sorted(tids, key=lambda t: (sort_key(profile.lane_order.get((pid, t), t)),
                                            sort_key(t)))
        group = {"label": profile.rank_label(pid), "lanes": []}
        for tid in order:
            lane_spans = [s for s in profile.lanes.get((pid, tid), []) if id(s) in drawn_ids]
            lane = {"label": profile.lane_label(pid, tid), "first": len(cols["ts"]),
                    "n": len(lane_spans), "depth": 1 + max((s.depth for s in lane_spans),
                                                           default=0),
                    "maxDur": max((s.dur for s in lane_spans), default=0)}
            for s in lane_spans:
                s.index = len(cols["ts"])
                a = s.args
                cols["ts"].append(round(s.ts - profile.t0, 3))
                cols["dur"].append(round(s.dur, 3))
                cols["depth"].append(s.depth)
                cols["name"].append(intern(s.name))
                cols["cat"].append(intern(s.cat))
                cols["bytes"].append(num_or_none(a.get("bytes")))
                cols["peer"].append(num_or_none(a.get("peer")))
                cols["tag"].append(num_or_none(a.get("tag")))
                cols["algo"].append(intern(a.get("algo")))
                cols["seq"].append(num_or_none(a.get("seq")))
                cols["comm"].append(num_or_none(a.get("comm")))
                cols["status"].append(intern(a.get("status")))
                cols["stream"].append(num_or_none(a.get("stream")))
                cols["factor"].append(round(s.factor, 2) if math.isfinite(s.factor) else 1e9)
                cols["median"].append(round(s.median, 3))
            group["lanes"].append(len(lanes))
            lanes.append(lane)
        groups.append(group)
    return {"end": round(profile.t1 - profile.t0, 3), "strings": strings, "s": cols,
            "lanes": lanes, "groups": groups, "total": len(spans), "drawn": len(drawn)}


def focus_attrs(profile, t_start, t_end, index=-1):
    """data-* attributes that make a table row zoom the timeline when clicked."""
    pad = max(50.0, (t_end - t_start) * 0.15)
    return (f' data-focus0="{max(0.0, t_start - profile.t0 - pad):.3f}" '
            f'data-focus1="{t_end - profile.t0 + pad:.3f}" data-span="{index}"')


def profile_page(path, profile, max_spans):
    spans = profile.spans
    outliers, kind_sizes = find_outliers(spans)
    slow, ncoll = find_stragglers(spans)
    data = timeline_data(profile, outliers, max_spans)
    name = os.path.basename(path)
    body = [f"<h1>hcomm profile: {esc(name)}</h1>"]

    # Header.
    o = profile.other
    facts = [("file", path), ("format", o.get("format", "-")),
             ("hcomm version", o.get("hcomm_version", "-")),
             ("ranks", o.get("nranks", len(profile.ranks))),
             ("events", f"{profile.total_events} ({len(spans)} spans, {profile.metadata} "
                        f"metadata, {profile.other_events} other)"),
             ("time covered", fmt_us(profile.t1 - profile.t0)),
             ("written by", o.get("file_written_by", "-"))]
    body.append('<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>"
                                                for k, v in facts) + "</dl>")
    notes = []
    if profile.malformed:
        notes.append(f"{profile.malformed} events were skipped: not an object, or a span "
                     "without a numeric ts and dur.")
    if data["drawn"] < data["total"]:
        notes.append(f"{data['total']} spans: the timeline draws a sample, the "
                     f"{data['drawn']} longest and every outlier (--max-spans). Every table "
                     "and chart counts all spans.")
    missing = o.get("missing_ranks")
    if isinstance(missing, list) and missing:
        notes.append(f"No events arrived from rank(s) {', '.join(map(str, missing))} "
                     "(otherData.missing_ranks): the page lacks them.")
    count_by_rank = defaultdict(int)
    for s in spans:
        count_by_rank[s.pid] += 1
    rank_rows = []
    for pid in profile.ranks:
        dropped = profile.per_rank("dropped_events", pid)
        err = profile.per_rank("clock_error_us", pid)
        if dropped:
            notes.append(f"{profile.rank_label(pid)} dropped {dropped:.0f} events "
                         "(profile_max_events): its statistics miss them.")
        rank_rows.append(f'<tr class="rank-row" data-rank="{esc(pid)}">'
                         + cell(profile.rank_label(pid), sort_key(pid)[1])
                         + cell(count_by_rank[pid], count_by_rank[pid])
                         + cell("-" if dropped is None else f"{dropped:.0f}", dropped,
                                "warn" if dropped else None)
                         + cell("-" if err is None else f"{err:.1f}", err) + "</tr>")
    body.append(table("ranks", ["rank", "spans", "dropped events", "clock error (us)"],
                      rank_rows))
    body.extend(f'<p class="note">{esc(n)}</p>' for n in notes)

    # Timeline.
    body.append(
        '<h2 id="timeline">Timeline</h2>'
        '<div class="tl-controls"><button data-zoom="0.5">zoom in</button>'
        '<button data-zoom="2">zoom out</button><button data-pan="-0.5">&larr;</button>'
        '<button data-pan="0.5">&rarr;</button><button data-reset="1">whole trace</button>'
        '<span id="tl-window"></span><span class="hint">drag to pan, Ctrl or Alt + wheel '
        'to zoom, Shift + wheel to pan, double-click to zoom in; click a table row to show '
        'its span</span></div>'
        '<div class="legend-cats">' + "".join(
            f'<span class="swatch c-{c}"></span>{c}' for c in CATS) +
        '<span class="swatch outlier-swatch"></span>outlier'
        '<span class="swatch c-err"></span>status not ok</div>'
        '<svg id="tl-axis" height="22"></svg>'
        '<div id="tl-box"><svg id="tl-svg"></svg></div><div id="tl-tip" hidden></div>')

    # Per-operation statistics.
    rows = []
    for r in op_stats(spans):
        rows.append(f'<tr class="op-row" data-op="{esc(r["name"])}">' + cell(r["name"])
                    + cell(r["cat"]) + cell(r["count"], r["count"])
                    + cell(fmt_us(r["total"]), r["total"]) + cell(fmt_us(r["p50"]), r["p50"])
                    + cell(fmt_us(r["p99"]), r["p99"]) + cell(fmt_us(r["max"]), r["max"])
                    + cell(fmt_bytes(r["bytes"]), r["bytes"])
                    + cell(fmt_num(r["gbs"], 3), r["gbs"]) + "</tr>")
    body.append('<h2 id="operations">Operations</h2><p class="rule">Per name and category. '
                'p50 and p99 are nearest-rank percentiles of the durations; GB/s is the median '
                'over the calls with bytes of bytes / duration (1 GB = 10<sup>9</sup> '
                'bytes).</p>')
    body.append(table("ops", ["op", "cat", "count", "total time", "p50", "p99", "max",
                              "total bytes", "GB/s (median)"], rows))

    body.append('<h2 id="bandwidth">Bandwidth against message size</h2><p class="rule">One '
                'line per operation: at each size class (bytes rounded to a power of two) the '
                'median GB/s of its calls, at their median size.</p>')
    body.append(line_chart(bandwidth_series(spans), "GB/s", "bw-chart"))

    # Outliers.
    rows = []
    for s in outliers[:TABLE_ROWS]:
        a = s.args
        factor = f"{s.factor:.1f}x" if math.isfinite(s.factor) else "n/a (median 0)"
        rows.append(f'<tr class="outlier-row" data-rank="{esc(s.pid)}" '
                    f'data-op="{esc(s.name)}" data-seq="{esc(a.get("seq", ""))}"'
                    f'{focus_attrs(profile, s.ts, s.ts + s.dur, s.index)}>'
                    + cell(profile.rank_label(s.pid), sort_key(s.pid)[1])
                    + cell(profile.lane_label(s.pid, s.tid)) + cell(s.name) + cell(s.cat)
                    + cell(fmt_bytes(s.bytes()), s.bytes())
                    + cell(a.get("comm", "-")) + cell(a.get("seq", "-"))
                    + cell(fmt_us(s.ts - profile.t0), s.ts)
                    + cell(fmt_us(s.dur), s.dur) + cell(fmt_us(s.median), s.median)
                    + cell(factor, s.factor if math.isfinite(s.factor) else 1e18)
                    + cell(fmt_us(s.dur - s.median), s.dur - s.median)
                    + cell(kind_sizes[(s.name, size_class(s.bytes()))]) + "</tr>")
    body.append(
        f'<h2 id="outliers">Outliers ({len(outliers)})</h2><p class="rule">A call is an '
        'outlier when it took at least 5 times the median duration of the calls of its '
        'name and size class (bytes rounded to the nearest power of two), and at least 100 us '
        'more than that median. Worst (most time above the median) first.</p>')
    if len(outliers) > TABLE_ROWS:
        body.append(f'<p class="note">The first {TABLE_ROWS} of {len(outliers)}.</p>')
    body.append(table("outliers", ["rank", "track", "op", "cat", "bytes", "comm", "seq",
                                   "start", "duration", "median of its kind", "slower",
                                   "slower by", "calls of its kind"], rows)
                if rows else '<p class="empty">No outliers.</p>')

    # Stragglers.
    last_count = defaultdict(int)
    late_sum = defaultdict(float)
    rows = []
    for c in slow:
        last_count[c["last"].pid] += 1
        late_sum[c["last"].pid] += c["late_first"]
    for c in slow[:TABLE_ROWS]:
        last = c["last"]
        rows.append(f'<tr class="straggler-row" data-comm="{esc(c["comm"])}" '
                    f'data-seq="{esc(c["seq"])}" data-last-rank="{esc(last.pid)}"'
                    f'{focus_attrs(profile, c["start"], c["end"])}>'
                    + cell(c["name"]) + cell(c["comm"]) + cell(c["seq"], c["seq"])
                    + cell(fmt_bytes(c["bytes"]), c["bytes"]) + cell(len(c["spans"]))
                    + cell(fmt_us(c["longest"]), c["longest"])
                    + cell(profile.rank_label(c["first"].pid))
                    + cell(profile.rank_label(last.pid), sort_key(last.pid)[1], "straggler")
                    + cell(fmt_us(c["late_first"]), c["late_first"])
                    + cell(fmt_us(c["late_median"]), c["late_median"])
                    + cell("yes" if c["outlier"] else "", int(c["outlier"])) + "</tr>")
    body.append(
        f'<h2 id="stragglers">Stragglers</h2><p class="rule">A collective is the set of '
        '"collective" spans with one (comm, seq) on two or more ranks; a rank arrives when its '
        'span starts (the clocks are aligned in the file). Slow collectives: those with an '
        f'outlier call, and the {SLOW_TOP} whose longest call is longest ({len(slow)} of '
        f'{ncoll} collectives here). The straggler is the rank that arrived last.</p>')
    if slow:
        summary = ", ".join(f"{profile.rank_label(p)} in {n} ({fmt_us(late_sum[p])} late in all)"
                            for p, n in sorted(last_count.items(),
                                               key=lambda kv: (-kv[1], sort_key(kv[0]))))
        body.append(f'<p class="straggler-summary">Arrived last: {esc(summary)}.</p>')
    if len(slow) > TABLE_ROWS:
        body.append(f'<p class="note">The first {TABLE_ROWS} of {len(slow)}.</p>')
    body.append(table("stragglers", ["op", "comm", "seq", "bytes", "ranks", "longest call",
                                     "first to arrive", "last to arrive", "later than first",
                                     "later than median", "outlier"], rows)
                if rows else '<p class="empty">No collective ran on two or more ranks.</p>')
    return (f"hcomm profile: {name}", "".join(body),
            f'<script type="application/json" id="timeline-data">{script_json(data)}</script>'
            f"<script>{TIMELINE_JS}</script>")


# ---------------------------------------------------------------------------
# The bench page

BENCH_KEYS = {"op", "bytes", "time_us", "algbw_gbs", "busbw_gbs", "wrong", "nranks",
              "transport", "library", "mode", "algo"}


def bench_page(path, rows, skipped):
    series, order, last_bytes, run_of = {}, [], {}, {}
    table_rows = []
    for row in rows:
        parts = [row.get("library"), row.get("op"), row.get("mode"),
                 None if row.get("algo") in (None, "auto") else row.get("algo"),
                 row.get("transport"),
                 f"{row['nranks']} ranks" if number(row.get("nranks")) is not None else None]
        key = " ".join(str(p) for p in parts if p not in (None, ""))
        nbytes = number(row.get("bytes"))
        if nbytes is not None and key in last_bytes and nbytes <= last_bytes[key]:
            run_of[key] = run_of.get(key, 1) + 1  # sizes start again: another run
        if nbytes is not None:
            last_bytes[key] = nbytes
        label = key if run_of.get(key, 1) == 1 else f"{key} (run {run_of[key]})"
        bw = number(row.get("busbw_gbs"))
        if bw is None:
            bw = number(row.get("algbw_gbs"))
        time_us = number(row.get("time_us"))
        if bw is None and nbytes and time_us:
            bw = nbytes / time_us / 1e3
        if nbytes and nbytes > 0 and bw is not None:
            if label not in series:
                series[label] = []
                order.append(label)
            series[label].append((nbytes, bw, f"{label}, {fmt_bytes(nbytes)}: {bw:.3f} GB/s"))
        extra = ", ".join(f"{k}={json.dumps(v)}" for k, v in row.items() if k not in BENCH_KEYS)
        table_rows.append(f'<tr class="bench-row">' + cell(label)
                          + cell(fmt_bytes(nbytes), nbytes)
                          + cell(fmt_num(time_us, 2), time_us)
                          + cell(fmt_num(number(row.get("algbw_gbs")), 3),
                                 number(row.get("algbw_gbs")))
                          + cell(fmt_num(number(row.get("busbw_gbs")), 3),
                                 number(row.get("busbw_gbs")))
                          + cell(row.get("wrong", "-")) + cell(extra, cls="text")
                          + "</tr>")
    name = os.path.basename(path)
    body = [f"<h1>hcomm_bench: {esc(name)}</h1>",
            '<dl class="facts">' + "".join(
                f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>"
                for k, v in (("file", path), ("rows", len(rows)), ("series", len(series)),
                             ("lines skipped", skipped))) + "</dl>",
            '<h2 id="busbw">Bus bandwidth against message size</h2><p class="rule">One line '
            'per series: library, op, mode, algorithm (when not auto), transport and ranks; '
            'a size that is not larger than the one before starts a new run. busbw_gbs, or '
            'algbw_gbs, or bytes / time_us where the row has neither.</p>',
            line_chart([(label, series[label]) for label in order], "bus bandwidth (GB/s)",
                       "busbw-chart"),
            '<h2 id="rows">Rows</h2>',
            table("bench", ["series", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                            "wrong", "other fields"], table_rows)]
    return f"hcomm_bench: {name}", "".join(body), ""


# ---------------------------------------------------------------------------
# The page around them

CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 16px 24px;
       color: #222; }
h1 { font-size: 20px; margin: 0 0 8px; }
h2 { font-size: 17px; margin: 28px 0 6px; border-bottom: 1px solid #ddd; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0; }
dt { color: #666; }
dd { margin: 0; word-break: break-all; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; cursor: pointer; user-select: none; }
td:first-child, th:first-child, td.text { text-align: left; }
td.text { white-space: normal; }
tbody tr:nth-child(even) { background: #fafafa; }
tr[data-focus0] { cursor: pointer; }
tr[data-focus0]:hover { background: #eef4ff; }
td.warn { background: #fde2e2; }
td.straggler { font-weight: bold; color: #b00; }
.note { background: #fff4d6; border-left: 4px solid #e0a800; padding: 4px 8px; margin: 4px 0; }
.rule { color: #555; max-width: 60em; }
.empty { color: #777; font-style: italic; }
.tl-controls { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; margin: 4px 0; }
.tl-controls .hint { color: #777; font-size: 12px; }
#tl-window { font-family: monospace; }
#tl-axis { display: block; width: 100%; }
#tl-box { max-height: 65vh; overflow-y: auto; overflow-x: hidden; border: 1px solid #ccc;
          cursor: grab; }
#tl-box.dragging { cursor: grabbing; }
#tl-svg { display: block; }
#tl-tip { position: fixed; pointer-events: none; background: #222; color: #fff; font-size: 12px;
          padding: 5px 8px; border-radius: 4px; white-space: pre; z-index: 10; }
.tl-group { font-weight: bold; font-size: 12px; }
.tl-lane { font-size: 11px; fill: #444; }
.tl-sep { stroke: #bbb; }
.tl-tick { font-size: 11px; fill: #555; }
.tl-grid { stroke: #eee; }
rect.span { stroke: #fff; stroke-width: .5; }
rect.span.outlier { stroke: #d00; stroke-width: 2; }
rect.span.hl { stroke: #000; stroke-width: 2.5; }
rect.dense { fill-opacity: .55; }
.c-collective { fill: #4e79a7; background: #4e79a7; }
.c-p2p { fill: #59a14f; background: #59a14f; }
.c-stream { fill: #b07aa1; background: #b07aa1; }
.c-task { fill: #f28e2b; background: #f28e2b; }
.c-other { fill: #9c9c9c; background: #9c9c9c; }
rect.span.c-err, .c-err { fill: #e15759; background: #e15759; }
.legend-cats { font-size: 12px; margin: 2px 0 4px; }
.legend-cats .swatch { margin-left: 10px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
          vertical-align: -2px; }
.outlier-swatch { border: 2px solid #d00; width: 8px; height: 8px; }
svg.chart { background: #fff; border: 1px solid #ddd; }
.grid { stroke: #eee; }
.tick { font-size: 11px; fill: #555; }
.axis-label { font-size: 12px; fill: #333; }
path.series { fill: none; stroke-width: 2; }
ul.legend { list-style: none; padding: 0; margin: 4px 0; columns: 3; max-width: 820px;
            font-size: 12px; }
"""

# Every script error, and a promise nobody waited on, counts in
# <body data-js-errors>; the last script sets <body data-rendered> when every
# script before it ran to its end. Tests read both from the DOM.
ERRORS_JS = """
(function () {
  var count = 0;
  function note() {
    count++;
    document.body.setAttribute('data-js-errors', String(count));
  }
  window.addEventListener('error', note);
  window.addEventListener('unhandledrejection', note);
  window.hcommNoteError = note;
})();
"""

# Sorting by a click on a column heading: by the cells' data-v when numeric,
# else by their text; a second click reverses.
COMMON_JS = """
(function () {
  function sortKey(td) {
    var v = td.getAttribute('data-v');
    if (v !== null && v !== '' && !isNaN(Number(v))) return [0, Number(v)];
    return [1, td.textContent];
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute('data-dir') === 'asc' ? -1 : 1;
        th.setAttribute('data-dir', dir > 0 ? 'asc' : 'desc');
        rows.sort(function (a, b) {
          var x = sortKey(a.cells[col]), y = sortKey(b.cells[col]);
          if (x[0] !== y[0]) return x[0] - y[0];
          return (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  var timeline = document.getElementById('tl-svg');  // sets data-lanes once drawn
  if (typeof window.hcommNoteError === 'function' &&
      (!timeline || timeline.hasAttribute('data-lanes'))) {
    document.body.setAttribute('data-rendered', '1');
  }
})();
"""

# The timeline: SVG drawn from the embedded columns (timeline_data) for the
# time window in view and the lanes scrolled into view only, so that the DOM
# stays small however long the trace is. Times are microseconds from the
# trace's first span.
TIMELINE_JS = r"""
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('timeline-data').textContent);
  var S = D.s, LABEL_W = 200, ROW_H = 14, HEAD_H = 18, GAP = 6;
  var CATS = {collective: 1, p2p: 1, stream: 1, task: 1};
  var box = document.getElementById('tl-box'), svg = document.getElementById('tl-svg');
  var axis = document.getElementById('tl-axis'), tip = document.getElementById('tl-tip');
  var windowText = document.getElementById('tl-window');
  var end = Math.max(D.end, 1), view = {t0: 0, t1: end}, highlight = -1, pending = false;

  // Vertical layout: a heading row per rank, then its lanes, one row per
  // nesting depth.
  var y = 0;
  D.groups.forEach(function (g) {
    g.y = y;
    y += HEAD_H;
    g.lanes.forEach(function (li) {
      D.lanes[li].y = y;
      y += D.lanes[li].depth * ROW_H + GAP;
    });
    y += GAP;
  });
  var totalH = Math.max(y, 20);
  svg.setAttribute('height', totalH);  // before the first render reads the box's height

  function str(i) { return i < 0 ? null : D.strings[i]; }
  function fmtT(us) {
    var a = Math.abs(us);
    if (a === 0) return '0';
    if (a < 1000) return us.toFixed(a < 10 ? 2 : 1) + ' us';
    if (a < 1e6) return (us / 1e3).toFixed(a < 1e4 ? 3 : 2) + ' ms';
    return (us / 1e6).toFixed(3) + ' s';
  }
  function fmtB(n) {
    var units = ['B', 'KiB', 'MiB', 'GiB'], i = 0;
    while (Math.abs(n) >= 1024 && i < 3) { n /= 1024; i++; }
    return (n % 1 ? n.toFixed(1) : n) + ' ' + units[i];
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }
  function niceStep(x) {
    var m = Math.pow(10, Math.floor(Math.log10(x))), r = x / m;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * m;
  }
  function plotWidth() { return Math.max(200, box.clientWidth - LABEL_W - 2); }
  function lowerBound(a, v, lo, hi) {
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (a[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  function failed(i) { var st = str(S.status[i]); return st !== null && st !== 'ok'; }
  function catOf(i) { var c = str(S.cat[i]); return CATS[c] ? c : 'other'; }
  function spanClass(i) {
    var k = 'span c-' + catOf(i);
    if (failed(i)) k += ' c-err';
    if (S.factor[i] > 0) k += ' outlier';
    if (i === highlight) k += ' hl';
    return k;
  }

  // One lane's spans in [view.t0, view.t1] into out; returns [drawn, dense].
  function drawLane(l, out, sc) {
    var drawn = 0, dense = 0, runs = [];
    function flush(d) {
      var r = runs[d];
      if (!r) return;
      out.push('<rect class="dense c-' + r.cat + '" x="' + r.x0 + '" y="' +
               (l.y + d * ROW_H + 1) + '" width="' + (r.x1 - r.x0) + '" height="' +
               (ROW_H - 2) + '" data-n="' + r.n + '"/>');
      dense++;
      runs[d] = null;
    }
    // Spans are sorted by start: the first that can reach into the window
    // starts at most the lane's longest span before it.
    var last = l.first + l.n;
    for (var i = lowerBound(S.ts, view.t0 - l.maxDur, l.first, last);
         i < last && S.ts[i] <= view.t1; i++) {
      var e = S.ts[i] + S.dur[i];
      if (e < view.t0) continue;
      var x0 = LABEL_W + (Math.max(S.ts[i], view.t0) - view.t0) * sc;
      var x1 = LABEL_W + (Math.min(e, view.t1) - view.t0) * sc, d = S.depth[i];
      // Outliers and failed calls are drawn however short they are.
      if (x1 - x0 >= 1 || S.factor[i] > 0 || failed(i) || i === highlight) {
        out.push('<rect class="' + spanClass(i) + '" x="' + x0.toFixed(1) + '" y="' +
                 (l.y + d * ROW_H + 1) + '" width="' + Math.max(1, x1 - x0).toFixed(1) +
                 '" height="' + (ROW_H - 2) + '" data-i="' + i + '"/>');
        drawn++;
        continue;
      }
      // Spans under a pixel wide merge into one rectangle per run of pixels,
      // in their category's colour (grey where categories mix).
      var px = Math.floor(x0), r = runs[d], c = catOf(i);
      if (r && px <= r.x1) {
        r.x1 = Math.max(r.x1, px + 1);
        r.n++;
        if (r.cat !== c) r.cat = 'other';
      } else {
        flush(d);
        runs[d] = {x0: px, x1: px + 1, n: 1, cat: c};
      }
    }
    for (var k = 0; k < runs.length; k++) flush(k);
    return [drawn, dense];
  }

  function render() {
    pending = false;
    var W = plotWidth(), span = view.t1 - view.t0, sc = W / span, out = [];
    var drawn = 0, dense = 0;
    var top = box.scrollTop - ROW_H, bottom = box.scrollTop + box.clientHeight + ROW_H;
    var step = niceStep(span / Math.max(2, W / 110)), ticks = [];
    for (var t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) ticks.push(t);
    ticks.forEach(function (t) {
      var x = LABEL_W + (t - view.t0) * sc;
      out.push('<line class="tl-grid" x1="' + x + '" y1="0" x2="' + x + '" y2="' + totalH +
               '"/>');
    });
    D.groups.forEach(function (g) {
      out.push('<line class="tl-sep" x1="0" y1="' + g.y + '" x2="' + (LABEL_W + W) + '" y2="' +
               g.y + '"/>');
      out.push('<text class="tl-group" x="4" y="' + (g.y + 13) + '">' + esc(g.label) +
               '</text>');
      g.lanes.forEach(function (li) {
        var l = D.lanes[li];
        out.push('<text class="tl-lane" x="14" y="' + (l.y + 11) + '">' + esc(l.label) +
                 '</text>');
        if (l.y + l.depth * ROW_H < top || l.y > bottom) return;  // scrolled away
        var counts = drawLane(l, out, sc);
        drawn += counts[0];
        dense += counts[1];
      });
    });
    svg.setAttribute('width', LABEL_W + W);
    svg.setAttribute('data-spans-drawn', drawn);
    svg.setAttribute('data-dense', dense);
    svg.innerHTML = out.join('');

    var unit = step >= 1e6 ? 1e6 : step >= 1e3 ? 1e3 : 1;
    var unitName = unit === 1e6 ? ' s' : unit === 1e3 ? ' ms' : ' us';
    var digits = Math.max(0, Math.ceil(-Math.log10(step / unit) - 1e-9));
    var ax = [];
    ticks.forEach(function (t) {
      var x = LABEL_W + (t - view.t0) * sc;
      ax.push('<line class="tl-grid" x1="' + x + '" y1="14" x2="' + x + '" y2="22"/>' +
              '<text class="tl-tick" x="' + (x + 2) + '" y="12">' +
              (t / unit).toFixed(digits) + unitName + '</text>');
    });
    axis.setAttribute('width', LABEL_W + W);
    axis.innerHTML = ax.join('');
    windowText.textContent = fmtT(view.t0) + ' .. ' + fmtT(view.t1) + ' of ' + fmtT(end) +
        (D.drawn < D.total ? ' (sample: ' + D.drawn + ' of ' + D.total + ' spans)' : '');
  }

  // Wheel, drag and scroll come many times a frame: they draw once a frame.
  function schedule() {
    if (!pending) {
      pending = true;
      requestAnimationFrame(render);
    }
  }
  function setView(t0, t1, now) {
    var s = Math.min(Math.max(t1 - t0, 0.01), end * 1.5);
    t0 = Math.max(-s * 0.25, Math.min(t0, end + s * 0.25 - s));
    view = {t0: t0, t1: t0 + s};
    if (now) render(); else schedule();
  }
  function zoom(f, at, now) {
    var c = at === undefined ? (view.t0 + view.t1) / 2 : at;
    setView(c - (c - view.t0) * f, c + (view.t1 - c) * f, now);
  }
  function timeAt(clientX) {
    var r = box.getBoundingClientRect();
    return view.t0 + (clientX - r.left - LABEL_W) / plotWidth() * (view.t1 - view.t0);
  }

  document.querySelectorAll('.tl-controls button').forEach(function (b) {
    b.addEventListener('click', function () {
      if (b.dataset.zoom) {
        zoom(Number(b.dataset.zoom), undefined, true);
      } else if (b.dataset.pan) {
        var d = (view.t1 - view.t0) * Number(b.dataset.pan);
        setView(view.t0 + d, view.t1 + d, true);
      } else {
        highlight = -1;
        setView(0, end, true);
      }
    });
  });
  box.addEventListener('wheel', function (e) {
    if (e.ctrlKey || e.altKey) {
      e.preventDefault();
      zoom(Math.exp(e.deltaY * 0.002), timeAt(e.clientX));
    } else if (e.shiftKey) {
      e.preventDefault();
      var d = (e.deltaY || e.deltaX) * (view.t1 - view.t0) / plotWidth();
      setView(view.t0 + d, view.t1 + d);
    }
  }, {passive: false});
  box.addEventListener('dblclick', function (e) { zoom(0.5, timeAt(e.clientX), true); });
  var drag = null;
  box.addEventListener('mousedown', function (e) {
    drag = {x: e.clientX, t0: view.t0, t1: view.t1};
    box.classList.add('dragging');
  });
  window.addEventListener('mouseup', function () {
    drag = null;
    box.classList.remove('dragging');
  });
  window.addEventListener('mousemove', function (e) {
    if (!drag) return;
    var d = (drag.x - e.clientX) * (drag.t1 - drag.t0) / plotWidth();
    setView(drag.t0 + d, drag.t1 + d);
  });
  box.addEventListener('scroll', schedule);
  window.addEventListener('resize', schedule);

  function tipLines(target) {
    var i = target.getAttribute('data-i');
    if (i !== null) {
      i = Number(i);
      var lines = [str(S.name[i]) + '  [' + str(S.cat[i]) + ']',
                   'duration ' + fmtT(S.dur[i]) + ', start ' + fmtT(S.ts[i])];
      if (S.bytes[i] !== null) lines.push('bytes ' + fmtB(S.bytes[i]) + ' (' + S.bytes[i] + ')');
      [['peer', S.peer], ['tag', S.tag], ['comm', S.comm], ['seq', S.seq],
       ['stream', S.stream]].forEach(function (p) {
        var v = p[1][i];
        if (v !== null && v !== -1) lines.push(p[0] + ' ' + v);  // -1: none
      });
      if (S.algo[i] >= 0) lines.push('algo ' + str(S.algo[i]));
      if (S.status[i] >= 0) lines.push('status ' + str(S.status[i]));
      if (S.factor[i] > 0) {
        lines.push('OUTLIER: ' + (S.factor[i] >= 1e9 ? 'n/a' : S.factor[i].toFixed(1) + 'x') +
                   ' the median ' + fmtT(S.median[i]) + ' of its kind');
      }
      return lines;
    }
    var n = target.getAttribute('data-n');
    if (n === null) return null;
    return [n + (n === '1' ? ' span' : ' spans') + ' narrower than a pixel: zoom in'];
  }
  svg.addEventListener('mousemove', function (e) {
    var lines = e.target.tagName === 'rect' ? tipLines(e.target) : null;
    if (!lines) {
      tip.hidden = true;
      return;
    }
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    tip.style.left = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = (e.clientY + 14) + 'px';
  });
  svg.addEventListener('mouseleave', function () { tip.hidden = true; });

  // A row of the outlier or straggler table shows its call or collective.
  document.querySelectorAll('tr[data-focus0]').forEach(function (tr) {
    tr.addEventListener('click', function () {
      highlight = Number(tr.dataset.span);
      document.getElementById('timeline').scrollIntoView();
      var lane = D.lanes.filter(function (l) {
        return highlight >= l.first && highlight < l.first + l.n;
      })[0];
      if (lane) box.scrollTop = Math.max(0, lane.y - box.clientHeight / 3);
      setView(Number(tr.dataset.focus0), Number(tr.dataset.focus1), true);
    });
  });

  render();
  svg.setAttribute('data-lanes', D.lanes.length);
})();
"""


def page(title, body, scripts):
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>"
            f'<body data-js-errors="0"><script>{ERRORS_JS}</script>{body}'
            f"{scripts}<script>{COMMON_JS}</script></body></html>\n")


def default_output(path):
    root, ext = os.path.splitext(path)
    out = (root if ext.lower() in (".json", ".jsonl", ".txt", ".log") else path) + ".html"
    if os.path.abspath(out) == os.path.abspath(path):
        out = path + ".report.html"
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG, description="Writes one self-contained HTML page (no network) from an hcomm "
        "profile (hcomm_profile.json) or from hcomm_bench --json output.",
        epilog="The rules for outliers and stragglers: see the page, or docs/profiling.md.")
    parser.add_argument("file", help="hcomm_profile.json, or hcomm_bench --json lines")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the page to write (default: FILE with .html for .json, beside it)")
    parser.add_argument("--max-spans", type=int, default=MAX_SPANS, metavar="N",
                        help="draw at most N spans on the timeline: the longest and every "
                        f"outlier (default {MAX_SPANS}); statistics always count all")
    args = parser.parse_args(argv)
    if os.environ.get("BUILD_WORKING_DIRECTORY"):
        os.chdir(os.environ["BUILD_WORKING_DIRECTORY"])  # `bazel run`: paths as typed
    if args.max_spans < 1:
        parser.error("--max-spans must be at least 1")
    try:
        kind, content, extra = read_input(args.file)
        if kind == "profile":
            title, body, scripts = profile_page(args.file, Profile(content, extra),
                                                args.max_spans)
        else:
            title, body, scripts = bench_page(args.file, content, extra)
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    out = args.output or default_output(args.file)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page(title, body, scripts))
    except OSError as e:
        print(f"{PROG}: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"{PROG}: wrote {out} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
