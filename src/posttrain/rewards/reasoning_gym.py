"""reasoning-gym's own scoring as a verifier (kind `reasoning_gym`), and how its entries survive storage.

Covers: `ReasoningGymScore`, whose reward is exactly
`dataset.score_answer(answer, entry)` of the reasoning-gym generator that made
the task, with the answer either the whole response or, as reasoning-gym's
training scripts do, the last `<answer>...</answer>` (`reasoning_gym.utils.extract_answer`);
`build_dataset`, which rebuilds a generator from the JSON recipe a task keeps (cached; `clear_cache` forgets them)
in `meta["rg"]` (dataset name, config options, curriculum level, seed, size);
and a tagged-JSON codec (`encode_entry` / `decode_entry`) that stores an entry
with its Python types intact (tuples, sets, non-string dict keys, fractions, numpy scalars),
since several generators' `score_answer` read such metadata and a plain JSON
round trip changes their scores. An entry the codec cannot store exactly is
regenerated from the recipe and checked against a fingerprint of its question
and answer (some generators depend on PYTHONHASHSEED; a mismatch is an ERROR
verdict, never a silent wrong score).
Does not cover: making tasks from generators (`tasks/reasoning_gym.py`).
Needs the optional `reasoning-gym` package (extra `suites`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from posttrain.extras import require
from posttrain.rewards.base import SyncVerifier
from posttrain.rewards.registry import register_verifier
from posttrain.types import Task, Verdict

_TAG = "__rg__"
_RESERVED = ("seed", "size")  # set through the recipe, not as config options


class EntryCodecError(ValueError):
    """An entry holds a value the tagged-JSON codec cannot store exactly."""


def _rg():
    return require("reasoning_gym", "suites", "reasoning-gym tasks")


def rg_version() -> str:
    return str(getattr(_rg(), "__version__", "unknown"))


# ----------------------------------------------------------------------------- entry codec


def encode_entry(obj: Any) -> Any:
    """A JSON-safe form of `obj` that `decode_entry` turns back into an equal object of the same types."""
    if type(obj).__module__ == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:
        return {_TAG: "numpy", "t": type(obj).__name__, "v": obj.item()}  # np.str_, np.int64, ... scalars
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [encode_entry(v) for v in obj]
    if isinstance(obj, tuple):
        return {_TAG: "tuple", "v": [encode_entry(v) for v in obj]}
    if isinstance(obj, (set, frozenset)):
        items = sorted((encode_entry(v) for v in obj), key=lambda x: json.dumps(x, sort_keys=True))
        return {_TAG: type(obj).__name__, "v": items}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and _TAG not in obj:
            return {k: encode_entry(v) for k, v in obj.items()}
        return {_TAG: "dict", "v": [[encode_entry(k), encode_entry(v)] for k, v in obj.items()]}
    if isinstance(obj, Fraction):
        return {_TAG: "fraction", "v": [obj.numerator, obj.denominator]}
    if isinstance(obj, complex):
        return {_TAG: "complex", "v": [obj.real, obj.imag]}
    raise EntryCodecError(f"cannot store a {type(obj).__module__}.{type(obj).__qualname__}")


def decode_entry(obj: Any) -> Any:
    if isinstance(obj, list):
        return [decode_entry(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    tag = obj.get(_TAG)
    if tag is None:
        return {k: decode_entry(v) for k, v in obj.items()}
    v = obj["v"]
    if tag == "tuple":
        return tuple(decode_entry(x) for x in v)
    if tag == "set":
        return {decode_entry(x) for x in v}
    if tag == "frozenset":
        return frozenset(decode_entry(x) for x in v)
    if tag == "dict":
        return {decode_entry(k): decode_entry(x) for k, x in v}
    if tag == "fraction":
        return Fraction(v[0], v[1])
    if tag == "complex":
        return complex(v[0], v[1])
    if tag == "numpy":
        import numpy

        return getattr(numpy, obj["t"])(v)
    raise EntryCodecError(f"unknown tag {tag!r} in a stored entry")


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (`1 == 1.0 == True` and `(1,) != [1]` matter to scorers)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b  # NaN
    return bool(a == b)


def storable_entry(entry: dict[str, Any]) -> Any | None:
    """The entry's JSON-safe form when it round-trips exactly through JSON text, else None."""
    try:
        encoded = encode_entry(entry)
        back = decode_entry(json.loads(json.dumps(encoded)))
    except (EntryCodecError, TypeError, ValueError, RecursionError):
        return None
    return encoded if same_value(back, entry) else None


def fingerprint(entry: dict[str, Any]) -> str:
    """A short hash of an entry's question and answer: detects a regenerated entry that differs."""
    blob = json.dumps([str(entry.get("question")), None if entry.get("answer") is None else str(entry["answer"])])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- generators


def dataset_names() -> list[str]:
    from reasoning_gym.factory import DATASETS

    _rg()
    return sorted(DATASETS)


def allowed_options(name: str) -> list[str]:
    """Config keys a dataset accepts as options (its config dataclass's fields, less seed and size)."""
    from reasoning_gym.factory import DATASETS

    _, config_cls = DATASETS[name]
    return [f.name for f in dataclasses.fields(config_cls) if f.name not in _RESERVED]


def resolve_config(name: str, config: dict[str, Any], level: int | None = None) -> dict[str, Any]:
    """Config keyword arguments for `name`: the curriculum's values at `level` (every attribute at that
    level, capped at its last), then `config` on top. Unknown names, keys and levels are ValueErrors."""
    _rg()
    from reasoning_gym.factory import DATASETS, create_curriculum, has_curriculum

    if name not in DATASETS:
        raise ValueError(f"unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    allowed = allowed_options(name)
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ValueError(
            f"rg:{name}: unknown option(s) {', '.join(unknown)}; allowed: {', '.join(allowed)} "
            "(and seed, size, level, answer_format, limit, split, held_out_fraction, generate_timeout_s)"
        )
    kwargs: dict[str, Any] = {}
    if level is not None:
        if not has_curriculum(name):
            raise ValueError(f"rg:{name}: has no curriculum, so 'level' is not available; set config options instead")
        if not isinstance(level, int) or isinstance(level, bool) or level < 0:
            raise ValueError(f"rg:{name}: level must be a non-negative integer, got {level!r}")
        curriculum = create_curriculum(name)
        for attr_name, attr in curriculum.attributes.items():
            curriculum.set_attr_level(attr_name, min(level, len(attr.levels) - 1))
        generated = curriculum.generate_configuration()
        touched = {getattr(a, f, None) for a in curriculum.attributes.values()
                   for f in ("lower_field_name", "upper_field_name", "field_name")}
        kwargs = {k: getattr(generated, k) for k in allowed if k in touched}
    return {**kwargs, **config}


@functools.lru_cache(maxsize=128)
def _dataset(name: str, config_json: str, level: int | None, seed: int, size: int):
    from reasoning_gym.factory import DATASETS

    kwargs = resolve_config(name, json.loads(config_json), level)
    dataset_cls, config_cls = DATASETS[name]
    try:
        config = config_cls(**kwargs, seed=seed, size=size)
        return dataset_cls(config=config)
    except (AssertionError, TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"rg:{name}: invalid configuration {kwargs}: {type(exc).__name__}: {exc}") from None


def clear_cache() -> None:
    """Forget the datasets built so far (a survey of every generator holds one generator's at a time)."""
    _dataset.cache_clear()


def build_dataset(recipe: dict[str, Any]):
    """The reasoning-gym dataset a task's `meta["rg"]` recipe names (cached per process)."""
    return _dataset(
        recipe["dataset"],
        json.dumps(recipe.get("config") or {}, sort_keys=True),
        recipe.get("level"),
        int(recipe["seed"]),
        int(recipe["size"]),
    )


def entry_of(recipe: dict[str, Any]) -> dict[str, Any]:
    """The entry a recipe stands for: decoded from `entry`, else regenerated and checked by fingerprint."""
    if recipe.get("entry") is not None:
        return decode_entry(recipe["entry"])
    entry = build_dataset(recipe)[int(recipe["index"])]
    if recipe.get("fingerprint") and fingerprint(entry) != recipe["fingerprint"]:
        raise ValueError(
            f"rg:{recipe['dataset']} entry {recipe['index']} regenerated differently (reasoning-gym "
            f"{rg_version()} vs {recipe.get('version')}, or a generator that depends on PYTHONHASHSEED)"
        )
    return entry


def extract_tagged(response: str) -> str | None:
    """reasoning-gym's convention: the last `<answer>...</answer>`, stripped; None when there is none."""
    from reasoning_gym.utils import extract_answer

    return extract_answer(response, tag_name="answer", strip=True)


# ----------------------------------------------------------------------------- the verifier


# A number written with an exponent of 7 digits or more: generators that compare answers exactly (coin_flip's
# `Fraction(answer)`) would build 10**exponent, which for a sampled "1e1716171605161716" runs without end in C code
# no signal can stop (a 528-domain run hung there). No reasoning-gym answer needs such an exponent; up to 6 digits
# still reach the scorer (Fraction("1e999999") takes 0.2 s), so a hex answer such as "1e45678" is scored as before.
_HUGE_EXPONENT = re.compile(r"\d[eE][+-]?\d{7,}")


@dataclass
class ReasoningGymScore(SyncVerifier):
    """Reward = the generator's own `score_answer(answer, entry)`, bit for bit.

    `extract="full"` scores the whole response; `"tag"` the last `<answer>` tag's content (None,
    which reasoning-gym scores 0, when there is none). A task without a recipe, or whose entry
    cannot be rebuilt, is an ERROR verdict; an exception inside `score_answer` on a response
    is that response's fault and scores 0 (OK status, explained in `details`).
    """

    extract: Literal["full", "tag"] = "full"
    name: str = "reasoning_gym"

    def version_key(self) -> str:
        return f"reasoning-gym {rg_version()}"

    def verify(self, task: Task, response: str) -> Verdict:
        recipe = task.meta.get("rg")
        if not isinstance(recipe, dict) or "dataset" not in recipe:
            raise ValueError(f"task {task.id!r} has no meta['rg'] recipe (made by the rg: task source?)")
        dataset = build_dataset(recipe)
        entry = entry_of(recipe)
        answer = extract_tagged(response) if self.extract == "tag" else response
        if answer is not None and (huge := _HUGE_EXPONENT.search(answer)):
            return Verdict(0.0, False, details=f"exponent {huge.group(0)[:40]} out of any answer's range: not scored "
                                               f"(the scorer's exact conversion would not finish); scored 0")
        try:
            value = float(dataset.score_answer(answer, entry))
        except Exception as exc:  # noqa: BLE001 - the scorer choked on this response: a wrong answer
            return Verdict(0.0, False, details=f"score_answer raised {type(exc).__name__}: {exc}; scored 0")
        details = "" if answer is not None else "no <answer> tag"
        return Verdict(value, value >= 1.0, details=details)


@register_verifier("reasoning_gym")
def _reasoning_gym(extract: Literal["full", "tag"] = "full") -> ReasoningGymScore:
    if extract not in ("full", "tag"):
        raise ValueError(f"extract must be 'full' or 'tag', got {extract!r}")
    return ReasoningGymScore(extract=extract)
