#!/usr/bin/env bash
# Tests hcomm-visualize (tools/hcomm_visualize.py) end to end: pages made
# from a synthetic profile and from hcomm_bench-like JSON lines
# (tools/hcomm_visualize_testgen.py) are rendered in headless Chromium
# (Debian's chromium), and the DOM after the page's script ran is read back:
#   profile  no network references; no script error (the page's own counter,
#            <body data-js-errors>, and Chromium's console log) and the
#            rendering marker; the timeline's 16 lanes, span rectangles and
#            outlier rectangles; rank 2 named as the straggler of the
#            collective it joined 30 ms late, and that call's spans on ranks
#            0, 1 and 3 (not 2) listed as outliers about 20x their median;
#            a screenshot (kept in $TEST_UNDECLARED_OUTPUTS_DIR);
#   sample   --max-spans 50 draws at most 50 spans plus the outliers, says
#            so, and keeps the statistics of all spans;
#   odd      a profile with missing args, odd pids and malformed events;
#   bench    one chart path per series, one point per size;
#   errors   not JSON, neither format, a missing file: exit 1 with
#            "hcomm-visualize: ..."; no arguments, a bad flag: exit 2.
# Usage: hcomm_visualize_test.sh TOOL TESTGEN   (Bazel passes the locations)
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 PATH_TO_HCOMM_VISUALIZE PATH_TO_TESTGEN" >&2
  exit 2
fi
tool="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
gen="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
chromium="${CHROMIUM:-/usr/bin/chromium}"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/hcomm_visualize.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failures=0
current=""

fail() {
  echo "FAIL [$current]: $*" >&2
  failures=$((failures + 1))
}
begin() { current="$1"; echo "=== $1"; }

if [[ ! -x "$chromium" ]]; then
  echo "FAIL: $chromium is missing (tools/setup.sh installs Debian's chromium)" >&2
  exit 1
fi

# browser NAME PAGE FLAGS...: headless Chromium on PAGE; stdout in
# $work/NAME.out, stderr in $work/NAME.err. timeout: it never hangs the test.
browser() {
  local name="$1" page="$2"
  shift 2
  local profile
  profile="$(mktemp -d "$work/chromium.XXXXXX")"
  HOME="$work" timeout -k 5 120 "$chromium" --headless --no-sandbox --disable-gpu \
    --no-first-run --user-data-dir="$profile" --enable-logging=stderr --v=0 "$@" \
    "file://$page" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || { fail "chromium exited $rc on $page"; tail -n 20 "$work/$name.err" >&2; }
}

# rendered NAME PAGE: --dump-dom into $work/NAME.out; fails on any console
# line of the page (Chromium's own dbus/GPU warnings are not the page's), a
# page error counted in <body data-js-errors>, or a missing rendering marker.
rendered() {
  browser "$1" "$2" --dump-dom --window-size=1400,2000
  if grep -E 'CONSOLE|Uncaught' "$work/$1.err" | grep -F "file://$2" >&2; then
    fail "the page logged to the console (above)"
  fi
  if grep -q 'Uncaught' "$work/$1.err"; then
    fail "an uncaught script error: $(grep Uncaught "$work/$1.err")"
  fi
  local body
  body="$(grep -o '<body[^>]*>' "$work/$1.out" | head -n 1)"
  [[ "$body" == *'data-js-errors="0"'* ]] || fail "script errors in the page: $body"
  [[ "$body" == *'data-rendered="1"'* ]] || fail "the page did not finish rendering: $body"
}

# no_network FILE: no URL at all, so nothing to fetch (src, href, url(), @import).
no_network() {
  local attr='(src|href|action)[[:space:]]*=[[:space:]]*["'"'"']?[[:space:]]*([a-z]+:)?//'
  if grep -Eio "${attr}[^ ]{0,60}" "$1"; then
    fail "$1 refers to the network (above)"
  fi
  if grep -Eq '://|@import|url\(|<link|<iframe' "$1"; then
    fail "$1 holds a URL, @import, url(), <link> or <iframe>"
  fi
}

# check MODE DOM [ARGS]: the DOM checks, in Python (html.parser).
cat >"$work/check.py" <<'EOF'
import re
import sys
from html.parser import HTMLParser


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rows, self.texts = [], [], []
        self.row = self.cell = None
        self.open = None

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        self.open = (tag, a)
        if tag == "tr":
            self.row = {"attrs": a, "cells": []}
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row["cells"].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None
        self.open = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)
        if self.open and self.open[0] == "text":
            self.texts.append((self.open[1].get("class", ""), data))


errors = []


def expect(ok, what):
    if not ok:
        errors.append(what)


mode, path = sys.argv[1], sys.argv[2]
dom = Dom()
dom.feed(open(path, encoding="utf-8").read())
classes = lambda tag: [a.get("class", "").split() for t, a in dom.tags if t == tag]
rows = lambda cls: [r for r in dom.rows if r["attrs"].get("class") == cls]
svg = [a for t, a in dom.tags if t == "svg" and a.get("id") == "tl-svg"]

if mode in ("profile", "sample"):
    seq = sys.argv[3]
    expect(svg and svg[0].get("data-lanes") == "16", f"timeline lanes: {svg}")
    spans = [c for c in classes("rect") if "span" in c]
    outlier_rects = [c for c in spans if "outlier" in c]
    expect(len(outlier_rects) == 7, f"{len(outlier_rects)} outlier rectangles, expected 7")
    if mode == "profile":
        expect(len(spans) >= 100, f"only {len(spans)} span rectangles in the timeline")
        expect(any("c-err" in c for c in spans), "no rectangle for the recv that timed out")
    else:
        expect(len(spans) <= 50 + 7, f"{len(spans)} span rectangles drawn with --max-spans 50")
        expect("draws a sample, the 50 longest" in open(path, encoding="utf-8").read(),
               "the sample is not announced")
    groups = [d for c, d in dom.texts if c == "tl-group"]
    expect(groups == ["rank 0", "rank 1", "rank 2", "rank 3"], f"rank rows: {groups}")
    lanes = [d for c, d in dom.texts if c == "tl-lane"]
    expect(lanes.count("stream 1 (priority 10)") == 4 and lanes.count("thread 2") == 4,
           f"lanes: {lanes}")

    strag = [r for r in rows("straggler-row") if r["attrs"].get("data-seq") == seq]
    expect(len(strag) == 1, f"{len(strag)} straggler rows for seq {seq}")
    if strag:
        r = strag[0]
        expect(r["attrs"].get("data-last-rank") == "2", f"straggler row: {r}")
        expect(r["cells"][7] == "rank 2", f"last to arrive: {r['cells']}")
        late = re.match(r"([\d.]+) ms", r["cells"][8])
        expect(late and 29.9 <= float(late.group(1)) <= 30.1, f"later than first: {r['cells']}")
        expect(r["cells"][10] == "yes", f"not marked as an outlier: {r['cells']}")
    raw = open(path, encoding="utf-8").read()
    expect('class="straggler-summary">Arrived last: rank 2 in ' in raw,
           "the straggler summary does not name rank 2 first")
    out = [r for r in rows("outlier-row") if r["attrs"].get("data-op") == "allreduce"]
    expect(sorted(r["attrs"].get("data-rank") for r in out) == ["0", "1", "3"],
           f"allreduce outliers: {[r['attrs'] for r in out]}")
    for r in out:
        expect(r["attrs"].get("data-seq") == seq, f"outlier of another call: {r['attrs']}")
        factor = float(r["cells"][10].rstrip("x"))
        expect(18 <= factor <= 24, f"slower: {r['cells']}")
        expect(r["cells"][11].endswith(" ms") and float(r["cells"][11][:-3]) > 29,
               f"slower by: {r['cells']}")
    ops = {(r["cells"][0], r["cells"][1]): r["cells"] for r in rows("op-row")}
    expect(ops.get(("allreduce", "collective"), [None] * 3)[2] == "120",
           f"allreduce count: {ops.get(('allreduce', 'collective'))}")
    expect(ops.get(("send", "p2p"), [None] * 8)[7] == "2.5 MiB",
           f"send bytes: {ops.get(('send', 'p2p'))}")
    ranks = {r["attrs"]["data-rank"]: r["cells"] for r in rows("rank-row")}
    expect(ranks.get("2", [None] * 4)[2:] == ["5", "3.2"], f"rank 2 dropped/clock: {ranks}")
    paths = [a.get("data-series") for t, a in dom.tags if t == "path"]
    expect({"allreduce", "broadcast", "allreduce (stream)"} <= set(paths),
           f"bandwidth series: {paths}")
    if mode == "sample":
        full = sys.argv[4]
        ref = Dom()
        ref.feed(open(full, encoding="utf-8").read())
        ref_ops = [r["cells"] for r in ref.rows if r["attrs"].get("class") == "op-row"]
        expect([r["cells"] for r in rows("op-row")] == ref_ops,
               "the statistics differ from those of the whole profile")
elif mode == "odd":
    expect(svg and int(svg[0].get("data-spans-drawn", "0")) == 3, f"timeline: {svg}")
    text = open(path, encoding="utf-8").read()
    expect("3 events were skipped" in text, "the skipped events are not reported")
elif mode == "bench":
    paths = [a for t, a in dom.tags if t == "path" and "series" in a.get("class", "")]
    names = sorted(a.get("data-series") for a in paths)
    expect(names == ["allreduce shm 4 ranks", "allreduce tcp 4 ranks", "p2p shm 2 ranks"],
           f"series: {names}")
    for a in paths:
        points = len(re.findall(r"[ML]", a.get("d", "")))
        expect(points == 6, f"{a.get('data-series')}: {points} points, expected 6")
    bench = rows("bench-row")
    expect(len(bench) == 19, f"{len(bench)} table rows, expected 19")
    expect(any(r["cells"][0] == "priority alone shm 2 ranks" for r in bench),
           "the priority row is missing from the table")
if errors:
    print("\n".join(errors))
    sys.exit(1)
EOF
check() {
  local out
  out="$(python3 "$work/check.py" "$@" 2>&1)" || fail "$1 checks of $2:"$'\n'"$out"
}

# --- profile ------------------------------------------------------------------
begin "profile"
t0=$(date +%s)
python3 "$gen" profile "$work/hcomm_profile.json" >"$work/gen.txt" || fail "testgen failed"
seq="$(sed -n 's/^straggler comm=0 seq=\([0-9]*\)$/\1/p' "$work/gen.txt")"
[[ -n "$seq" ]] || fail "testgen printed no straggler: $(cat "$work/gen.txt")"
# Without -o the page is hcomm_profile.html beside the input.
(cd "$work" && mkdir -p elsewhere && cd elsewhere && "$tool" ../hcomm_profile.json) \
  >"$work/tool.out" 2>&1 || fail "the tool failed: $(cat "$work/tool.out")"
page="$work/hcomm_profile.html"
if [[ -s "$page" ]]; then
  no_network "$page"
  rendered profile "$page"
  check profile "$work/profile.out" "$seq"
  shot="$work/hcomm_visualize.png"
  browser screenshot "$page" --screenshot="$shot" --window-size=1400,1000 --hide-scrollbars
  size=$(stat -c %s "$shot" 2>/dev/null || echo 0)
  [[ $size -gt 10240 ]] || fail "screenshot $shot has $size bytes, expected > 10 KB"
  [[ "$(head -c 4 "$shot" 2>/dev/null | tail -c 3)" == "PNG" ]] || fail "the screenshot is no PNG"
  if [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" && -f "$shot" ]]; then
    mkdir -p "$TEST_UNDECLARED_OUTPUTS_DIR" && cp "$shot" "$page" "$TEST_UNDECLARED_OUTPUTS_DIR/"
  fi
else
  fail "no $page"
fi

# --- sample: fewer spans drawn, the same statistics ------------------------------
begin "sample"
"$tool" "$work/hcomm_profile.json" -o "$work/sample.html" --max-spans 50 >/dev/null 2>&1 ||
  fail "--max-spans 50 failed"
rendered sample "$work/sample.html"
check sample "$work/sample.out" "$seq" "$work/profile.out"

# --- odd: what the tool must tolerate ---------------------------------------------
begin "odd"
cat >"$work/odd.json" <<'EOF'
{"traceEvents": [
 {"ph":"X","pid":0,"tid":1,"ts":10,"dur":5,"name":"barrier"},
 {"ph":"X","pid":"host-b","tid":"main","ts":12,"dur":3,"name":"<b>send</b>","cat":"p2p",
  "args":{"bytes":"lots"}},
 {"ph":"X","pid":1,"tid":1,"ts":11,"dur":4,"name":"allreduce","cat":"collective","args":{"comm":0}},
 {"ph":"X","pid":1,"tid":1,"ts":"soon","dur":4,"name":"bad ts"},
 {"ph":"X","pid":1,"tid":1,"ts":20,"dur":-1,"name":"bad dur"},
 {"ph":"i","pid":1,"tid":1,"ts":20,"name":"instant"},
 42
], "otherData": {"dropped_events": "unknown"}}
EOF
"$tool" "$work/odd.json" >/dev/null 2>"$work/odd.err" ||
  fail "odd.json refused: $(cat "$work/odd.err")"
if [[ -f "$work/odd.html" ]]; then
  grep -q '<b>send' "$work/odd.html" && fail "a span name was not escaped"
  rendered odd "$work/odd.html"
  check odd "$work/odd.out"
fi
# An empty profile is a page too.
echo '{"traceEvents": []}' >"$work/empty.json"
"$tool" "$work/empty.json" >/dev/null 2>&1 || fail "an empty profile was refused"
[[ -f "$work/empty.html" ]] && rendered empty "$work/empty.html"

# --- bench ------------------------------------------------------------------------
begin "bench"
python3 "$gen" bench "$work/bench.jsonl" || fail "testgen bench failed"
"$tool" "$work/bench.jsonl" -o "$work/bench.html" >"$work/tool.out" 2>&1 ||
  fail "the tool failed on bench lines: $(cat "$work/tool.out")"
if [[ -f "$work/bench.html" ]]; then
  no_network "$work/bench.html"
  rendered bench "$work/bench.html"
  check bench "$work/bench.out"
fi

# --- errors -----------------------------------------------------------------------
begin "errors"
# expect_exit RC PATTERN ARGS...: the tool exits RC, stderr matches PATTERN.
expect_exit() {
  local want="$1" pattern="$2"
  shift 2
  "$tool" "$@" >"$work/err.out" 2>"$work/err.err"
  local rc=$?
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want"
  grep -Eq "$pattern" "$work/err.err" || fail "'$*': stderr '$(cat "$work/err.err")' !~ $pattern"
}
printf 'this is not json\n' >"$work/text.txt"
expect_exit 1 '^hcomm-visualize: .*text.txt is not JSON' "$work/text.txt" -o "$work/text.html"
[[ -e "$work/text.html" ]] && fail "a page was written for a non-JSON file"
echo '{"rank": 0, "value": 1}' >"$work/neither.json"
expect_exit 1 '^hcomm-visualize: .*is neither an hcomm profile' "$work/neither.json"
head -c 3000 "$work/hcomm_profile.json" >"$work/cut.json"
expect_exit 1 '^hcomm-visualize: .*not JSON.*cut short' "$work/cut.json"
expect_exit 1 '^hcomm-visualize: cannot read' "$work/missing.json"
expect_exit 2 '^usage: hcomm-visualize' # no arguments
expect_exit 2 '^hcomm-visualize: error: unrecognized' "$work/bench.jsonl" --bogus
if ! "$tool" --help >"$work/help.out" 2>&1 || ! grep -q '^usage: hcomm-visualize' "$work/help.out"
then
  fail "--help: $(cat "$work/help.out")"
fi

echo "ran in $(( $(date +%s) - t0 )) s"
if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
