#!/usr/bin/env python3
"""A random campaign of the simulator: random flags and seeds for a while, every run that
fails written down with its command line (found so far: a channel question's durable
give-up taken for a message never sent; more sources than receiver records evicting each
other's fresh records; jitter taken for a queue, BENCHMARKS.md "Jitter is not a queue").

    cargo build --release -p exon-sim
    python3 scripts/sim-campaign.py [--secs 600] [--seed 1] [--out target/sim-campaign]
        [--require restore,deadline-ms]

Writes under `--out`: `fails.txt` (command lines and the last lines of their output),
`limits.txt` (runs with `--restore` whose violations are all of the kinds a restored copy
is documented to cause: docs/durability.md, "Restoring an old copy") and `refused.txt`
(combinations the simulator refuses as scenarios); prints a last `key=value` line. Heavy
cells (100 000-byte messages at 20 % loss with jitter or bursts) may end "Lost" after the
settle time: the slow cells BENCHMARKS.md names ("Jitter is not a queue"), not
exactly-once breaches. A run cut off with only unfinished work (messages not yet delivered,
journals not yet empty) is run once more with a settle time of 40 000 virtual seconds, and
counts as slow, not failed, if it then ends clean (`slow_long` in the last line, its end
time in `slow.txt`).
"""

import argparse
import os
import random
import re
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flags(rng):
    a = ["--nodes", str(rng.choice([2, 2, 3, 4])),
         "--messages", str(rng.choice([500, 1000, 2000, 4000]))]

    def maybe(p, *opts):
        if rng.random() < p:
            a.extend(opts)

    maybe(0.7, "--loss", str(rng.choice([0.01, 0.05, 0.1, 0.2])))
    maybe(0.4, "--dup", str(rng.choice([0.02, 0.1])))
    maybe(0.4, "--reorder", str(rng.choice([0.05, 0.2, 0.5])))
    if "--reorder" in a:
        # Datagrams held for seconds (stale GOTs and ACKs after newer ones, as the fuzz
        # target's 26-second gaps found: a message whole at its receiver left with no timer).
        maybe(0.25, "--reorder-max-delay-ms", str(rng.choice([500, 5000])))
    maybe(0.3, "--burst", str(rng.choice([0.01, 0.05])))
    maybe(0.3, "--partitions", str(rng.choice([1, 3])))
    maybe(0.5, "--restarts", str(rng.choice([1, 3, 6])))
    maybe(0.2, "--plaintext")
    maybe(0.3, "--jitter-ms", str(rng.choice([2, 20])))
    maybe(0.2, "--payload", str(rng.choice([16, 3000, 20000, 100000])))
    maybe(0.15, "--record-cap", str(rng.choice([1, 2, 8])))
    maybe(0.15, "--take-delay-ms", str(rng.choice([5, 200])))
    # Path shapes: a bottleneck with its queue (shared by every sender into a node, or
    # one per link), a long or a short path, the other congestion controller.
    maybe(0.2, "--rate", str(rng.choice([2_000_000, 20_000_000])))
    if "--rate" in a:
        maybe(0.4, "--shared-queue")
        # A short queue, or one of a few datagrams: a policer.
        maybe(0.3, "--queue-bytes", str(rng.choice([4000, 32768])))
    maybe(0.15, "--latency-ms", str(rng.choice([1, 50])))
    maybe(0.1, "--congestion", "new-reno")
    mode = rng.choice(["plain", "durable", "durable", "rpc", "channels", "streams"])
    if mode == "plain" and "--shared-queue" in a:
        maybe(0.5, "--traffic", "incast")
    keyed = False
    # Streams are durable only; keyed sends are plain messages without deadlines.
    if mode in ("durable", "streams") or (mode != "plain" and rng.random() < 0.4):
        a.append("--durable")
        maybe(0.5, "--crash-mid-commit", str(rng.choice([1, 3])))
        maybe(0.2, "--damage", str(rng.choice([1, 2])))
        maybe(0.2, "--journal-loss", "1")
        keyed = mode == "durable" and rng.random() < 0.2
        if keyed:
            a.append("--keyed")
        maybe(0.15, "--restore", str(rng.choice([1, 2])))
        maybe(0.15, "--abandon-crash", str(rng.choice([1, 3])))
        maybe(0.2, "--compact-after", str(rng.choice([50, 500])))
        maybe(0.1, "--durable-at-restart")
    # Durable flows need their journals whole; keys are forgotten undetected by a restore.
    if mode in ("streams", "channels"):
        drop(a, "--damage", "--journal-loss", "--restore", "--durable-at-restart")
    if keyed:
        drop(a, "--restore", "--durable-at-restart")
    if mode != "streams" and not keyed:
        maybe(0.2, "--deadline-ms", str(rng.choice([100, 300, 2000])))
    if mode == "rpc":
        a.append("--rpc")
        maybe(0.5, "--call-deadline-ms", str(rng.choice([200, 1000])))
        maybe(0.3, "--fail-one-in", "7")
    if mode == "channels":
        a += ["--channels", str(rng.choice([1, 4, 16]))]
        maybe(0.3, "--channel-windows", rng.choice(["2,64", "4,8", "1,1024"]))
        maybe(0.3, "--plain-one-in", "5")
        maybe(0.3, "--stall-query-ms", str(rng.choice([200, 1000])))
    if mode == "streams":
        a += ["--streams", str(rng.choice([1, 4, 8]))]
        maybe(0.3, "--stream-chunk", str(rng.choice([100, 5000])))
        maybe(0.3, "--stream-window", str(rng.choice([2, 16])))
    seed = rng.randrange(1, 10**9)
    return a + more_flags(random.Random(seed), mode, a) + ["--seed", str(seed)]


def more_flags(rng, mode, base):
    """Settings a deployment may choose that the draws above leave at their defaults:
    small paths and datagram ceilings, small windows, slow or eager acknowledgements, a
    disk under the clock, losses in step with the exchange, late duplicates, messages of
    mixed sizes. Drawn from the run's own seed, so the draws above (and earlier campaigns'
    command lines) are as they were."""
    a = []

    def maybe(p, *opts):
        if rng.random() < p:
            a.extend(opts)

    if rng.random() < 0.1:
        mtu = rng.choice([1200, 1280, 9000])
        a += ["--link-mtu", str(mtu)]
        # Discovery off asserts the path carries the size: not with a queue shorter than
        # one datagram (a black hole for full ones, docs/wire.md "Path MTU discovery").
        short_queue = "--queue-bytes" in base and int(base[base.index("--queue-bytes") + 1]) < mtu
        if rng.random() < 0.5 and not short_queue:
            a += ["--no-mtu-discovery", "--max-datagram", str(mtu)]
        else:
            maybe(0.5, "--route", str(rng.choice([1500, 9000, 65507])))
    if rng.random() < 0.1:
        window, target, low = rng.choice([(1, 1, 1), (2, 2, 1), (4, 2, 1), (16, 8, 4), (64, 32, 8)])
        a += ["--window", str(window), "--envelope-target", str(target), "--envelope-low", str(low)]
    maybe(0.1, "--ack-delay-ms", str(rng.choice([0, 50, 200])))
    maybe(0.1, "--ack-every", str(rng.choice([1, 64])))
    maybe(0.1, "--disk-sync-us", str(rng.choice([50, 2000])))
    if "--disk-sync-us" in a:
        maybe(0.3, "--no-torn-writes")
    maybe(0.05, "--drop-every", str(rng.choice([2, 3, 7])))
    maybe(0.1, "--dup-delay-ms", str(rng.choice([50, 20000])))
    if mode in ("plain", "durable") and "--payload" not in base:
        maybe(0.1, "--max-payload", str(rng.choice([5000, 200000])))
    if mode == "rpc":
        # Nodes that serve each other in a cycle with fewer sender records than peers wait
        # on each other until their deadlines (README, "Known limits"): only with deadlines.
        cycle_ok = "--record-cap" not in base or "--deadline-ms" in base
        maybe(0.2, "--servers", str(rng.choice([0, 2] if cycle_ok else [2])))
        maybe(0.2, "--message-one-in", str(rng.choice([2, 5])))
    if mode == "streams":
        maybe(0.3, "--stream-io", str(rng.choice([100, 70000])))
        maybe(0.3, "--store-delay-ms", str(rng.choice([0, 50])))
    # An application that forgets its deadlines at a restore: the restored node sends
    # again, in the slots its copy knew, messages the lost run gave up (the waived-slot
    # class of `Rules::doubt_below_forgotten`). Drawn last, so the draws above are as they
    # were for earlier campaigns.
    if "--restore" in base and "--deadline-ms" in base:
        maybe(0.5, "--restore-forgets-deadlines")
    # Servers that hand a turn's replies to their core together (`Node::reply_many`), as
    # the endpoint's driver does. Drawn last too.
    if mode == "rpc":
        maybe(0.5, "--replies-together")
    return a


def drop(a, *names):
    """Removes each flag of `names` (and its value, when it has one) from `a`."""
    for name in names:
        if name in a:
            i = a.index(name)
            has_value = i + 1 < len(a) and not a[i + 1].startswith("--")
            del a[i : i + 1 + has_value]


# What a restored copy of a directory may cause (docs/durability.md): a message resent by
# the restored sender, and so a request executed and a call answered twice; one the copy
# knew no slot for given up at its deadline as not delivered, though the lost run
# delivered it.
RESTORE_LIMITS = {
    "ResentByRestoredSender",
    "ReplyTwice",
    "ExecutedTwice",
    "Duplicate",
    "DeliveredAfterNotDelivered",
}


def violation_kinds(out):
    """The kinds of violation a failed run's report names."""
    kinds = set(re.findall(r"\(([A-Za-z]+), \d+\)", " ".join(l for l in out if "by kind" in l)))
    kinds |= set(re.findall(r"^\s+([A-Z][A-Za-z]+) at ", "\n".join(out), re.M))
    return kinds


def limits_only(args, out):
    """Whether a failed run's violations are all a restored copy's documented limits."""
    if "--restore" not in args:
        return False
    kinds = violation_kinds(out)
    return bool(kinds) and kinds <= RESTORE_LIMITS


# What a run cut off by its settle time reports about the messages it had not finished.
# Violations of work not finished (a channel not released to its end is one: its messages
# are still on their way), as opposed to work done wrong.
UNFINISHED = {"Lost", "NotAcknowledged", "JournalNotEmpty", "NotIdle", "ChannelBlocked", "ReplyLost",
              "StreamIncomplete",
              "CallNotEnded"}


def still_moving(out):
    """Whether a failed run was only cut off while still making progress: every violation
    is of a message or journal not finished, and the last ACK (or stream bytes stored:
    `done_s`), or the first delivery of a message the report lists, came within the last
    10 s of virtual time, or within twice
    the run's own mean time between ACKs once it has a hundred (a slow heavy cell, not a
    livelock: those show neither for the whole settle time; NewReno's backed-off timers at
    20 % loss can leave more than 10 s between ACKs while deliveries go on, and a path
    that drops every other datagram besides 10 % at random moved 100 000-byte messages one
    every 18 s, steadily, until the event cap cut it off)."""
    kinds = violation_kinds(out)
    done = re.search(r"done_s=([0-9.]+) virtual_s=([0-9.]+)", out[-1] if out else "")
    if not kinds or not kinds <= UNFINISHED or not done:
        return False
    last = float(done.group(1))
    for first in re.findall(r"\(first ([0-9.]+)s\)", "\n".join(out)):
        last = max(last, float(first))
    # The pace counts only over many ACKs: a run that acknowledged a few messages long ago
    # and then stopped is not moving.
    acked = re.search(r" acked=([0-9]+)", out[-1])
    pace = last / int(acked.group(1)) if acked and int(acked.group(1)) >= 100 else 0.0
    return float(done.group(2)) - last < max(10.0, 2.0 * pace)


# The settle time a run whose work was cut off unfinished gets once more (virtual seconds):
# NewReno at 20 % loss and bursts moves 100 000-byte messages at about 30 KB/s, as a
# loss-based controller must there (a timeout-bound rate), and outlasts the default settle
# time with minutes between deliveries.
LONG_SETTLE_S = 40000


def finishes_later(sim, args):
    """When a run cut off unfinished ends clean (or, with `--restore`, with a restored
    copy's documented limits only) with a much longer settle time (its last event, in
    virtual seconds): slow, not stuck. `None` if it does not (a livelock stays
    unfinished, or reaches the simulator's event cap). A fault that only slows a run down
    ends clean too: `slow.txt` gives the time, for a reader to compare with the cell's
    usual one."""
    if "--settle-s" in args:
        return None
    try:
        p = subprocess.run([sim] + args + ["--settle-s", str(LONG_SETTLE_S)],
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None
    out = (p.stdout + p.stderr).strip().split("\n")
    done = re.search(r"done_s=([0-9.]+)", out[-1] if out else "")
    if not done or (p.returncode != 0 and not limits_only(args, out)):
        return None
    return float(done.group(1))


def unfinished_only(args, out):
    """Whether every violation of a failed run is of work not finished (or, for a run with
    `--restore`, one of a restored copy's documented limits)."""
    kinds = violation_kinds(out)
    allowed = UNFINISHED | (RESTORE_LIMITS if "--restore" in args else set())
    return bool(kinds) and kinds <= allowed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--secs", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "sim-campaign"))
    ap.add_argument("--sim", default=os.path.join(ROOT, "target", "release", "exon-sim"))
    ap.add_argument("--require", default="",
                    help="comma-separated flags (without their dashes) every run must draw, "
                         "e.g. restore,deadline-ms: a campaign focused on one class")
    args = ap.parse_args()
    required = [f"--{f}" for f in args.require.split(",") if f]
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    runs = fails = refused = limits = slow = slow_long = 0
    end = time.time() + args.secs
    with open(os.path.join(args.out, "fails.txt"), "w") as f, \
            open(os.path.join(args.out, "refused.txt"), "w") as r, \
            open(os.path.join(args.out, "limits.txt"), "w") as lim, \
            open(os.path.join(args.out, "slow.txt"), "w") as sl:
        while time.time() < end:
            a = flags(rng)
            if any(f not in a for f in required):
                continue
            runs += 1
            try:
                p = subprocess.run([args.sim] + a, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                fails += 1
                f.write("TIMEOUT " + " ".join(a) + "\n")
                f.flush()
                continue
            out = (p.stdout + p.stderr).strip().split("\n")
            last = out[-1] if out else ""
            if "violations=" not in last:
                refused += 1
                r.write(" ".join(a) + " :: " + last[:300] + "\n")
            elif p.returncode != 0 and limits_only(a, out):
                limits += 1
                lim.write(" ".join(a) + "\n")
            elif p.returncode != 0 and still_moving(out):
                slow += 1
                sl.write(" ".join(a) + "\n  " + out[-1][:300] + "\n")
            elif p.returncode != 0 and unfinished_only(a, out) and (
                    done := finishes_later(args.sim, a)) is not None:
                slow += 1
                slow_long += 1
                sl.write(" ".join(a) + f"\n  clean at {done:.0f} s with --settle-s "
                         f"{LONG_SETTLE_S}; cut off: " + out[-1][:300] + "\n")
            elif p.returncode != 0:
                fails += 1
                f.write(" ".join(a) + "\n  " + "\n  ".join(out[-6:])[:3000] + "\n")
                f.flush()
    print(f"runs={runs} fails={fails} limits={limits} slow={slow} slow_long={slow_long} "
          f"refused={refused} out={args.out}")


if __name__ == "__main__":
    main()
