#!/usr/bin/env python3
"""Checks an hcomm profile as a trace viewer would read it.

    python3 check_trace.py hcomm_profile.json [--ranks N] [--straggler R]

1. The file validates against trace_event_schema.json (beside this script)
   with jsonschema's Draft 7 validator: the Trace Event Format's object
   form, complete (X) and metadata (M) events, hcomm's args.
2. Every process (rank) is named, and every track a span uses.
3. Spans on one track nest (Perfetto and chrome://tracing draw a track as
   a stack of nested slices; a partial overlap breaks it).
4. With --ranks N: N processes, the clock error of each is known.
5. With --straggler R: in the slowest allreduce that every rank ran, rank R
   arrived last.

Prints what it found; exit status 0 when every check holds, 1 otherwise.
"""

import argparse
import collections
import json
import os
import sys

import jsonschema


def fail(why):
    print("check_trace: FAIL: " + why)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--straggler", type=int)
    args = ap.parse_args()
    with open(args.file) as f:
        trace = json.load(f)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "trace_event_schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(trace), key=str)
    if errors:
        fail("%d schema errors, the first: %s at %s" % (
            len(errors), errors[0].message, list(errors[0].absolute_path)))

    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tracks = {(e["pid"], e["tid"]) for e in events
                    if e["ph"] == "M" and e["name"] == "thread_name"}
    for s in spans:
        if s["pid"] not in named_pids:
            fail("rank %d has spans but no process_name" % s["pid"])
        if (s["pid"], s["tid"]) not in named_tracks:
            fail("track %d of rank %d has no thread_name" % (s["tid"], s["pid"]))

    tracks = collections.defaultdict(list)
    for s in spans:
        tracks[(s["pid"], s["tid"])].append((s["ts"], s["ts"] + s["dur"], s["name"]))
    for (pid, tid), v in tracks.items():
        v.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for b, e, name in v:
            while stack and stack[-1][0] <= b + 1e-3:
                stack.pop()
            if stack and e > stack[-1][0] + 1e-3:
                fail("rank %d track %d: %s (%.3f-%.3f us) overlaps %s ending at %.3f" % (
                    pid, tid, name, b, e, stack[-1][1], stack[-1][0]))
            stack.append((e, name))

    other = trace["otherData"]
    if args.ranks is not None:
        if len(named_pids) != args.ranks or other["nranks"] != args.ranks:
            fail("%d ranks named, nranks %d, want %d" % (
                len(named_pids), other["nranks"], args.ranks))
        if len(other["clock_error_us"]) != args.ranks:
            fail("clock_error_us has %d entries" % len(other["clock_error_us"]))
    print("check_trace: %d spans on %d tracks of %d ranks validate and nest; clock error "
          "up to %.1f us; dropped %s" % (len(spans), len(tracks), len(named_pids),
                                         max(other["clock_error_us"]), other["dropped_events"]))

    if args.straggler is not None:
        calls = collections.defaultdict(dict)  # (comm, seq) -> {rank: span}
        for s in spans:
            if s["cat"] == "collective" and s["name"] == "allreduce":
                calls[(s["args"]["comm"], s["args"]["seq"])][s["pid"]] = s
        whole = [c for c in calls.values() if len(c) == len(named_pids)]
        if not whole:
            fail("no allreduce that every rank ran")
        slowest = max(whole, key=lambda c: max(s["dur"] for s in c.values()))
        last = max(slowest, key=lambda r: slowest[r]["ts"])
        lag = slowest[last]["ts"] - min(s["ts"] for s in slowest.values())
        print("check_trace: the slowest allreduce (seq %d, %.0f us): rank %d arrived last, "
              "%.0f us after the first" % (next(iter(slowest.values()))["args"]["seq"],
                                           max(s["dur"] for s in slowest.values()), last, lag))
        if last != args.straggler:
            fail("rank %d arrived last, not rank %d" % (last, args.straggler))
    return 0


if __name__ == "__main__":
    sys.exit(main())
