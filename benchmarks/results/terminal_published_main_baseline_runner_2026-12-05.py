"""The same 36 published tasks judged by the code of main (before issue 44): oracle and do-nothing, as
benchmarks/terminal_published.py does. Run with PYTHONPATH=/work/main/src; formatted for ruff after the run."""
import asyncio
import json
import os
import sys

from posttrain.sandbox import Sandbox
from posttrain.tasks.harbor import load_terminal_suite
from posttrain.tasks.terminal import judge_script
from posttrain.types import VerdictStatus

errors = []
tasks = load_terminal_suite(sys.argv[1], errors=errors)
print("load average at start:", os.getloadavg(), file=sys.stderr)
async def main():
    gate = asyncio.Semaphore(2)
    with Sandbox(max_concurrency=4) as sb:
        async def one(t):
            async with gate:
                o = await judge_script(sb, t, t.solution) if t.solution else None
                n = await judge_script(sb, t, "")
                return t.id, o, n
        return await asyncio.gather(*(one(t) for t in tasks))
rows = asyncio.run(main())
op = sum(1 for _, o, _ in rows if o is not None and o.passed)
nf = sum(1 for _, _, n in rows if n.status is VerdictStatus.OK and not n.passed)
for tid, o, n in rows:
    print(tid, "oracle", (o.status.value, o.score) if o else None, "noop", (n.status.value, n.score), "|",
          (o.details.splitlines()[0][:150] if o and not o.passed else ""), file=sys.stderr)
for e in errors:
    print("LOAD ERROR", e.path, e.message[:200], file=sys.stderr)
total = len(rows) + len(errors)
print("load average at end:", os.getloadavg(), file=sys.stderr)
print(json.dumps({"tasks": total, "oracle_pass_frac": round(op / total, 4), "noop_fail_frac": round(nf / total, 4),
                  "code": "main"}))
