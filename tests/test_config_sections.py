"""Config sections match components: a key that moved to its component's section still loads for one release,
with a one-line note naming its new place; every example config loads."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.config import RENAMED_KEYS, ConfigDeprecation, ConfigError, load_config

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_the_ray_cluster_is_its_own_section_shared_by_rollouts_and_sandboxes():
    cfg = load_config(None, ["ray.address='ray://head:10001'"])
    assert cfg.ray.address == "ray://head:10001" and "ray_address" not in type(cfg.rollout).model_fields


def test_an_old_key_still_loads_with_a_one_line_note_naming_its_new_place():
    with pytest.warns(ConfigDeprecation) as caught:
        cfg = load_config(None, ["rollout.ray_address='ray://head:10001'"])
    assert cfg.ray.address == "ray://head:10001"
    (note,) = [str(w.message) for w in caught if issubclass(w.category, ConfigDeprecation)]
    assert "rollout.ray_address is now ray.address" in note and "\n" not in note
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigDeprecation)  # the new key: no note
        assert load_config(None, ["ray.address='x'"]).ray.address == "x"


def test_the_old_and_the_new_key_disagreeing_is_one_line_error():
    with pytest.raises(ConfigError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigDeprecation)
        load_config(None, ["rollout.ray_address='a'", "ray.address='b'"])
    assert "keep only ray.address" in str(info.value) and "\n" not in str(info.value)
    with pytest.warns(ConfigDeprecation):  # the same value twice is no conflict
        assert load_config(None, ["rollout.ray_address='a'", "ray.address='a'"]).ray.address == "a"


def test_every_renamed_key_names_a_field_at_its_new_place_and_none_at_its_old():
    from posttrain.config import RunConfig

    for (section, key), (new_section, new_key) in RENAMED_KEYS.items():
        assert key not in RunConfig.model_fields[section].annotation.model_fields
        assert new_key in RunConfig.model_fields[new_section].annotation.model_fields


def test_the_cli_prints_the_note_as_one_line():
    from posttrain.cli import app

    res = CliRunner().invoke(app, ["config", "--set", "rollout.ray_address='ray://h:1'"])
    assert res.exit_code == 0, res.output
    assert "note: config: rollout.ray_address is now ray.address" in res.output and "Warning" not in res.output
    printed = json.loads(res.stdout[res.stdout.index("{"):])
    assert printed["ray"]["address"] == "ray://h:1" and "ray_address" not in printed["rollout"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_config_loads_without_a_note(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigDeprecation)
        load_config(path, [])


def test_the_evaluation_keys_moved_from_train_to_their_own_section():
    old = {"eval_every": 7, "eval_at_start": False, "eval_size": 33, "eval_suites": ["arith:add"], "eval_suite_limit": 5,
           "selection_fraction": 0.25, "keep_best": False, "best_metric": "greedy_accuracy", "warn_drop": 0.1,
           "warn_patience": 3}
    with pytest.warns(ConfigDeprecation) as caught:
        cfg = load_config(None, [f"train.{k}={json.dumps(v)}" for k, v in old.items()])
    assert (cfg.eval.every, cfg.eval.at_start, cfg.eval.size, cfg.eval.suites, cfg.eval.suite_limit) == (
        7, False, 33, ["arith:add"], 5)
    assert (cfg.eval.selection_fraction, cfg.eval.keep_best, cfg.eval.warn_drop, cfg.eval.warn_patience) == (
        0.25, False, 0.1, 3)
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigDeprecation)]
    assert len(notes) == len(old) and "config: train.eval_every is now eval.every" in notes[0]
    assert not set(old) & set(type(cfg.train).model_fields)


def test_a_stored_run_config_with_the_old_keys_is_read_without_a_note(tmp_path):
    from posttrain.config import RunConfig
    from posttrain.resolve import run_config
    from posttrain.store import RunStore

    stored = RunConfig().model_dump()
    stored["train"].update(eval_every=9, eval_size=40)  # a run stored before [eval] existed
    del stored["eval"]
    with RunStore(tmp_path / "run.sqlite") as store:
        store.set_info(config=stored)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigDeprecation)
        cfg = run_config(str(tmp_path))
    assert (cfg.eval.every, cfg.eval.size) == (9, 40)
