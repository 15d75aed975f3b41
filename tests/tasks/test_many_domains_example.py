"""examples/many_domains.toml: over 500 distinct single-turn domains in a few `[[domains]]` entries, each of which
builds and gives tasks without a download, and no level of a generator whose tasks are mostly another's."""

from __future__ import annotations

import json
import multiprocessing
import signal
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.config import load_config
from posttrain.tasks.expand import expand_domains

EXAMPLE = Path(__file__).parents[2] / "examples" / "many_domains.toml"
ENTRIES = range(0, 1_000_000, 50_000)  # the reasoning-gym entries compared between levels (benchmarks/many_domains.py)
# most of the survey's generation time (py-spy, 2026-12-07): surveyed first
SLOWEST = {f"rg:{n}" for n in "knight_swap sokoban futoshiki puzzle24 intermediate_integration countdown zebra_puzzles".split()}


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


CPU_S = 60  # a domain's bound: processor seconds to build it, give its tasks and its prompts at ENTRIES (rule R2)
HANG_S = 600  # and wall seconds, for a generator that blocks instead of computing


class _Hung(Exception):
    """A domain past HANG_S (not a TimeoutError: that is an OSError, which the generator worker's pipe reads would
    take for a dead worker)."""


def _start_survey_process() -> None:
    """A survey process's set-up, outside every domain's bound: its generator worker started and reasoning-gym
    imported there."""
    from posttrain.rewards.reasoning_gym import rg_version
    from posttrain.tasks.bounded import START_TIMEOUT_S, shared_worker

    shared_worker().call(rg_version, timeout_s=START_TIMEOUT_S)


def _survey(source: str, domains: list[tuple[str, dict]]) -> dict[str, list[str]]:
    """Build each (label, options) domain of `source` and draw a held-out and a training task of it; of a
    reasoning-gym domain, also its prompts at `ENTRIES`; each within CPU_S of processor time, this process's and its
    generator worker's together. Runs in a process of its own, with its own generator worker."""
    from posttrain.rewards.reasoning_gym import clear_cache
    from posttrain.tasks.bounded import shared_worker
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.reasoning_gym import RGSource

    def hung(*_):
        raise _Hung(f"{label}: over {HANG_S} s")

    def cpu_s() -> float:  # processor time so far here and in the generator worker (entries are made there)
        return time.process_time() + shared_worker().call(time.process_time)

    label = source
    clear_cache()  # one generator's datasets at a time
    prompts: dict[str, list[str]] = {}  # name -> its entries' prompts
    previous = signal.signal(signal.SIGALRM, hung)
    try:
        for label, options in domains:
            # A generator that searches for minutes is not a domain to train on (rule R2). Processor time, not wall
            # time: the bound must not depend on what else the machine runs (two surveys share two cores here).
            signal.alarm(HANG_S)
            start, wall, generation = cpu_s(), time.monotonic(), shared_worker().generation
            limit = {"generate_timeout_s": 60.0} if source.startswith("rg:") else {}  # one entry's wall bound
            domain = load_domain(source, **options, **limit)
            tasks = list(domain.held_out(1)) + list(domain.source.take(1, "train"))
            assert len(tasks) == 2 and all(t.prompt for t in tasks), label
            if isinstance(domain.source, RGSource):
                prompts[label] = [domain.source.task(i).prompt for i in ENTRIES]
            if shared_worker().generation == generation:
                used, what = cpu_s() - start, "processor time"
            else:  # an entry's worker was killed (time or memory limit) and its processor time went with it
                used, what = time.monotonic() - wall, "wall time (its generator worker restarted)"
            assert used <= CPU_S, f"{label}: {used:.0f} s of {what} (over {CPU_S} s)"
            signal.alarm(0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return prompts


@pytest.mark.slow
def test_every_domain_of_the_example_gives_tasks_and_no_two_levels_give_the_same_ones():
    # Generators are independent of one another, so they are surveyed in two processes, each with its own generator
    # worker: entry generation is most of the time, and the suite otherwise leaves a 2-core machine's second core
    # idle. The slowest generators go first (measured: their entries take seconds each), then those with the most
    # domains, so the two processes finish close together.
    by_source: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for d in _domains():
        by_source[str(d.source)].append((d.label, dict(d.options)))
    order = sorted(by_source, key=lambda s: (s not in SLOWEST, -len(by_source[s])))
    with ProcessPoolExecutor(2, multiprocessing.get_context("spawn"), initializer=_start_survey_process) as pool:
        try:
            surveyed = dict(zip(order, pool.map(_survey, order, [by_source[s] for s in order])))
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the first failure is the answer: the rest are not surveyed
            raise
    for source, levels in surveyed.items():  # at most half its tasks are another level's (rule R3)
        assert len(levels) == (len(by_source[source]) if source.startswith("rg:") else 0), source
        names = list(levels)
        for i, name in enumerate(names):
            for other in names[:i]:
                same = sum(a == b for a, b in zip(levels[name], levels[other]))
                assert same <= len(ENTRIES) // 2, f"{name} gives {other}'s tasks ({same} of {len(ENTRIES)})"
