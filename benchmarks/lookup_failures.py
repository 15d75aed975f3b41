"""Where `agent:lookup` training episodes go wrong: malformed replies by the turn's place, and failed episodes' first bad quote.

Reads the stored training episodes of agent RL runs (every `run.sqlite` under each DIR, `RunStore(readonly=True)`)
of the quoting base (format 8: each reply after a read opens with the key's line of the file just read) and prints:
- per turn index (0 = the first reply), the share of replies that were malformed (no call, or not valid JSON);
- for episodes that ended `failed` (a wrong value submitted, every call well formed), the first reply whose quote
  differs from the key's line of the file it had just read, by kind: `operator` (the right key and target, but
  `=` for `->` or back: a pointer read as a value), `target` (the key's line with another file or value), `other
  line` (a distractor's line copied whole), `other`; and at which turn.
`--steps A B` keeps episodes of steps A..B only (the base's behaviour: the first steps). Last line: one JSON object.

    python benchmarks/lookup_failures.py /tmp/s13/agent_report [--steps 1 10]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def quote_error(key: str, observation: str, reply: str) -> str | None:
    """The kind of mistake in `reply`'s quote of `key`'s line of the file shown in `observation` (None: quoted right,
    or the file has no line for the key)."""
    lines = observation.removeprefix("[read] ").split("\n")
    own = next((line for line in lines if line.split(" ", 1)[0] == key), None)
    if own is None:
        return None
    quote = reply.split("<tool_call>", 1)[0].strip()
    if quote == own:
        return None
    if quote in lines:
        return "other line"
    q, o = quote.split(), own.split()
    if len(q) == 3 and q[0] == key and q[2] == o[-1]:
        return "operator"
    if q and q[0] == key:
        return "target"
    return "other"


def analyse(transcripts) -> dict:
    malformed: dict[int, Counter] = {}
    kinds: Counter = Counter()
    status: Counter = Counter()
    for t in transcripts:
        ep = json.loads(t)
        status[ep["status"]] += 1
        for i, turn in enumerate(ep["turns"]):
            c = malformed.setdefault(i, Counter())
            c["replies"] += 1
            c["malformed"] += bool(turn.get("format_error"))
        if ep["status"] != "failed":
            continue
        m = re.search(r"value of (\w+)\.", ep.get("instruction", ""))
        if not m:
            continue
        for i, (prev, turn) in enumerate(zip(ep["turns"], ep["turns"][1:]), start=1):
            kind = quote_error(m.group(1), prev.get("observation", ""), turn["text"])
            if kind is not None:
                kinds[f"turn {i}: {kind}"] += 1
                break
        else:
            kinds["no misquote"] += 1
    by_turn = {i: round(c["malformed"] / c["replies"], 3) for i, c in sorted(malformed.items())}
    return {"episodes": sum(status.values()), "status": dict(status), "malformed_by_turn": by_turn,
            "replies_by_turn": {i: c["replies"] for i, c in sorted(malformed.items())},
            "failed_first_misquote": dict(kinds.most_common())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--steps", type=int, nargs=2, default=None, metavar=("FIRST", "LAST"))
    args = ap.parse_args()
    from posttrain.store import RunStore

    rows = {}
    for d in args.dirs:
        for path in sorted(Path(d).rglob("run.sqlite")):
            with RunStore(path, readonly=True) as store:
                q = "SELECT transcript FROM episodes" + (" WHERE step BETWEEN ? AND ?" if args.steps else "")
                got = analyse(t for (t,) in store.db.execute(q, args.steps or ()))
            rows[str(path.parent)] = got
            print(f"{path.parent}: {got['episodes']} episodes {got['status']}; malformed by turn "
                  f"{got['malformed_by_turn']}; failed episodes' first misquote {got['failed_first_misquote']}",
                  flush=True)
    print(json.dumps({"runs": rows, "steps": args.steps}))


if __name__ == "__main__":
    main()
