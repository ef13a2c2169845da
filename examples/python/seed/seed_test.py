"""Runs each seed script exactly as written under hcomm_run and checks what
it prints (examples/python/seed/README.md lists them).

Skipped, with the message "skipped: python3-torch not installed", when
torch cannot be imported.
"""

import os
import subprocess
import sys
import time
import unittest

try:
    import torch  # noqa: F401  (the scripts import it)
except ImportError:
    torch = None

import hcomm

SKIP_MESSAGE = "skipped: python3-torch not installed"
HERE = os.path.dirname(os.path.abspath(__file__))


def _runfile(rel):
    for d in (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR")):
        if d and os.path.exists(os.path.join(d, "hcomm", rel)):
            return os.path.join(d, "hcomm", rel)
    raise unittest.SkipTest("%s not in the runfiles" % rel)


def run(script, n, extra_env=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(hcomm.__file__)))
    for k in ("HCOMM_RANK", "HCOMM_WORLD_SIZE", "HCOMM_STORE_ADDR", "HCOMM_JOB_TOKEN",
              "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(extra_env or {})
    t0 = time.monotonic()
    p = subprocess.run([_runfile("tools/hcomm_run"), "-n", str(n), "--timeout", "90", "--",
                        sys.executable, os.path.join(HERE, script)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    print("== %s on %d ranks: exit %d in %.1f s\n%s"
          % (script, n, p.returncode, time.monotonic() - t0, p.stdout), flush=True)
    return p.returncode, p.stdout


@unittest.skipIf(torch is None, SKIP_MESSAGE)
class Seed(unittest.TestCase):
    def test_p2p_sync(self):
        rc, out = run("p2p_sync.py", 2)
        self.assertEqual(rc, 0, out)
        self.assertIn("[rank 1] Rank 1 received data: tensor([1., 1., 1., 1., 1., 1., 1., 1., "
                      "1., 1.])", out)

    def test_p2p_async(self):
        rc, out = run("p2p_async.py", 2)
        self.assertEqual(rc, 0, out)
        self.assertIn("[rank 1] Rank 1 received: sum = 2048.0", out)

    def test_multi_machine(self):
        rc, out = run("multi_machine.py", 8)
        self.assertEqual(rc, 0, out)
        self.assertIn("[rank 4] Rank 4 received [42.0, 42.0, 42.0, 42.0] from machine 0", out)
        for r in range(8):
            self.assertIn("Rank %d (machine %d): allreduce within the machine = %s"
                          % (r, r // 4, "6.0" if r < 4 else "22.0"), out)

    def test_pipeline(self):
        rc, out = run("pipeline.py", 4)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"\[rank 3\] Rank 3: loss [0-9.]+ -> [0-9.]+")

    def test_parameter_server(self):
        rc, out = run("parameter_server.py", 4)
        self.assertEqual(rc, 0, out)
        self.assertIn("[rank 0] Server: parameters", out)

    def test_deadlock_ends_in_a_named_timeout(self):
        t0 = time.monotonic()
        rc, out = run("deadlock.py", 2, {"HCOMM_TIMEOUT_MS": "2000"})
        self.assertNotEqual(rc, 0, out)
        self.assertLess(time.monotonic() - t0, 60)
        self.assertRegex(out, r"hcomm.TimeoutError: hcomm operation timeout: rank [01]: recv "
                              r"from rank [01] tag 0 \(capacity 16 bytes\) timed out after")


if __name__ == "__main__":
    if torch is None:
        print(SKIP_MESSAGE, file=sys.stderr, flush=True)
    unittest.main()
