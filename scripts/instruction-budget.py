#!/usr/bin/env python3
"""The instruction budget of a message (issue 47): callgrind counts per message, per step,
sender and receiver, core and endpoint.

Runs, each twice with different message counts (the difference divided by the difference
of the counts is the cost per message, without set-up):

- `mem_pair`, two cores in memory (plaintext, 65 507-byte datagrams by default): every
  call into a node goes through a never-inlined function named after its step and role
  (`benches/src/core_pair.rs`, `mod step`), whose inclusive count is that step's budget;
  then again at 1 472-byte datagrams, one message each, for what a datagram costs the core
  of its own (`budget_core_one_per_datagram`: a request or a reply, a message at a real
  path's MTU);
- `endpoint_cost --threads`, two endpoints over loopback, each on its own thread, counted
  apart (`--separate-threads=yes`): per side, the core's share (every call from outside
  `exon::proto` into it, inclusive) and the rest by crate (self counts). It runs in real
  time (how many messages a wake-up takes varies), so it runs `--repeat` times (3): the
  tables are the run of the median figure beyond the core, and the last line lists every
  run's (`budget_endpoint_beyond_core_runs`). Beside it, the same sums with every
  instruction counted where its code was written (callgrind's `fi=`/`fe=` records of
  inlined code): the benchmark's loop, which the compiler inlines into tokio's
  `Context::enter`, is the application's there, and exon's generic futures compiled into
  the application's functions stay exon's (`budget_endpoint_beyond_core_by_source`).

Prints the tables, writes them with a last `key=value` line to
`target/instruction-budget.txt` (which `compare` appends to its own last line), and
prints that line last.

Beside the instructions, the locked (atomic read-modify-write) instructions each endpoint
thread executes a message, by place (`--dump-instr=yes`, each executed instruction matched
against the objects' disassembly): what a message costs a server core beyond its
instructions, where each such operation takes 15-25 cycles and more when contended.

With `--rpc C` it counts calls instead (`endpoint_cost --rpc C`: C callers on one thread
call an echo server on another, 1 KB each way), per call and per side, the same way, into
`target/instruction-budget-rpc.txt`.

    cargo bench -p exon-benches --bench mem_pair --bench endpoint_cost --no-run
    python3 scripts/instruction-budget.py [--sealed] [--datagram 65507] [--rpc 100] [--repeat 3]
"""

import argparse
import glob
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binary(name):
    paths = [
        p
        for p in glob.glob(os.path.join(ROOT, "target/release/deps", name + "-*"))
        if os.access(p, os.X_OK) and not p.endswith(".d")
    ]
    if not paths:
        sys.exit(f"no {name} binary: cargo bench -p exon-benches --bench {name} --no-run")
    return max(paths, key=os.path.getmtime)


def callgrind(cmd, out, threads=False):
    for f in glob.glob(out + "*"):
        os.remove(f)
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    if threads:
        args.append("--separate-threads=yes")
    r = subprocess.run(args + cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    if threads:
        return sorted(f for f in glob.glob(out + "-*"))
    return [out]


class Profile:
    """A callgrind output file: self counts per function and call arcs with their
    inclusive counts."""

    def __init__(self, path):
        self.names = {}
        self.self_cost = defaultdict(int)
        self.arcs = defaultdict(int)  # (caller, callee) -> inclusive
        self.total = 0
        self.files = {}  # function -> its object file's source (fl=)
        self.file_names = {}
        # By the source file each instruction was written in (`fi=`/`fe=`: code inlined
        # from another file), where that is exon's or the benchmark's (`site_of`), else by
        # the function's crate: {owner: self count}, and the inclusive counts of the calls
        # made there into the allocator and libc's copies ({owner: count}) and from the
        # core into anything outside it ({"core": count}, see `by_source`).
        self.self_by_site = defaultdict(int)
        self.services_by_site = defaultdict(int)
        self.core_calls_out = 0
        fl = None
        fi = None
        fn = None
        fn_owner = None
        cfn = None
        after_calls = False
        name_re = re.compile(r"\((\d+)\)(?: (.*))?")

        def name(ref):
            m = name_re.match(ref)
            if not m:
                return ref
            i, n = m.group(1), m.group(2)
            if n is not None:
                self.names[i] = n
            return self.names.get(i, i)

        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                c = line[0]
                if c.isdigit() or c in "+-*":
                    parts = line.split()
                    cost = int(parts[1]) if len(parts) > 1 else 0
                    site = site_of(fi) or site_of(fl) or fn_owner
                    if after_calls:
                        self.arcs[(fn, cfn)] += cost
                        after_calls = False
                        callee = owner_of(cfn, None)
                        if callee in SERVICES and fn_owner not in SERVICES:
                            self.services_by_site[site] += cost
                        elif site == "core" and callee != "core":
                            self.core_calls_out += cost
                    else:
                        self.self_cost[fn] += cost
                        self.total += cost
                        self.self_by_site[site] += cost
                elif line.startswith("fl="):
                    fl = self.file_name(line[3:])
                    fi = None
                elif line.startswith(("fi=", "fe=")):
                    fi = self.file_name(line[3:])
                elif line.startswith(("cfi=", "cfl=")):
                    self.file_name(line.split("=", 1)[1])
                elif line.startswith("fn="):
                    fn = name(line[3:])
                    fi = None
                    self.files.setdefault(fn, fl)
                    fn_owner = owner_of(fn, self.files[fn])
                elif line.startswith("cfn="):
                    cfn = name(line[4:])
                elif line.startswith("calls="):
                    after_calls = True

    def file_name(self, ref):
        m = re.match(r"\((\d+)\)(?: (.*))?", ref)
        if not m:
            return ref
        if m.group(2) is not None:
            self.file_names[m.group(1)] = m.group(2)
        return self.file_names.get(m.group(1), ref)

    def by_source(self):
        """{"core", "app", "total"}: the core's instructions and the application's, each
        counted where the code was written rather than by the function it was inlined
        into. The benchmark's loop inlined into the runtime's `Context::enter` is the
        application's; exon's generic futures compiled into the application's functions
        are exon's. Code of the standard library and other crates inlined into a
        function counts to that function's owner (their files say nothing of whose step
        it is). The allocator and libc's copies count to the place that called them; any
        call from the core's code out of it (a payload's drop) to the core, inclusive, as
        in `inclusive_into`."""
        return {
            "core": self.self_by_site["core"] + self.services_by_site["core"]
            + self.core_calls_out,
            "app": self.self_by_site["app"] + self.services_by_site["app"],
            "total": self.total,
        }

    def inclusive_into(self, pick, outside=lambda n: True):
        """Inclusive counts of the calls into functions `pick` accepts, from callers
        `outside` accepts, by callee."""
        got = defaultdict(int)
        for (caller, callee), cost in self.arcs.items():
            if pick(callee) and outside(caller) and not pick(caller):
                got[callee] += cost
        return got


def is_core(name):
    return name.startswith("exon::proto::") or name.startswith("<exon::proto::")


def site_of(path):
    """"core", "endpoint" or "app" for a source file of exon's core, of the rest of exon,
    or of the benchmark; None for any other (the standard library's, a dependency's,
    libc's)."""
    if not path:
        return None
    rel = path[len(ROOT) + 1:] if path.startswith(ROOT + "/") else path
    if rel.startswith("exon/src/proto/"):
        return "core"
    if rel.startswith("exon/src/"):
        return "endpoint"
    if rel.startswith("benches/"):
        return "app"
    return None


def owner_of(name, file):
    """The owner of a function's own code, as `site_of` names them, or its crate."""
    c = crate_of(name, file)
    return {
        "core (exon::proto)": "core",
        "endpoint (exon::endpoint)": "endpoint",
        "exon, other": "endpoint",
        "the application (bench)": "app",
    }.get(c, c)


def short(name):
    """`exon::proto::node::input::<impl exon::proto::node::Node>::handle_datagram_buf`
    -> `handle_datagram_buf`."""
    name = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", name))
    return name.rstrip(":").split("::")[-1] or name


# Crates whose counts are charged to their callers.
SERVICES = ("allocator", "libc copies")


def crate_of(name, file=None):
    if file and "/ring-" in file:
        return "ring"
    n = name.lstrip("<")
    for prefix, label in [
        ("exon::proto::", "core (exon::proto)"),
        ("exon::endpoint::", "endpoint (exon::endpoint)"),
        ("exon::", "exon, other"),
        ("tokio::", "tokio"),
        ("quinn_udp::", "quinn-udp"),
        ("bytes::", "bytes"),
        ("ring_core", "ring"),
        ("ring::", "ring"),
        ("exon_benches::", "the application (bench)"),
    ]:
        if n.startswith(prefix):
            return label
    if re.match(r"(_int_|malloc|free|cfree|realloc|__libc_malloc|__libc_free|tcache|__rustc::__r|__rust_|__rdl_)", n):
        return "allocator"
    if "memcpy" in n or "memmove" in n or "memset" in n:
        return "libc copies"
    if n.startswith(("core::", "alloc::", "std::", "__rust")):
        return "Rust std"
    return "other (libc, syscalls' user side)"


def per_message(a, b, n_a, n_b):
    return (b - a) / (n_b - n_a)


# The datagram size at which `mem_pair` sends one 1 KB message a datagram.
SMALL_DATAGRAM = 1472


def mem_pair_budget(plain, datagram, counts, extra=()):
    exe = binary("mem_pair")
    steps = {}
    totals = []
    for n in counts:
        out = f"/tmp/exon-budget.mem.{n}"
        cmd = [exe, "--messages", str(n), "--warmup", "5000", "--datagram", str(datagram)]
        cmd += list(extra)
        if plain:
            cmd.append("--plain")
        (path,) = callgrind(cmd, out)
        p = Profile(path)
        got = p.inclusive_into(lambda f: "core_pair::step::" in f)
        steps[n] = {short(k): v for k, v in got.items()}
        totals.append(p.total)
        os.remove(path)
    a, b = counts
    rows = {}
    for k in set(steps[a]) | set(steps[b]):
        rows[k] = per_message(steps[a].get(k, 0), steps[b].get(k, 0), a, b)
    total = per_message(totals[0], totals[1], a, b)
    return rows, total


def endpoint_cmd(plain, datagram):
    exe = binary("endpoint_cost")

    def cmd(n):
        c = [exe, "--messages", str(n), "--warmup", "2000", "--threads",
             "--datagram", str(datagram)]
        return c + (["--plain"] if plain else [])

    return cmd


# Thread 1 is the sender (the calling thread), thread 2 the receiver.
ENDPOINT_SIDES = {0: "sender", 1: "receiver"}


def endpoint_budget(plain, counts, datagram):
    return threads_budget(endpoint_cmd(plain, datagram), counts, ENDPOINT_SIDES, "ep")


def rpc_cmd(plain, callers):
    exe = binary("endpoint_cost")

    def cmd(n):
        c = [exe, "--rpc", str(callers), "--messages", str(n), "--warmup", "500"]
        return c + (["--plain"] if plain else [])

    return cmd


# Thread 1 drives the batches, thread 2 is the server, thread 3 the callers.
RPC_SIDES = {1: "server", 2: "caller"}


def rpc_budget(plain, counts, callers):
    return threads_budget(rpc_cmd(plain, callers), counts, RPC_SIDES, "rpc")


def threads_budget(cmd, counts, sides_of, tag):
    """Instructions per message (or call) of each thread `sides_of` names (by its index
    among the thread files): in all, the core's share (every call from outside
    `exon::proto` into it, inclusive), and the rest by crate."""
    sides = {}
    for n in counts:
        out = f"/tmp/exon-budget.{tag}.{n}"
        paths = callgrind(cmd(n), out, threads=True)
        for i, side in sides_of.items():
            p = Profile(paths[i])
            core = p.inclusive_into(is_core)
            by_step = defaultdict(int)
            for k, v in core.items():
                by_step[short(k)] += v
            core_total = sum(core.values())
            rest = defaultdict(int)
            for f, v in p.self_cost.items():
                if f is not None and not is_core(f):
                    rest[crate_of(f, p.files.get(f))] += v
            # Functions outside the core that the core calls (the allocator, copies,
            # ring) are in the core's inclusive share: their calls from the core are
            # taken out of their crate's count.
            # The allocator's and libc's copies' counts go to whoever called them.
            for (caller, callee), cost in p.arcs.items():
                if caller is None or is_core(callee):
                    continue
                to = crate_of(callee, p.files.get(callee))
                if is_core(caller):
                    rest[to] -= cost
                elif to in SERVICES:
                    by = crate_of(caller, p.files.get(caller))
                    if by not in SERVICES:
                        rest[to] -= cost
                        rest[f"{by}: {to}"] += cost
            sides.setdefault(side, {})[n] = {
                "total": p.total,
                "core": core_total,
                "steps": by_step,
                "rest": rest,
                "source": p.by_source(),
            }
        for f in paths:
            os.remove(f)
    a, b = counts
    result = {}
    for side, runs in sides.items():
        ra, rb = runs[a], runs[b]
        total = per_message(ra["total"], rb["total"], a, b)
        core = per_message(ra["core"], rb["core"], a, b)
        steps = {
            k: per_message(ra["steps"].get(k, 0), rb["steps"].get(k, 0), a, b)
            for k in set(ra["steps"]) | set(rb["steps"])
        }
        rest = {
            k: per_message(ra["rest"].get(k, 0), rb["rest"].get(k, 0), a, b)
            for k in set(ra["rest"]) | set(rb["rest"])
        }
        source = {k: per_message(ra["source"][k], rb["source"][k], a, b) for k in ra["source"]}
        result[side] = {"total": total, "core": core, "steps": steps, "rest": rest,
                        "source": source}
    return result


def parse_instr(path):
    """Executions of each instruction of a callgrind file written with `--dump-instr=yes
    --dump-line=no`: {(object file, address): count} (a shared object's addresses are its
    file's)."""
    cost = defaultdict(int)
    names = {}
    ob = None
    last = 0
    call_line = False
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "ob":
                    ob = names[m.group(2)]
                continue
            if line.startswith("calls="):
                call_line = True  # the next line is the call's inclusive cost
                continue
            if line[0] not in "0123456789+-*":
                continue
            parts = line.split()
            a = parts[0]
            if a.startswith("0x"):
                addr = int(a, 16)
            elif a[0] == "+":
                addr = last + int(a[1:])
            elif a[0] == "-":
                addr = last - int(a[1:])
            elif a == "*":
                addr = last
            else:
                addr = int(a)
            last = addr
            if call_line:
                call_line = False
                continue
            if len(parts) > 1:
                cost[(ob, addr)] += int(parts[1])
    return cost


_LOCKED = {}


def locked_instructions(obj):
    """{address: instruction} of an object's locked instructions: `lock`-prefixed ones and
    `xchg` with memory (locked without the prefix)."""
    if obj not in _LOCKED:
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj],
                             capture_output=True, text=True).stdout
        found = {}
        for line in dis.splitlines():
            m = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
            if m:
                ins = m.group(2).strip()
                if ins.startswith("lock ") or (ins.startswith("xchg") and "(" in ins):
                    found[int(m.group(1), 16)] = ins
        _LOCKED[obj] = found
    return _LOCKED[obj]


# The atomics' own frames, left out of a place's name (they say nothing of where).
ATOMIC_FRAMES = re.compile(r"^(atomic_|fetch_|compare_exchange|swap$|load$|store$)")


def place_of(obj, addrs):
    """The inlined call chain of each address: its three innermost functions past the
    atomics' own (short names, innermost first)."""
    r = subprocess.run(["addr2line", "-f", "-C", "-i", "-a", "-e", obj],
                       input="\n".join(hex(a) for a in addrs), capture_output=True, text=True)
    places = {}
    for block in r.stdout.split("0x")[1:]:
        lines = block.strip().splitlines()
        fns = [short(lines[i]) for i in range(1, len(lines), 2)]
        fns = [f for f in fns if not ATOMIC_FRAMES.match(f)] or fns
        places[int(lines[0], 16)] = " <- ".join(fns[:3])
    return places


def locked_budget(cmd, counts, sides_of, tag):
    """Locked instructions per message of each thread `sides_of` names: in all, and by
    place."""
    runs = {}
    for n in counts:
        out = f"/tmp/exon-budget.locked.{tag}.{n}"
        for f in glob.glob(out + "*"):
            os.remove(f)
        args = ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--dump-line=no",
                "--separate-threads=yes", f"--callgrind-out-file={out}"]
        r = subprocess.run(args + cmd(n), capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd(n))} failed:\n{r.stderr[-2000:]}")
        paths = sorted(glob.glob(out + "-*"))
        runs[n] = {}
        for i, side in sides_of.items():
            got = defaultdict(int)
            for (ob, addr), c in parse_instr(paths[i]).items():
                if ob and os.path.exists(ob) and addr in locked_instructions(ob):
                    got[(ob, addr)] += c
            runs[n][side] = got
        for f in paths:
            os.remove(f)
    a, b = counts
    result = {}
    for side in sides_of.values():
        ra, rb = runs[a][side], runs[b][side]
        per = {k: per_message(ra.get(k, 0), rb.get(k, 0), a, b) for k in set(ra) | set(rb)}
        by_place = defaultdict(float)
        for ob in {k[0] for k in per}:
            addrs = [k[1] for k in per if k[0] == ob]
            places = place_of(ob, addrs)
            for addr in addrs:
                by_place[places.get(addr, os.path.basename(ob))] += per[(ob, addr)]
        result[side] = (sum(per.values()), by_place)
    return result


def locked_tables(out, result, what):
    """Appends the locked instructions' tables to `out`; returns their keys."""
    keys = {}
    for side, (total, places) in result.items():
        out.append("")
        out += table(f"{what}, {side}: locked instructions per message, by place (innermost "
                     "first)", places, total, min_share=0.02, places=2)
        keys[f"budget_locked_{side}"] = round(total, 1)
    return keys


def table(title, rows, total=None, min_share=0.005, places=0):
    lines = [title]
    shown = sorted(rows.items(), key=lambda kv: -kv[1])
    small = 0.0
    for k, v in shown:
        if round(v, places) == 0:
            continue
        if total and abs(v) < min_share * total:
            small += v
            continue
        lines.append(f"  {k:<44} {v:>8.{places}f}")
    if small:
        lines.append(f"  {'(smaller items)':<44} {small:>8.{places}f}")
    if total is not None:
        lines.append(f"  {'total':<44} {total:>8.{places}f}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datagram", type=int, default=65507,
                    help="mem_pair's datagram size (the core budget's; default 65507)")
    ap.add_argument("--endpoint-datagram", type=int, default=1472,
                    help="the endpoints' datagram size (default 1472: one message each)")
    ap.add_argument("--sealed", action="store_true",
                    help="sealed cores and endpoints (default plaintext)")
    ap.add_argument("--skip-endpoint", action="store_true")
    ap.add_argument("--rpc", type=int, metavar="CALLERS",
                    help="count calls from this many callers instead (endpoint_cost --rpc)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the threaded (endpoint or RPC) measure: its tables are the "
                         "run of the median figure beyond the core, and the last line lists "
                         "every run's (default 3)")
    args = ap.parse_args()
    plain = not args.sealed
    mode = "plaintext" if plain else "sealed"
    if args.rpc:
        return rpc_main(plain, mode, args.rpc, max(1, args.repeat))

    out = []
    keys = {}
    steps, total = mem_pair_budget(plain, args.datagram, (10000, 40000))
    core_sum = sum(steps.values())
    out += table(
        f"mem_pair ({mode}, {args.datagram}-byte datagrams): instructions per message, by step",
        {k.replace("_", " ", 1): v for k, v in steps.items()},
    )
    out.append(f"  {'core, both sides':<44} {core_sum:>8.0f}")
    out.append(f"  {'the harness (copies, payloads, checks)':<44} {total - core_sum:>8.0f}")
    sender = sum(v for k, v in steps.items() if k.startswith("sender"))
    receiver = sum(v for k, v in steps.items() if k.startswith("receiver"))
    keys.update(
        budget_core=round(core_sum),
        budget_core_sender=round(sender),
        budget_core_receiver=round(receiver),
    )
    # One message a datagram (a request or a reply, a 1 KB message at a real path's MTU):
    # what a datagram costs the core of its own, which the 64 KB figure spreads thin.
    # With a bounded backlog, the sender's queue does not grow with the run (its regrowths
    # would count as a cost per message): the figure then moves by under 1 % with the counts.
    small, _ = mem_pair_budget(plain, SMALL_DATAGRAM, (10000, 40000), ("--backlog", "1024"))
    small_sum = sum(small.values())
    out.append("")
    out.append(f"mem_pair ({mode}, {SMALL_DATAGRAM}-byte datagrams: one message each)")
    out.append(f"  {'core, both sides':<44} {small_sum:>8.0f}")
    keys["budget_core_one_per_datagram"] = round(small_sum)
    if not args.skip_endpoint:
        title = (f"endpoint_cost --threads ({mode}, {args.endpoint_datagram}-byte datagrams), "
                 "{side}: core calls (inclusive)")
        keys.update(median_of_runs(
            out, max(1, args.repeat), "budget_endpoint",
            lambda o: both_sides(o, endpoint_budget(plain, (10000, 30000), args.endpoint_datagram),
                                 ("sender", "receiver"), title, "endpoint", "budget_endpoint")))
        locked = locked_budget(endpoint_cmd(plain, args.endpoint_datagram), (10000, 30000),
                               ENDPOINT_SIDES, "ep")
        keys.update(locked_tables(out, locked, "endpoint_cost --threads"))
    keys["budget_mode"] = mode
    keys["budget_datagram"] = args.datagram
    keys["budget_commit"] = commit()
    write_out(out, keys, "target/instruction-budget.txt")


def side_tables(out, result, sides, title):
    """Appends each side's tables (`title` formatted with the side) to `out`; returns the
    sides' totals summed: all, the core's share, the application's (the benchmark's own
    work, making and checking payloads: neither the core's nor the endpoint's)."""
    both_total = both_core = both_app = 0.0
    for side in sides:
        s = result[side]
        out.append("")
        out += table(title.format(side=side), s["steps"], s["core"], min_share=0.01)
        out += table(
            f"  {side}: outside the core, self counts by crate", s["rest"],
            s["total"] - s["core"], min_share=0.0,
        )
        out.append(f"  {side + ' thread, all':<44} {s['total']:>8.0f}")
        both_total += s["total"]
        both_core += s["core"]
        both_app += sum(v for k, v in s["rest"].items() if k.startswith("the application"))
    return both_total, both_core, both_app


def both_sides(out, result, sides, title, what, prefix):
    """The sides' tables (`side_tables`) and a line summing both, appended to `out`; returns
    the sums' keys under `prefix`: all, the core's share, the application's, beyond the
    core."""
    total, core, app = side_tables(out, result, sides, title)
    beyond = total - core - app
    out.append("")
    out.append(f"{what}, both sides: {total:.0f}; the core's share {core:.0f}; "
               f"the application's {app:.0f}; beyond the core {beyond:.0f}")
    # The same, each instruction counted where its code was written (`Profile.by_source`).
    s_core = sum(result[s]["source"]["core"] for s in sides)
    s_app = sum(result[s]["source"]["app"] for s in sides)
    s_beyond = total - s_core - s_app
    per_side = ", ".join(
        f"{s} {result[s]['total'] - result[s]['source']['core'] - result[s]['source']['app']:.0f}"
        for s in sides)
    out.append(f"  by source file: the core's share {s_core:.0f}; the application's "
               f"{s_app:.0f}; beyond the core {s_beyond:.0f} ({per_side})")
    return {
        prefix: round(total),
        f"{prefix}_core": round(core),
        f"{prefix}_app": round(app),
        f"{prefix}_beyond_core": round(beyond),
        f"{prefix}_beyond_core_by_source": round(s_beyond),
    }


def write_out(out, keys, path):
    """Ends `out` with the `key=value` line, writes it to `path` (under the repository) and
    prints it."""
    out.append("")
    out.append(" ".join(f"{k}={v}" for k, v in keys.items()))
    text = "\n".join(out) + "\n"
    os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
    with open(os.path.join(ROOT, path), "w") as f:
        f.write(text)
    print(text, end="")


def median_of_runs(out, repeat, prefix, run):
    """Runs the threaded measure `run` (which appends its tables to the list it is given and
    returns its keys) `repeat` times; appends to `out` the tables of the run whose figure
    beyond the core is the median, and returns that run's keys with every run's figure
    (`{prefix}_beyond_core_runs`, smallest first). The threaded measures run in real time
    (how many messages a wake-up takes varies), so one run moves by up to 10 %."""
    runs = []
    for _ in range(repeat):
        o = []
        k = run(o)
        runs.append((k[f"{prefix}_beyond_core"], o, k))
    runs.sort(key=lambda r: r[0])
    _, o, keys = runs[len(runs) // 2]
    out += o
    if repeat > 1:
        out.append(f"(the median of {repeat} runs beyond the core: "
                   f"{', '.join(str(r[0]) for r in runs)})")
        keys = dict(keys)
        keys[f"{prefix}_beyond_core_runs"] = "/".join(str(r[0]) for r in runs)
    return keys


def rpc_main(plain, mode, callers, repeat):
    out = []
    title = (f"endpoint_cost --rpc {callers} ({mode}): instructions per call, "
             "{side}: core calls (inclusive)")

    def run(o):
        r = rpc_budget(plain, (2000, 6000), callers)
        k = {f"budget_rpc_{side}": round(r[side]["total"]) for side in ("caller", "server")}
        k.update(both_sides(o, r, ("caller", "server"), title, "a call", "budget_rpc"))
        return k

    keys = median_of_runs(out, repeat, "budget_rpc", run)
    locked = locked_budget(rpc_cmd(plain, callers), (2000, 6000), RPC_SIDES, "rpc")
    keys.update(locked_tables(out, locked, f"endpoint_cost --rpc {callers}"))
    keys.update(
        budget_rpc_callers=callers,
        budget_mode=mode,
        budget_commit=commit(),
    )
    write_out(out, keys, "target/instruction-budget-rpc.txt")


def commit():
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return rev + ("+" if dirty else "")


if __name__ == "__main__":
    main()
