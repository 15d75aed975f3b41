"""One registry: every built-in spec resolves to a domain whose training reward and evaluation verdicts agree."""

from __future__ import annotations

import random

import pytest

from posttrain.config import load_config
from posttrain.eval.harness import EvalSpec, evaluate
from posttrain.rewards import score_sync
from posttrain.rl.build import build_domains, sampling_params
from posttrain.tasks.arithmetic import worked_solution
from posttrain.tasks.domains import list_domains, load_domain
from posttrain.tasks.jsonl import TaskFileError

SPECS = ["arith:add", "arith:sub", "arith:addsub", "arith:mul", "arith:chain", "code:ops", "code:linear",
         "rg:leg_counting", "humaneval", "terminal", "agent:lookup", "cad:parts", "cad_agent:parts",
         "docs:reports"]


class Replay:
    """An engine that answers each prompt with given texts: the same responses for training and evaluation."""

    policy_version, tokenizer, usage, max_context, max_concurrency = 0, None, None, None, 1

    def __init__(self, answers):
        self.answers = answers

    def encode(self, prompts):
        return None

    def generate(self, prompts, params):
        from posttrain.types import Completion, FinishReason

        return [[Completion([], self.answers[p], [], FinishReason.STOP)] for p in prompts]

    async def agenerate(self, prompts, params):
        return self.generate(prompts, params)


def _responses(tasks, rng):
    """For each task: its gold answer, a wrong answer, or the gold answer with noise around it."""
    out = {}
    for t in tasks:
        gold = t.answer or ""
        out[t.prompt] = rng.choice([gold, gold + " 7", "0", f"  {gold}\n", ""])
    return out


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.slow
def test_training_reward_and_eval_verdicts_are_identical(spec, tmp_path):
    domain = load_domain(spec, limit=8)
    suite = domain.suite()
    # training: the config names the domain; its verifier is what the rollouter calls
    trained = build_domains(load_config(None, [f"tasks.source='{spec}'"]))[0]
    responses = _responses(suite.tasks, random.Random(spec))
    train_verdicts = score_sync(trained.verifier, suite.tasks, [responses[t.prompt] for t in suite.tasks])
    run = evaluate(Replay(responses), suite, EvalSpec(model="replay", suite=spec, max_tokens=8))
    by_task = {r.task_id: r for r in run.records}
    for task, v in zip(suite.tasks, train_verdicts):
        r = by_task[task.id]
        assert (v.score, v.passed, v.status.value) == (r.score, r.passed, r.status), (spec, task.id)
        assert v.verifier == r.verifier  # the same verifier, by name and version hash


def test_every_registered_spec_is_covered():
    families = {name.split(":")[0] for name, _ in list_domains()}
    assert families == {spec.split(":")[0] for spec in SPECS}


def test_domain_sampling_defaults_apply_to_training_and_evaluation():
    cfg = load_config(None, ["tasks.source='arith:add'"])
    assert cfg.sampling.max_tokens is None
    assert sampling_params(cfg, build_domains(cfg)).max_tokens == load_domain("arith:add").sampling.max_tokens == 8
    assert load_domain("arith:mul", digits=4, worked=False).sampling.max_tokens == 11
    # a worked product (the default) and its EOS fit: 9999*9999 is the longest
    assert load_domain("arith:mul", digits=4).sampling.max_tokens >= len(worked_solution(9999, 9999)) + 1
    assert load_domain("humaneval").sampling.max_tokens == 512
    cfg = load_config(None, ["sampling.max_tokens=5"])
    assert sampling_params(cfg, build_domains(cfg)).max_tokens == 5


def test_reward_verifier_overrides_the_domain():
    cfg = load_config(None, ["reward.verifier='numeric'", "reward.tolerance=2.0"])
    verifier = build_domains(cfg)[0].verifier
    assert verifier.name == "numeric" and verifier.abs_tol == 2.0


def test_filtered_sampling_is_refused_for_training():
    from posttrain.config import ConfigError

    for override in ("sampling.top_p=0.9", "sampling.top_k=5"):
        with pytest.raises(ConfigError, match="ratio starts below 1"):
            load_config(None, [override])


def test_worked_multiplication_domain_reads_the_last_number():
    d = load_domain("arith:mul", worked=True)
    t = d.evaluation(5, 0)[0]
    assert d.verifier.verify(t, t.meta["solution"]).passed
    assert not d.verifier.verify(t, t.meta["solution"] + "1").passed
    assert d.sampling.max_tokens >= len(t.meta["solution"]) + 1  # the whole solution and EOS fit
    with pytest.raises(TaskFileError, match="true or false"):
        load_domain("arith:mul", worked="yes")


def test_every_built_in_plugin_registers_exactly_the_names_it_declares():
    """The wiring layer's plugins (handed in when the package is imported) declare the names their modules
    register: every name a plugin registers is declared, and one plugin's names come from one module."""
    from posttrain.tasks import domains

    entries = {e.name: e for e in domains.registry_entries()}  # loads every plugin
    declared = {name for p in domains.plugins() for name in p.names}
    assert {n for n, e in entries.items() if e.factory.__module__ != domains.__name__} == declared
    assert {"humaneval", "agent:", "cad:", "docs:", "rg:", "terminal"} <= declared
    for p in domains.plugins():
        assert len({entries[n].factory.__module__ for n in p.names}) == 1, p.names


def test_a_plugin_is_loaded_on_first_use_only_and_once():
    from posttrain.tasks import domains

    loads = []

    @domains.register_domain("plugin_probe:", "a probe")
    def probe(arg, **options):
        return domains.load_domain("arith:add")

    plugin = domains.DomainPlugin(("plugin_probe:",), lambda: loads.append(1))
    try:
        domains.add_plugins([plugin, plugin])
        assert domains.plugins().count(plugin) == 1 and loads == []
        domains.load_domain("plugin_probe:x")  # registered already: nothing to load
        assert loads == []
        del domains._REGISTRY["plugin_probe:"]
        with pytest.raises(TaskFileError, match="unknown domain"):
            domains.load_domain("plugin_probe:x")  # its plugin loaded, and registered nothing
        assert loads == [1]
    finally:
        domains._plugins.remove(plugin)
        domains._REGISTRY.pop("plugin_probe:", None)


@pytest.mark.slow
def test_a_fresh_interpreter_importing_only_the_public_api_finds_every_domain(tmp_path):
    """Library use without the CLI (the README's `from posttrain.tasks import load_domain`), as in a spawned
    process or a Ray actor: the package's import wires the registry."""
    import subprocess
    import sys

    specs = ["agent:lookup", "cad:parts", "docs:reports", "rg:leg_counting", "humaneval", "terminal", "code:ops",
             "cad_agent:parts"]
    code = f"from posttrain.tasks import load_domain\nfor s in {specs!r}:\n    print(load_domain(s).name)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == specs


@pytest.mark.slow
def test_loading_one_domain_imports_only_its_own_plugin():
    import subprocess
    import sys

    code = ("import sys; from posttrain.tasks.domains import load_domain; load_domain('humaneval'); "
            "load_domain('arith:add'); print('posttrain.agent.lookup' in sys.modules, 'posttrain.tasks.codegen' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
    with pytest.raises(TaskFileError, match="agent:<name>"):  # an unknown name still lists every plugin's
        load_domain("nope")


def test_a_whole_text_verifier_on_worked_solutions_is_a_config_error():
    from posttrain.config import ConfigError

    sets = ["tasks.source='arith:mul'", "model.base.family='mul'", "reward.verifier='exact'"]
    with pytest.raises(ConfigError, match="last_number"):
        build_domains(load_config(None, sets))
    assert build_domains(load_config(None, [*sets, "reward.extract='last_number'"]))[0].verifier.extract == "last_number"
    bare = [*sets, "tasks.options.worked=false", "model.base.worked=false"]
    assert build_domains(load_config(None, bare))[0].verifier.extract == "full"  # bare products: the whole text
