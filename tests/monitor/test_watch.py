"""`Watch`: the right series feed each check, an alert fires once per episode of a failure, a resumed run's
history counts, and per-domain state (the scheduler's `domains` table) is watched per domain."""

from __future__ import annotations

from posttrain.config import MonitorsConfig
from posttrain.monitor import Watch


def clean_step(i: int) -> dict[str, float]:
    return {"entropy": 0.6 + 0.01 * (i % 3), "completion_tokens": 5.0 + (i % 2), "grad_norm": 0.4 + 0.05 * (i % 4),
            "reward": 0.4 + 0.002 * i, "groups_sampled": 16.0, "verifier_errors": 0.0, "zero_variance_frac": 0.3}


def test_a_clean_run_raises_nothing():
    watch = Watch(MonitorsConfig(), samples_per_group=8)
    alerts = []
    for i in range(1, 101):
        alerts += watch.observe_step(i, clean_step(i))
        if i % 10 == 0:
            alerts += watch.observe_eval(i, {"greedy_accuracy": 0.5 + 0.001 * i, "held_out:sub/pass@1": 0.4})
    assert alerts == []


def test_one_alert_per_episode_then_rearmed():
    watch = Watch(MonitorsConfig(), samples_per_group=8)
    fired = []
    for i in range(1, 41):
        m = clean_step(i)
        if 10 <= i < 15 or 30 <= i < 35:  # two episodes of verifier errors
            m["verifier_errors"] = 100.0
        fired += [(a.step, a.kind) for a in watch.observe_step(i, m)]
    assert [k for _, k in fired] == ["verifier_errors", "verifier_errors"]
    assert fired[0][0] in range(10, 15) and fired[1][0] in range(30, 35)


def test_disabled_monitors_stay_silent():
    watch = Watch(MonitorsConfig(enabled=[]), samples_per_group=8)
    assert not any(watch.observe_step(i, {**clean_step(i), "verifier_errors": 128.0}) for i in range(1, 30))


def test_starvation_of_the_single_pool_and_of_one_domain():
    watch = Watch(MonitorsConfig(starve_patience=5), samples_per_group=8)
    kinds = [a.kind for i in range(1, 12) for a in watch.observe_step(i, {**clean_step(i), "zero_variance_frac": 1.0})]
    assert kinds == ["domain_starved"]
    watch = Watch(MonitorsConfig(starve_patience=5), samples_per_group=8)
    alerts = []
    for i in range(1, 12):
        domains = {"add": {"informative_frac": 0.5, "pass_rate": 0.4}, "mul": {"informative_frac": 0.0, "pass_rate": 0.0}}
        alerts += watch.observe_step(i, clean_step(i), domains)
    assert [(a.kind, a.subject) for a in alerts] == [("domain_starved", "mul")]


def test_reward_hacking_per_domain_against_its_own_held_out_suite():
    watch = Watch(MonitorsConfig(), samples_per_group=8)
    alerts = []
    for i in range(1, 61):
        domains = {"add": {"pass_rate": 0.4, "informative_frac": 0.5},
                   "code": {"pass_rate": 0.2 + 0.01 * i, "informative_frac": 0.5}}  # code's training pass rate climbs
        alerts += watch.observe_step(i, {**clean_step(i), "reward": 0.4}, domains)
        if i % 10 == 0:
            alerts += watch.observe_eval(i, {"greedy_accuracy": 0.5, "held_out:add/pass@1": 0.5,
                                             "held_out:code/pass@1": 0.5 - (0.05 * (i // 10 - 1))})
    assert [(a.kind, a.subject) for a in alerts] == [("reward_hacking", "code")]


def test_load_rebuilds_history_so_a_resumed_run_is_judged_on_all_of_it():
    steps = [(i, clean_step(i)) for i in range(1, 21)]
    watch = Watch(MonitorsConfig(), samples_per_group=8)
    watch.load(steps, [(10, {"greedy_accuracy": 0.5})])
    assert watch.values("entropy")[:3] == [s[1]["entropy"] for s in steps[:3]]
    collapsed = [a.kind for i in range(21, 27) for a in watch.observe_step(i, {**clean_step(i), "entropy": 0.01})]
    assert collapsed == ["entropy_collapse"]


def test_an_agent_runs_malformed_calls_feed_the_format_monitor():
    """`agent/format_error_rate` (the agent rollouter's step metric) reaches `format_collapse`; a run without it
    (single-turn) never calls the check."""
    watch = Watch(MonitorsConfig(), samples_per_group=8)
    rates = [0.2] * 6 + [0.7, 0.9, 1.0, 1.0, 1.0]
    fired = [(i, a.kind) for i, r in enumerate(rates, 1)
             for a in watch.observe_step(i, {**clean_step(i), "agent/format_error_rate": r})]
    assert fired == [(10, "format_collapse")]
    off = Watch(MonitorsConfig(enabled=["entropy_collapse"]), samples_per_group=8)
    assert not any(off.observe_step(i, {**clean_step(i), "agent/format_error_rate": r}) for i, r in enumerate(rates, 1))


def test_a_stored_run_replayed_raises_what_it_raised_live(tmp_path):
    """`Watch.replay` over a run store's rows (`stored_scores` for its evaluations) gives the alerts the live run
    raised, at the same steps: a planted format collapse and a reward hack (held-out falling while reward rises)."""
    from posttrain.monitor import stored_scores
    from posttrain.store import RunStore

    live, raised = Watch(MonitorsConfig(), samples_per_group=8), []
    store = RunStore(tmp_path / "run.sqlite")
    for i in range(1, 41):
        m = {**clean_step(i), "agent/format_error_rate": 0.9 if 12 <= i < 20 else 0.2, "reward": 0.3 + 0.01 * i}
        store.log_step(i, m)
        raised += live.observe_step(i, m)
        if i % 10 == 0:
            acc = {10: 0.6, 20: 0.6, 30: 0.3, 40: 0.2}[i]
            store.log_eval(i, "held_out", {"greedy_accuracy": acc, "pass@1": acc}, {})
            raised += live.observe_eval(i, {"greedy_accuracy": acc})
    replayed = Watch(MonitorsConfig(), samples_per_group=8).replay(store.steps(), stored_scores(store.evals()))
    assert {a.kind for a in raised} == {"format_collapse", "reward_hacking"}
    assert [(a.step, a.kind) for a in replayed] == [(a.step, a.kind) for a in raised]
