#!/usr/bin/env python3
"""Finds the seeds on which a rule's self-test meets its defect: for each seed, the
simulator's run with the rule switched off must fail with the named violation and the same
run with every rule on must end clean. A change that moves datagram sizes or timings (a
wire change, a controller's) moves the seeds the `exon-sim/tests/cli.rs` self-tests use;
this finds new ones.

    cargo build --release -p exon-sim
    python3 scripts/seed-sweep.py --args "--drop-every 2 --restarts 1 --messages 5000" \\
        --rule request_carries_waiver --kind Lost [--seeds 1-200] [--jobs 2]

`--args` are the test's arguments without `--seed` (a `--rules-off` in them stays on in
both runs); prints each seed that meets the defect (`ok`), or on which the run with the rule
on fails too (`rule-on-fails`), and a last `key=value` line.
"""

import argparse
import concurrent.futures as cf
import subprocess
import sys


def run(sim, args):
    p = subprocess.run([sim] + args, capture_output=True, text=True, timeout=3600)
    return p.returncode, p.stderr


def check(sim, base, rule, kind, seed):
    args = base + ["--seed", str(seed)]
    rc, err = run(sim, args + ["--rules-off", rule])
    if rc == 0 or kind not in err:
        return None
    rc, _ = run(sim, args)
    return "ok" if rc == 0 else "rule-on-fails"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="target/release/exon-sim")
    ap.add_argument("--args", required=True, help="the run's arguments, without --seed")
    ap.add_argument("--rule", required=True, help="the rule to switch off")
    ap.add_argument("--kind", required=True, help="the violation kind the defect shows")
    ap.add_argument("--seeds", default="1-100", help="a range, first-last")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    first, last = (int(x) for x in a.seeds.split("-"))
    base = a.args.split()
    found = {}
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futures = {
            ex.submit(check, a.sim, base, a.rule, a.kind, s): s for s in range(first, last + 1)
        }
        for f in cf.as_completed(futures):
            r = f.result()
            if r:
                found[futures[f]] = r
    for seed in sorted(found):
        print(f"seed {seed}: {found[seed]}")
    ok = [s for s in sorted(found) if found[s] == "ok"]
    print(f"seeds={a.seeds} met={len(ok)} first={ok[0] if ok else '-'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
