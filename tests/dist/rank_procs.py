"""rank_procs.py: the ember ranks of one mpirun job, found through /proc,
and signalling them (shared by the data-parallel tests: test_ddp.py, test_ddp_gpu.py)."""
import os
import signal


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


def rank_pid(ember, home, rank):
    """The pid of `rank` of that job; an AssertionError (a test failure)
    when it is not running."""
    pids = rank_pids(ember, home)
    if rank not in pids:
        raise AssertionError("no rank %d found (ranks running: %s)" % (rank, sorted(pids)))
    return pids[rank]


def send(pid, sig):
    """os.kill that ignores a process already gone."""
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def kill_ranks(ember, home):
    """SIGKILLs what is left of that job's ranks (never other processes)."""
    for pid in rank_pids(ember, home).values():
        send(pid, signal.SIGKILL)
