"""examples/many_domains.toml: over 500 distinct single-turn domains in a few `[[domains]]` entries, each of which
builds and gives tasks without a download, and no level of a generator whose tasks are mostly another's."""

from __future__ import annotations

import json
import signal
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.config import load_config
from posttrain.tasks.expand import expand_domains

EXAMPLE = Path(__file__).parents[2] / "examples" / "many_domains.toml"
ENTRIES = range(0, 1_000_000, 50_000)  # the reasoning-gym entries compared between levels (benchmarks/many_domains.py)


def _domains():
    return expand_domains(load_config(EXAMPLE).domain_configs())


def test_the_example_names_over_500_distinct_domains():
    domains = _domains()
    names = [d.label for d in domains]
    assert len(names) == len(set(names)) >= 500
    # distinct as configurations, not only as names: no source twice with the same options
    assert len({(str(d.source), json.dumps(d.options, sort_keys=True)) for d in domains}) == len(domains)
    families = Counter(str(d.source).split(":", 1)[0] for d in domains)
    assert set(families) == {"rg", "arith", "code"}  # single-turn only: an agent domain trains alone
    assert families["rg"] >= 400 and families["arith"] == 5 * 18 and families["code"] == 2 * 6
    listed = CliRunner().invoke(app, ["tasks", "list", "--domains", str(EXAMPLE), "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["families"] == dict(families)


@pytest.mark.slow
def test_every_domain_of_the_example_gives_tasks_and_no_two_levels_give_the_same_ones():
    from posttrain.rewards.reasoning_gym import clear_cache
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.reasoning_gym import RGSource

    def hung(*_):
        raise TimeoutError("over 60 s")

    prompts: dict[str, dict[str, list[str]]] = defaultdict(dict)  # source -> name -> its entries' prompts
    last = None
    previous = signal.signal(signal.SIGALRM, hung)
    try:
        for d in _domains():
            if d.source != last:
                clear_cache()  # one generator's datasets at a time
                last = d.source
            signal.alarm(60)  # a generator that searches for minutes is not a domain to train on (rule R2)
            limit = {"generate_timeout_s": 60.0} if str(d.source).startswith("rg:") else {}  # the alarm's bound
            domain = load_domain(str(d.source), **d.options, **limit)
            tasks = list(domain.held_out(1)) + list(domain.source.take(1, "train"))
            assert len(tasks) == 2 and all(t.prompt for t in tasks), d.label
            if isinstance(domain.source, RGSource):  # at most half its tasks are another level's (rule R3)
                mine = [domain.source.task(i).prompt for i in ENTRIES]
                for other, theirs in prompts[str(d.source)].items():
                    same = sum(a == b for a, b in zip(mine, theirs))
                    assert same <= len(ENTRIES) // 2, f"{d.label} gives {other}'s tasks ({same} of {len(ENTRIES)})"
                prompts[str(d.source)][d.label] = mine
            signal.alarm(0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
