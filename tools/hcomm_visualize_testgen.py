#!/usr/bin/env python3
"""Writes inputs for tools/hcomm_visualize_test.sh: a synthetic profile or
hcomm_bench --json lines, deterministic (fixed seed).

  python3 tools/hcomm_visualize_testgen.py profile OUT.json
  python3 tools/hcomm_visualize_testgen.py bench OUT.jsonl

The profile (the format of shared/API.md, "Profiling"): 4 ranks, each with
"thread 1" (a "task step" span holding allreduces and broadcasts, so spans
nest), "thread 2" (sends and recvs), "stream 1 (priority 10)" (stream
allreduces) and "scheduler" (task spans). Allreduces of 4 KiB, 64 KiB and
1 MiB take about 15 us, 60 us and 1.5 ms. One 1 MiB allreduce is the planted
straggler: rank 2 starts it 30 ms after the others, so on ranks 0, 1 and 3
the call lasts about 31.5 ms, 21 times its kind's median. Its (comm, seq) is
printed on stdout as "straggler comm=0 seq=S" for the test. Rank 2 also
reports 5 dropped events and one recv ends in "timeout".

The bench lines: three series as hcomm_bench writes them (allreduce over
shm on 4 ranks, allreduce over tcp on 4 ranks, p2p over shm on 2 ranks),
8 B to 1 MiB, with a "[rank 0] " prefix on some lines (hcomm_run's), a
comment line, and a "priority" row without a bandwidth.
"""

import json
import random
import sys

NRANKS = 4
COMM = 0
SIZES = [(4096, 15.0), (65536, 60.0), (1 << 20, 1500.0)]  # bytes, typical us
LATE_US = 30000.0
LATE_STEP = 6  # the step whose 1 MiB allreduce rank 2 joins late
STEPS = 10
T_START = 1000.0


def meta(pid, tid, name, args):
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def span(pid, tid, ts, dur, name, cat, args):
    return {"ph": "X", "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3),
            "name": name, "cat": cat, "args": args}


def profile(out_path):
    rng = random.Random(7)
    events = []
    for r in range(NRANKS):
        events.append(meta(r, 0, "process_name", {"name": f"rank {r}"}))
        events.append(meta(r, 0, "process_sort_index", {"sort_index": r}))
        events.append(meta(r, 1, "thread_name", {"name": "thread 1"}))
        events.append(meta(r, 2, "thread_name", {"name": "thread 2"}))
        events.append(meta(r, 1001, "thread_name", {"name": "stream 1 (priority 10)"}))
        events.append(meta(r, 2001, "thread_name", {"name": "scheduler"}))

    seq = 0
    late_seq = None
    t = T_START
    for step in range(STEPS):
        step_start = t
        # Collectives on thread 1, inside one "task step" span per rank.
        for name in ("allreduce", "broadcast"):
            for nbytes, typical in SIZES:
                late = name == "allreduce" and nbytes == 1 << 20 and step == LATE_STEP
                arrive = [t + rng.uniform(0, 5) for _ in range(NRANKS)]
                if late:
                    arrive[2] = t + LATE_US
                    late_seq = seq
                speed = 1.0 if name == "allreduce" else 0.6  # a broadcast moves less
                end = max(arrive) + typical * speed * rng.uniform(0.95, 1.05)
                for r in range(NRANKS):
                    args = {"bytes": nbytes, "count": nbytes // 4, "dtype": "float32",
                            "op": "sum" if name == "allreduce" else "", "peer": -1,
                            "root": 0 if name == "broadcast" else -1, "tag": -1,
                            "algo": "ring" if nbytes >= 65536 else "direct", "comm": COMM,
                            "seq": seq, "stream": -1, "status": "ok"}
                    events.append(span(r, 1, arrive[r], end - arrive[r], name, "collective", args))
                seq += 1
                t = end + 10
        for r in range(NRANKS):
            events.append(span(r, 1, step_start - 1, t - step_start + 2, "task step", "task",
                               {"task": "step", "priority": 0, "status": "ok"}))
        # Point-to-point on thread 2: rank r sends 64 KiB to r+1.
        for r in range(NRANKS):
            peer = (r + 1) % NRANKS
            ts = t + rng.uniform(0, 5)
            dur = 40 * rng.uniform(0.9, 1.1)
            events.append(span(r, 2, ts, dur, "send", "p2p",
                               {"bytes": 65536, "peer": peer, "tag": 5, "comm": COMM, "seq": step,
                                "stream": -1, "status": "ok"}))
            # The recv starts after every send of this step has ended (spans on
            # one track nest; they never overlap partly).
            status = "timeout" if (r == 3 and step == STEPS - 1) else "ok"
            events.append(span(peer, 2, ts + 50, dur, "recv", "p2p",
                               {"bytes": 65536, "peer": r, "tag": 5, "comm": COMM, "seq": step,
                                "stream": -1, "status": status}))
        # A stream allreduce and the scheduler task that issued it.
        for r in range(NRANKS):
            ts = t + 110 + rng.uniform(0, 5)
            dur = 70 * rng.uniform(0.9, 1.1)
            events.append(span(r, 1001, ts, dur, "allreduce", "stream",
                               {"bytes": 65536, "count": 16384, "dtype": "float32", "op": "sum",
                                "algo": "ring", "comm": COMM, "seq": 1000 + step, "stream": 1,
                                "status": "ok"}))
            events.append(span(r, 2001, ts - 2, dur + 4, "task grad_sync", "task",
                               {"task": "grad_sync", "priority": 10, "status": "ok"}))
        t += 200
    doc = {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"format": "hcomm profile 1", "nranks": NRANKS, "hcomm_version": "0.3.0",
                      "clock_error_us": [0.0, 1.5, 3.2, 2.0], "dropped_events": [0, 0, 5, 0],
                      "file_written_by": "rank 0"},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    print(f"straggler comm={COMM} seq={late_seq}")


def bench(out_path):
    lines = ["# hcomm_bench allreduce: 4 ranks, transport shm (the table's header, not JSON)"]
    series = [("allreduce", "shm", 4, 12.0), ("allreduce", "tcp", 4, 2.5), ("p2p", "shm", 2, 9.0)]
    for op, transport, nranks, peak in series:
        nbytes = 8
        while nbytes <= 1 << 20:
            time_us = 5.0 + nbytes / (peak * 1e3)
            algbw = nbytes / time_us / 1e3
            busbw = algbw * (2 * (nranks - 1) / nranks if op == "allreduce" else 1)
            row = {"op": op, "bytes": nbytes, "time_us": round(time_us, 3),
                   "algbw_gbs": round(algbw, 6), "busbw_gbs": round(busbw, 6), "wrong": 0,
                   "iters": 100, "runs": 5, "nranks": nranks, "transport": transport,
                   "checked": True}
            prefix = "[rank 0] " if transport == "tcp" else ""
            lines.append(prefix + json.dumps(row, separators=(",", ":")))
            nbytes *= 8
    lines.append(json.dumps({"op": "priority", "mode": "alone", "small_bytes": 8,
                             "small_us": 20.5, "runs": 5, "nranks": 2, "transport": "shm"}))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("profile", "bench"):
        print("usage: hcomm_visualize_testgen.py profile|bench OUT", file=sys.stderr)
        return 2
    (profile if sys.argv[1] == "profile" else bench)(sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
