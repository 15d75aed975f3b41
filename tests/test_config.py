import pytest

from posttrain.config import ConfigError, RunConfig, load_config


def test_defaults_are_the_quickstart():
    cfg = load_config()
    assert isinstance(cfg, RunConfig)
    assert cfg.sampling.n == 16 and cfg.tasks.source == "arith:add"


def test_toml_and_overrides(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text('name = "x"\n[rl]\nlr = 1e-4\nadvantage = "dr_grpo"\n[train]\nsteps = 7\n')
    cfg = load_config(p, ["train.steps=9", "sampling.temperature=0.5", "tasks.source=arith:sub"])
    assert (cfg.name, cfg.rl.lr, cfg.rl.advantage) == ("x", 1e-4, "dr_grpo")
    assert cfg.train.steps == 9 and cfg.sampling.temperature == 0.5 and cfg.tasks.source == "arith:sub"


def _one_line(exc: ConfigError) -> str:
    msg = str(exc)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_unknown_key_is_named():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["train.stepz=3"])
    assert "unknown key 'train.stepz'" in _one_line(err.value)


def test_wrong_type_names_field_value_and_expectation():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["train.steps=many"])
    msg = _one_line(err.value)
    assert "train.steps" in msg and "'many'" in msg and "integer" in msg


def test_choice_lists_allowed_values():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["rl.advantage='ppo'"])
    msg = _one_line(err.value)
    assert "rl.advantage" in msg and "'grpo'" in msg and "'dr_grpo'" in msg


def test_range_violation():
    with pytest.raises(ConfigError, match=r"sampling.n = 0: .*greater than or equal to 1"):
        load_config(None, ["sampling.n=0"])


def test_bad_band_is_rejected():
    with pytest.raises(ConfigError, match="target_low"):
        load_config(None, ["model.base.target_low=0.9", "model.base.target_high=0.5"])


def test_malformed_override_and_file(tmp_path):
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config(None, ["justakey"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nsteps=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml")


def test_family_base_defaults_apply_only_to_fields_left_unset():
    from posttrain.config import FAMILY_BASE_DEFAULTS

    lookup = load_config(None, ["model.base.family='lookup'"]).model.base
    assert (lookup.target_low, lookup.batch_size) == (FAMILY_BASE_DEFAULTS["lookup"]["target_low"],
                                                      FAMILY_BASE_DEFAULTS["lookup"]["batch_size"])
    mine = load_config(None, ["model.base.family='lookup'", "model.base.target_low=0.3"]).model.base
    assert (mine.target_low, mine.target_high) == (0.3, FAMILY_BASE_DEFAULTS["lookup"]["target_high"])
    add = load_config(None, []).model.base
    assert (add.target_low, add.target_high, add.worked) == (0.40, 0.65, False)


def test_products_and_chains_default_to_worked_solutions_on_both_sides():
    from posttrain.config import _WORKED_FAMILIES
    from posttrain.rl.build import build_domains
    from posttrain.tasks.arithmetic import WORKED_FAMILIES

    assert set(_WORKED_FAMILIES) == set(WORKED_FAMILIES)  # config's defaults and the generator agree

    for family in ("mul", "chain"):
        cfg = load_config(None, [f"tasks.source='arith:{family}'", f"model.base.family='{family}'"])
        assert cfg.model.base.worked and (cfg.model.base.target_low, cfg.model.base.target_high) == (0.40, 0.65)
        assert build_domains(cfg)[0].meta["worked"]
    bare = load_config(None, ["tasks.source='arith:mul'", "model.base.family='mul'", "tasks.options.worked=false",
                              "model.base.worked=false"])
    assert not bare.model.base.worked and not build_domains(bare)[0].meta["worked"]


def test_a_base_and_tasks_that_write_answers_differently_are_one_line_errors():
    with pytest.raises(ConfigError, match="set both the same") as err:
        load_config(None, ["tasks.source='arith:mul'", "model.base.family='mul'", "tasks.options.worked=false"])
    assert "\n" not in str(err.value) and "Value error" not in str(err.value)
    with pytest.raises(ConfigError, match="mul and chain families only"):
        load_config(None, ["model.base.worked=true"])
    # a checkpoint of the user's own is not the built-in base: nothing to compare
    load_config(None, ["tasks.source='arith:mul'", "model.path='/x'", "tasks.options.worked=false"])


def test_std_floor_is_for_per_group_grpo_only():
    assert load_config(None, ["rl.std_floor=0.15"]).rl.std_floor == 0.15
    for kind in ("grpo_batch", "dr_grpo"):
        with pytest.raises(ConfigError) as err:
            load_config(None, [f"rl.advantage={kind}", "rl.std_floor=0.15"])
        assert "rl.std_floor applies to advantage = 'grpo' only" in _one_line(err.value)
