"""`[[domains]]` globs, lists and levels: hundreds of domains in a few lines, and `posttrain tasks list --domains`."""

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.config import ConfigError, DomainConfig, build_config
from posttrain.tasks.expand import catalogue, distinct_levels, expand_domains, expand_entry, knob_of

MANY = """
[[domains]]
source = "rg:*"
levels = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
[[domains]]
source = "arith:*"
levels = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
[[domains]]
source = ["code:ops", "code:linear"]
levels = [1, 2, 3]
[[domains]]
source = "agent:lookup"
levels = [1, 2, 3, 4]
[[domains]]
source = "terminal"
"""


def test_a_glob_with_levels_names_one_domain_per_member_and_level():
    out = expand_entry(DomainConfig(source="arith:*", levels=[1, 3]))
    assert [d.label for d in out] == [f"arith:{f}@digits{lv}" for f in ("add", "sub", "addsub", "mul", "chain")
                                      for lv in (1, 3)]
    assert out[1].options == {"digits": 3} and out[1].source == "arith:add"


def test_lists_plain_entries_and_knobs():
    assert [d.source for d in expand_entry(DomainConfig(source=["arith:add", "code:ops"]))] == ["arith:add", "code:ops"]
    plain = DomainConfig(source="arith:add", name="a")
    assert expand_entry(plain) == [plain]
    assert (knob_of("arith:mul"), knob_of("rg:leg_counting"), knob_of("agent:lookup"), knob_of("humaneval")) == \
        ("digits", "level", "hops", None)
    assert "rg:leg_counting" in catalogue() and "arith:chain" in catalogue(leveled=True)


def test_exclude_leaves_out_names_and_sources():
    out = expand_entry(DomainConfig(source="arith:*", levels=[1, 2], exclude=["arith:mul", "*@digits2"]))
    assert [d.label for d in out] == ["arith:add@digits1", "arith:sub@digits1", "arith:addsub@digits1",
                                      "arith:chain@digits1"]


def test_bad_expansions_are_one_line_errors():
    with pytest.raises(ConfigError, match="matches no registered domain"):
        expand_entry(DomainConfig(source="nope:*"))
    with pytest.raises(ConfigError, match="no difficulty knob"):
        expand_entry(DomainConfig(source="humaneval", levels=[1]))
    with pytest.raises(ConfigError, match="leave it unset"):
        expand_entry(DomainConfig(source="arith:*", name="x"))
    with pytest.raises(ConfigError, match="expand to the name"):
        expand_domains([DomainConfig(source="arith:add"), DomainConfig(source="arith:*")])


def test_a_few_lines_name_well_over_500_domains(tmp_path):
    path = tmp_path / "many.toml"
    path.write_text(MANY)
    result = CliRunner().invoke(app, ["tasks", "list", "--domains", str(path), "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert listed["count"] == len(listed["domains"]) > 500
    names = [d["name"] for d in listed["domains"]]
    assert len(set(names)) == len(names)
    assert "rg:basic_arithmetic@level2" in names and "agent:lookup@hops3" in names and "terminal" in names
    assert expand_domains(build_config({"domains": [{"source": "arith:*", "levels": [2]}]}).domain_configs())[0] \
        .options == {"digits": 2}


def test_one_glob_twice_at_other_levels_is_accepted_and_a_real_clash_is_still_named():
    cfg = build_config({"domains": [{"source": "arith:*", "levels": [1, 2]}, {"source": "arith:*"},
                                    {"source": "arith:add", "name": "mine"}]})
    names = [d.label for d in expand_domains(cfg.domain_configs())]
    assert "arith:add@digits1" in names and "arith:add" in names and "mine" in names and len(set(names)) == len(names)
    with pytest.raises(ConfigError, match="expand to the name 'arith:add@digits1'"):
        expand_domains(build_config({"domains": [{"source": "arith:*", "levels": [1]},
                                                 {"source": "arith:add", "levels": [1]}]}).domain_configs())


def test_levels_that_configure_a_generator_alike_are_named_once():
    # bf's curriculum has 3 difficulty levels: 3, 4 and 5 resolve as 2 does and are left out
    assert [d.label for d in expand_entry(DomainConfig(source="rg:bf", levels=[0, 1, 2, 3, 4, 5]))] == \
        ["rg:bf@level0", "rg:bf@level1", "rg:bf@level2"]
    # the entry's own options count: fixing every field the levels move leaves one distinct level
    fixed = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    assert distinct_levels("rg:basic_arithmetic", [0, 1, 2, 3], fixed) == [0]
    assert distinct_levels("rg:basic_arithmetic", [3, 0, 1], {}) == [3, 0, 1]  # in the entry's order, all distinct
    assert distinct_levels("arith:add", [1, 2, 2]) == [1, 2, 2]  # no level config: taken as given (the name clash
    # of a level listed twice is expand_domains' error)
