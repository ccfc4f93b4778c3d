#!/usr/bin/env python3
"""check_trace.py: validates a Chrome Trace Event / Perfetto JSON file.

    python3 check_trace.py TRACE.json [--expect-cat CAT ...] [--expect-name NAME ...]

Checks the JSON object format ({"traceEvents": [...], "displayTimeUnit":
"ms"|"ns"}), every event's fields and types for its phase (X complete,
B/E begin/end, C counter, M metadata, i/I instant), durations >= 0,
timestamps that never go back on one thread (in file order, for X/B/E),
B/E pairs balanced per thread, and X events well nested per thread: an
event that starts inside another must end inside it. --expect-cat and
--expect-name require at least one X event of that category / name.

Exits 0 when valid; 1 with one line per problem (the first 20) otherwise.
Standard library only, so any python3 runs it.
"""
import json
import sys

EPS_US = 1e-3  # timestamps are microseconds; allow for decimal rounding

PHASES = {"X", "B", "E", "C", "M", "i", "I"}


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check(doc, expect_cats=(), expect_names=()):
    problems = []

    def bad(msg):
        problems.append(msg)

    if not isinstance(doc, dict):
        return ["top level is not an object with traceEvents"]
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is missing or not a list"]
    unit = doc.get("displayTimeUnit", "ms")
    if unit not in ("ms", "ns"):
        bad("displayTimeUnit is %r, expected 'ms' or 'ns'" % (unit,))

    last_ts = {}      # tid -> last X/B/E ts
    stacks = {}       # tid -> open X events [(name, end)]
    be_stacks = {}    # tid -> open B names
    cats, names = set(), set()
    for i, ev in enumerate(events):
        where = "event %d" % i
        if not isinstance(ev, dict):
            bad("%s is not an object" % where)
            continue
        ph = ev.get("ph")
        if ph not in PHASES:
            bad("%s has phase %r" % (where, ph))
            continue
        if not isinstance(ev.get("name"), str):
            bad("%s has no string name" % where)
        where = "%s (%s %r)" % (where, ph, ev.get("name"))
        if not isinstance(ev.get("pid"), int):
            bad("%s has no integer pid" % where)
        if ph != "M" and not isinstance(ev.get("tid", 0), int):
            bad("%s has a non-integer tid" % where)
        if "args" in ev and not isinstance(ev["args"], dict):
            bad("%s has args that are not an object" % where)
        if ph == "M":
            continue
        ts = ev.get("ts")
        if not is_num(ts):
            bad("%s has no numeric ts" % where)
            continue
        tid = (ev.get("pid"), ev.get("tid", 0))
        if ph == "C":
            args = ev.get("args")
            if not isinstance(args, dict) or not args or not all(is_num(v) for v in args.values()):
                bad("%s: a counter needs numeric args" % where)
            continue
        if ph in ("i", "I"):
            continue
        if ts + EPS_US < last_ts.get(tid, float("-inf")):
            bad("%s: ts %.3f goes back on thread %s (previous %.3f)" % (where, ts, tid[1], last_ts[tid]))
        last_ts[tid] = max(ts, last_ts.get(tid, ts))
        if ph == "B":
            be_stacks.setdefault(tid, []).append(ev.get("name"))
            continue
        if ph == "E":
            st = be_stacks.get(tid, [])
            if not st:
                bad("%s: an end without a begin on thread %s" % (where, tid[1]))
            else:
                st.pop()
            continue
        # ph == "X"
        dur = ev.get("dur")
        if not is_num(dur) or dur < 0:
            bad("%s: dur must be a number >= 0, got %r" % (where, dur))
            continue
        if not isinstance(ev.get("cat", ""), str):
            bad("%s: cat must be a string" % where)
        cats.add(ev.get("cat"))
        names.add(ev.get("name"))
        end = ts + dur
        st = stacks.setdefault(tid, [])
        while st and st[-1][1] <= ts + EPS_US:
            st.pop()  # ended before this one starts
        if st and end > st[-1][1] + EPS_US:
            bad("%s [%.3f, %.3f] overlaps %r [.., %.3f] on thread %s without nesting in it"
                % (where, ts, end, st[-1][0], st[-1][1], tid[1]))
        st.append((ev.get("name"), end))
    for tid, st in be_stacks.items():
        if st:
            bad("thread %s: %d begin event(s) never ended (%s)" % (tid[1], len(st), ", ".join(map(str, st))))
    for c in expect_cats:
        if c not in cats:
            bad("no X event of category %r (categories: %s)" % (c, ", ".join(sorted(map(str, cats)))))
    for n in expect_names:
        if n not in names:
            bad("no X event named %r" % (n,))
    if not any(isinstance(e, dict) and e.get("ph") == "X" for e in events):
        bad("no complete (X) events")
    return problems


def main(argv):
    args, cats, names = [], [], []
    it = iter(argv[1:])
    for a in it:
        if a == "--expect-cat":
            cats.append(next(it, ""))
        elif a == "--expect-name":
            names.append(next(it, ""))
        else:
            args.append(a)
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("%s: not readable JSON: %s" % (args[0], e))
        return 1
    problems = check(doc, cats, names)
    for p in problems[:20]:
        print("%s: %s" % (args[0], p))
    if len(problems) > 20:
        print("%s: ... and %d more" % (args[0], len(problems) - 20))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
