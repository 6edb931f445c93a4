#!/usr/bin/env python3
"""Structure figures of the repository (issue 21): fields open to sibling modules per struct,
files with `impl Node`, files writing each timer field, import cycles, hand-written drains,
test binaries, largest file and function. Run from the repository root: python3 scripts/structure.py
Exits 1 when any crate (exon, exon-sim, benches) has an import cycle: CI runs it (.ci/run)."""
import os, re, sys, collections
root = sys.argv[1] if len(sys.argv) > 1 else '.'
def rs_files(d):
    for dp, dn, fn in os.walk(os.path.join(root, d)):
        if 'target' in dp: continue
        for f in fn:
            if f.endswith('.rs'): yield os.path.join(dp, f)
src = list(rs_files('exon/src'))
# 1. fields open to siblings per struct
open_fields = {}
for f in src:
    txt = open(f).read()
    for m in re.finditer(r'^(\s*)(pub(?:\([^)]*\))?\s+)?struct\s+(\w+)[^{;]*\{(.*?)^\1\}', txt, re.S | re.M):
        vis, name, body = m.group(2) or '', m.group(3), m.group(4)
        fields = re.findall(r'^\s*(pub(?:\([^)]*\))?)\s+(?:r#)?\w+\s*:', body, re.M)
        if vis.strip() == 'pub':
            n = sum(1 for v in fields if v != 'pub')   # crate-visible fields of a public struct
        else:
            n = len(fields)
        total = len(re.findall(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:r#)?\w+\s*:\s*[^,]', body, re.M))
        if n: open_fields[f'{os.path.relpath(f, root)}::{name}'] = (n, total)
print('## fields open to siblings (struct: open/total)')
for k, (n, t) in sorted(open_fields.items(), key=lambda x: -x[1][0]):
    print(f'  {n:3}/{t:<3} {k}')
print(f'  structs with open fields: {len(open_fields)}, open fields: {sum(v[0] for v in open_fields.values())}')
# 2. files with impl Node
impl_node = [os.path.relpath(f, root) for f in src if re.search(r'^impl Node\b', open(f).read(), re.M)]
print(f'## files with `impl Node`: {len(impl_node)}', *impl_node, sep='\n  ')
# 3. files writing each timer field
timer_fields = ['rto_at', 'pace_at', 'loss_at', 'idle_since', 'req_sent_at', 'armed', 'ack_at', 'last_probe', 'last_heard']
print('## files writing each timer field')
for t in timer_fields:
    ws = sorted({os.path.relpath(f, root) for f in src if re.search(r'\b' + t + r'\s*(=[^=]|\.take\(\)|\.replace\()', open(f).read())})
    print(f'  {t}: {len(ws)} {ws}')
# 4. import cycles (module graph per package source dir)
def modgraph(base):
    files = [f for f in rs_files(base)]
    def modname(f):
        r = os.path.relpath(f, os.path.join(root, base))[:-3]
        r = re.sub(r'(^|/)(mod|lib|main)$', '', r)
        return r.replace('/', '::')
    mods = {modname(f): f for f in files}
    g = collections.defaultdict(set)
    for m, f in mods.items():
        txt = open(f).read()
        # A test module, private or shared with other tests (`pub(crate) mod tests`).
        txt = re.split(r'#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))?\s+)?mod tests', txt)[0]
        parent = m.rsplit('::', 1)[0] if '::' in m else ''
        for path in re.findall(r'\b((?:crate|super|self)(?:::\w+)+)', txt):
            parts = path.split('::')
            if parts[0] == 'crate': cur = []; parts = parts[1:]
            elif parts[0] == 'self': cur = m.split('::') if m else []; parts = parts[1:]
            else:
                cur = m.split('::') if m else []
                # a file module's super is its parent
                while parts and parts[0] == 'super':
                    cur = cur[:-1]; parts = parts[1:]
            # longest prefix that is a module
            best = None
            for i in range(len(parts), 0, -1):
                cand = '::'.join(cur + parts[:i])
                if cand in mods: best = cand; break
            if best and best != m and not m.startswith(best + '::') and not best.startswith(m + '::') and best != '':
                g[m].add(best)
    return mods, g
def sccs(nodes, g):
    idx = {}; low = {}; st = []; on = set(); out = []; c = [0]
    sys.setrecursionlimit(10000)
    def go(v):
        idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in idx: go(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in nodes:
        if v not in idx: go(v)
    return out
print('## import cycles (strongly connected module groups)')
ncyc = 0
for base in ['exon/src', 'exon-sim/src', 'benches/src', 'benches/benches']:
    if not os.path.isdir(os.path.join(root, base)): continue
    mods, g = modgraph(base)
    for comp in sccs(list(mods), g):
        ncyc += 1; print(f'  {base}: {comp}')
print(f'  groups: {ncyc}')
# 5. copies of the drain loop
drains = []
for d in ['exon/tests', 'exon-sim', 'benches', 'fuzz/fuzz_targets', 'examples', 'exon/src/endpoint', 'exon/src']:
    for f in rs_files(d):
        if '/proto/' in f: continue
        if re.search(r'\.poll_clock_store\(\)', open(f).read()):
            drains.append(os.path.relpath(f, root))
drains = sorted(set(drains))
print(f'## files that drain a node by hand (call poll_clock_store): {len(drains)}', *drains, sep='\n  ')
# 6. test binaries
tb = []
for pkg in ['exon', 'exon-sim', '.']:
    td = os.path.join(root, pkg, 'tests')
    if not os.path.isdir(td): continue
    for e in os.listdir(td):
        p = os.path.join(td, e)
        if e.endswith('.rs') or (os.path.isdir(p) and os.path.exists(os.path.join(p, 'main.rs'))): tb.append(os.path.relpath(p, root))
print(f'## integration-test binaries: {len(tb)}')
bb = [e for e in os.listdir(os.path.join(root, 'benches/benches')) if e.endswith('.rs')]
print(f'## bench binaries: {len(bb)}')
# 7. largest file and function
allf = [f for d in ['exon', 'exon-sim', 'exon-outbox', 'benches', 'fuzz/fuzz_targets', 'examples'] for f in rs_files(d)]
big = max(allf, key=lambda f: sum(1 for _ in open(f)))
print(f'## largest file: {os.path.relpath(big, root)} {sum(1 for _ in open(big))} lines')
bestf = (0, '')
for f in allf:
    lines = open(f).read().split('\n')
    for i, l in enumerate(lines):
        m = re.match(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:const\s+)?fn\s+(\w+)', l)
        if not m: continue
        ind = m.group(1)
        for j in range(i, len(lines)):
            if lines[j] == ind + '}' or (j == i and l.rstrip().endswith('}')): break
            if lines[j].rstrip().endswith(';') and j == i: break
        n = j - i + 1
        if n > bestf[0]: bestf = (n, f'{os.path.relpath(f, root)}::{m.group(2)}')
print(f'## largest function: {bestf[1]} {bestf[0]} lines')
# 8. no function over 100 lines outside tests and examples (a test module starts at the first
# `#[cfg(test)]` at the start of a line)
LONG = 100
long_fns = []
for f in [f for d in ['exon', 'exon-sim', 'exon-testkit', 'exon-cli', 'exon-outbox', 'benches', 'src'] for f in rs_files(d)]:
    rel = os.path.relpath(f, root)
    if '/tests/' in '/' + rel or rel.endswith('tests.rs') or '/examples/' in '/' + rel:
        continue
    lines = open(f).read().split('\n')
    end = next((i for i, l in enumerate(lines) if l.startswith('#[cfg(test)]')), len(lines))
    for i, l in enumerate(lines[:end]):
        m = re.match(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)', l)
        if not m or l.rstrip().endswith(';'):
            continue
        j = next((j for j in range(i, len(lines)) if lines[j] == m.group(1) + '}' or (j == i and l.rstrip().endswith('}'))), i)
        if j - i + 1 > LONG:
            long_fns.append(f'{rel}::{m.group(2)} {j - i + 1} lines')
print(f'## functions over {LONG} lines outside tests and examples: {len(long_fns)}', *long_fns, sep='\n  ')
if ncyc:
    print(f'error: {ncyc} import cycle(s) (above, under "import cycles"): break them', file=sys.stderr)
if long_fns:
    print(f'error: {len(long_fns)} function(s) over {LONG} lines (above): split them', file=sys.stderr)
if ncyc or long_fns:
    sys.exit(1)
