"""rank_procs.py: the ember ranks of one mpirun job, found through /proc
(shared by the data-parallel tests: test_ddp.py, test_ddp_gpu.py)."""
import os


def rank_pids(ember, home):
    """{rank: pid} of the processes running `ember` whose environment has
    OMPI_COMM_WORLD_RANK and EMBER_HOME == home (a test's own job, never
    another's)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if not f.read().startswith(ember.encode()):
                    continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if b"OMPI_COMM_WORLD_RANK" in env and env.get(b"EMBER_HOME") == home.encode():
                out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(d)
        except (OSError, ValueError):
            continue
    return out
