"""Hundreds of domains in a few lines: `[[domains]]` entries with globs, lists and difficulty levels.

Covers: `catalogue` (every concrete spec the registry can build: plain names
and each family's members, `arith:add`, `rg:leg_counting`, `agent:lookup`),
`expand_entry` (one `[[domains]]` entry: `source` a spec, a glob such as
`rg:*` or `arith:{add,mul}`-style lists given as a TOML array, times `levels`
of the family's difficulty knob, each expanded domain named
`<spec>@<knob><level>` unless the entry names it; a level that configures its
generator exactly as a lower level of the entry does is left out, so
`levels = [0, ..., 15]` over `rg:*` gives each generator's distinct levels
only; a glob that matches nothing is an error), `expand_domains` (a whole list, names checked distinct), and
`knob_of` (the option that sets a spec's difficulty: the levels, and the band
the scheduler moves, use it). Nothing is downloaded: the catalogue is the
registry's own (reasoning-gym's generators are code in its package).
Does not cover: building the domains (`rl/build.py: build_domain`).
"""

from __future__ import annotations

import fnmatch
from typing import Any

from posttrain.config import ConfigError, DomainConfig
from posttrain.tasks.domains import registry_entries

_GLOB = set("*?[")


def catalogue(leveled: bool = False) -> list[str]:
    """Every concrete spec the registry names (with `leveled`: only those a difficulty knob applies to)."""
    out: list[str] = []
    for e in registry_entries():
        if not e.family:
            if not leveled or e.knob is not None:
                out.append(e.name)
        elif e.members is not None and (not leveled or e.knob is not None):
            out.extend(e.name + m for m in e.members(leveled))
    return out


def _entry(spec: str) -> Any:
    prefix = spec.split(":", 1)[0] + ":" if ":" in spec else spec
    return next((e for e in registry_entries() if e.name == prefix or e.name == spec), None)


def knob_of(spec: str) -> str | None:
    """The difficulty option of the spec's family (`digits`, `level`, `hops`), or None."""
    entry = _entry(spec)
    return None if entry is None else entry.knob


def distinct_levels(spec: str, levels: list[int], options: dict[str, Any] | None = None) -> list[int]:
    """`levels` less those that configure the spec's generator as an earlier one of them does (its family's
    `level_config`; a family without one: every level is distinct)."""
    entry = _entry(spec)
    if entry is None or entry.level_config is None or not entry.family:
        return list(levels)
    member, seen, out = spec.split(":", 1)[1], set(), []
    for level in levels:
        key = entry.level_config(member, level, options or {})
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        out.append(level)
    return out


def _sources(dc: DomainConfig) -> list[str]:
    patterns = dc.source if isinstance(dc.source, list) else [dc.source]
    out: list[str] = []
    for pattern in patterns:
        if not _GLOB & set(pattern):
            out.append(pattern)
            continue
        found = fnmatch.filter(catalogue(leveled=dc.levels is not None), pattern)
        if not found:
            raise ConfigError(f"config: [[domains]] source {pattern!r} matches no registered domain"
                              + (" with difficulty levels" if dc.levels is not None else ""))
        out.extend(found)
    return list(dict.fromkeys(out))


def expand_entry(dc: DomainConfig) -> list[DomainConfig]:
    """One entry as the concrete domains it names (itself when it has no glob, list or levels), less `exclude`."""
    if isinstance(dc.source, str) and not _GLOB & set(dc.source) and dc.levels is None:
        return [dc]
    out = _expand(dc)
    return [d for d in out if not any(fnmatch.fnmatchcase(d.label, x) or fnmatch.fnmatchcase(str(d.source), x)
                                      for x in dc.exclude)]


def _expand(dc: DomainConfig) -> list[DomainConfig]:
    sources = _sources(dc)
    many = len(sources) > 1 or (dc.levels is not None and len(dc.levels) > 1)
    if dc.name is not None and many:
        raise ConfigError(f"config: [[domains]] name {dc.name!r} would name {len(sources) * len(dc.levels or [0])} "
                          "domains: leave it unset (each is named after its source and level)")
    out = []
    for spec in sources:
        if dc.levels is None:
            out.append(dc.model_copy(update={"source": spec, "levels": None, "exclude": []}))
            continue
        knob = knob_of(spec)
        if knob is None:
            raise ConfigError(f"config: [[domains]] {spec!r} has no difficulty knob, so `levels` cannot apply")
        for level in distinct_levels(spec, dc.levels, dc.options):
            name = dc.name or f"{spec}@{knob}{level}"
            out.append(dc.model_copy(update={"source": spec, "levels": None, "name": name, "exclude": [],
                                             "options": {**dc.options, knob: level}}))
    return out


def expand_domains(entries: list[DomainConfig]) -> list[DomainConfig]:
    """Every entry expanded, in order; two expanded domains with one name are an error naming it."""
    out = [d for dc in entries for d in expand_entry(dc)]
    seen: set[str] = set()
    for d in out:
        if d.label in seen:
            raise ConfigError(f"config: two [[domains]] expand to the name {d.label!r} (set `name` to tell them apart)")
        seen.add(d.label)
    return out
