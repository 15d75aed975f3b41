"""reasoning-gym's procedural generators as suites (`rg:<dataset>`) and training sources.

Covers: turning entries of any registered reasoning-gym dataset into `Task`s
(prompt = the entry's question, `answer` = its gold answer when it has one,
`meta["rg"]` = the recipe and the stored entry the verifier needs, so a task
read back from the run store or a JSONL dump scores the same); difficulty
through the dataset's own config options (validated: an unknown key is an
error listing the allowed ones) or its curriculum `level`; the `rg:` suite
family (entries 0..size-1 of `create_dataset(name, seed=seed, size=size)`, as
reasoning-gym defines a dataset, or only its train / held-out part); and
`RGSource`, the `TaskSource` behind `tasks.source = "rg:<dataset>"`, whose
split is a hash of each question, so held-out questions are never trained on
(an entry the generator fails to make is skipped by every draw: countdown,
for one, gives up on a few). Entries are generated in a bounded worker process (`tasks/bounded.py`):
an entry that takes over `generate_timeout_s` (number_sequence squares its way into numbers of millions of
digits on ~4% of its level-2 entries) or over the worker's memory limit is such a skipped entry too, and is
not asked for again by that source. Whether an entry near the limit makes it can depend on the machine's load.
`answer_format = "tag"` appends reasoning-gym's answer-tag instruction to each
prompt and makes the verifier read the last `<answer>` tag.
Does not cover: scoring (`rewards/reasoning_gym.py`, reasoning-gym's own
`score_answer`) or the `composite` dataset's mixtures (build one suite per
dataset instead).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from posttrain.tasks.base import Split, split_of
from posttrain.tasks.bounded import START_TIMEOUT_S, BoundedWorker, GenerationFailed, GenerationTimeout, shared_worker
from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Task

AnswerFormat = Literal["plain", "tag"]
TAG_INSTRUCTION = "\n\nProvide your final answer between <answer> and </answer> tags."
DEFAULT_SIZE = 100  # entries in an rg: suite unless `size` says otherwise
VIRTUAL_SIZE = 1_000_000  # indices a training source draws from
MAX_FAILED = 20  # entries a generator may fail to make in one draw before the draw fails with its error


def _config_tag(config: dict[str, Any], level: int | None) -> str:
    if not config and level is None:
        return ""
    blob = json.dumps({"config": config, "level": level}, sort_keys=True)
    return "@" + hashlib.sha256(blob.encode()).hexdigest()[:8]


@dataclass
class RGSource:
    """Tasks of one reasoning-gym dataset; `task(i)` is entry i of the dataset (seed, size) names."""

    dataset: str
    config: dict[str, Any] = field(default_factory=dict)
    """The dataset's config options (difficulty); seed and size are fields of their own."""
    level: int | None = None
    """A curriculum level applied to every attribute before `config` (datasets with a curriculum)."""
    seed: int = 0
    size: int = VIRTUAL_SIZE
    answer_format: AnswerFormat = "plain"
    held_out_fraction: float = 0.15
    generate_timeout_s: float = 10.0
    """An entry that takes longer to generate is skipped (its worker killed): a generator stuck on one entry
    would otherwise hold the whole run."""
    worker: BoundedWorker | None = field(default=None, repr=False, compare=False)
    """Where entries are generated (None: the process's shared worker)."""

    def __post_init__(self) -> None:
        from posttrain.rewards.reasoning_gym import build_dataset, rg_version

        if self.answer_format not in ("plain", "tag"):
            raise TaskFileError(f"rg:{self.dataset}: answer_format must be 'plain' or 'tag', got {self.answer_format!r}")
        if not 0 < self.held_out_fraction < 1:
            raise TaskFileError(f"rg:{self.dataset}: held_out_fraction must be in (0, 1), got {self.held_out_fraction}")
        if not self.generate_timeout_s > 0:
            raise TaskFileError(f"rg:{self.dataset}: generate_timeout_s must be > 0, got {self.generate_timeout_s!r}")
        if not isinstance(self.size, int) or self.size < 1:
            raise TaskFileError(f"rg:{self.dataset}: size must be a positive integer, got {self.size!r}")
        try:
            json.dumps(self.config)
        except TypeError as exc:
            raise TaskFileError(f"rg:{self.dataset}: options must be JSON values ({exc})") from None
        self._recipe = {"dataset": self.dataset, "config": dict(self.config), "level": self.level,
                        "seed": self.seed, "size": self.size, "version": rg_version()}
        try:
            build_dataset(self._recipe)  # the configuration's errors, here and in one line
        except ImportError as exc:
            raise TaskFileError(f"rg:{self.dataset}: {exc}") from None
        except ValueError as exc:
            raise TaskFileError(str(exc) if str(exc).startswith("rg:") else f"rg:{self.dataset}: {exc}") from None
        self._prefix = f"rg:{self.dataset}{_config_tag(self.config, self.level)}:s{self.seed}"
        self._stuck: set[int] = set()  # entries that ran past the limits: never asked for again
        self._warm: tuple[int, int] | None = None  # (worker, its generation) this dataset was built in

    @property
    def name(self) -> str:
        return self._prefix

    def task(self, index: int) -> Task:
        if index in self._stuck:
            raise TaskFileError(f"rg:{self.dataset}: entry {index} ran past the generation limits before (skipped)")
        worker = self.worker or shared_worker()
        try:
            if self._warm != (id(worker), worker.generation):  # build the generator there outside the entry's limit
                worker.call(_build, self._recipe, timeout_s=START_TIMEOUT_S)
                self._warm = (id(worker), worker.generation)
            entry = worker.call(_entry_fields, self._recipe, index, timeout_s=self.generate_timeout_s)
        except GenerationTimeout:
            self._stuck.add(index)
            raise TaskFileError(f"rg:{self.dataset}: entry {index} took over {self.generate_timeout_s:g} s to "
                                "generate (skipped)") from None
        except GenerationFailed as exc:  # a generator bug is the user's one-line error, not a traceback
            if exc.out_of_bounds:
                self._stuck.add(index)
            raise TaskFileError(f"rg:{self.dataset}: entry {index} failed to generate: {exc}") from None
        gold = entry["answer"]
        recipe = {**self._recipe, "index": index, "fingerprint": entry["fingerprint"], "entry": entry["entry"]}
        tagged = self.answer_format == "tag"
        meta: dict[str, Any] = {
            "verifier": {"type": "reasoning_gym", "extract": "tag" if tagged else "full"},
            "rg": recipe,
            "split_key": f"{self.dataset}:{entry['question']}",
        }
        if tagged and gold is not None:
            meta["reference_response"] = f"<answer>{gold}</answer>"  # what the gold answer looks like as a response
        prompt = str(entry["question"]) + (TAG_INSTRUCTION if tagged else "")
        return Task(id=f"{self._prefix}:{index}", prompt=prompt, answer=None if gold is None else str(gold), meta=meta)

    def split_of(self, task: Task) -> Split:
        return split_of(task.meta["split_key"], self.held_out_fraction)

    def _entry_task(self, index: int, failed: list[TaskFileError]) -> Task | None:
        """Entry `index` as a task, or None when the generator fails on it (some search and give up on a few
        entries: such an entry is no task, skipped by the draws); after `MAX_FAILED` failures in one draw the
        generator is broken and the last error is raised."""
        try:
            return self.task(index)
        except TaskFileError as exc:
            failed.append(exc)
            if len(failed) >= MAX_FAILED:
                raise
            return None

    def sample(self, rng: random.Random, split: Split = "train") -> Task:
        failed: list[TaskFileError] = []
        for _ in range(10_000):
            task = self._entry_task(rng.randrange(self.size), failed)
            if task is not None and self.split_of(task) == split:
                return task
        raise TaskFileError(f"{self.name}: could not draw a {split} task (too few distinct questions?)")

    def take(self, n: int, split: Split = "held_out", seed: int = 0) -> list[Task]:
        rng = random.Random(f"{self.name}:{split}:{seed}")
        seen: dict[str, Task] = {}
        questions: set[str] = set()
        failed: list[TaskFileError] = []
        attempts = 0
        while len(seen) < n and attempts < 20 * n + 100:
            attempts += 1
            task = self._entry_task(rng.randrange(self.size), failed)
            if task is None or self.split_of(task) != split or task.meta["split_key"] in questions:
                continue
            questions.add(task.meta["split_key"])
            seen[task.id] = task
        return list(seen.values())

    @property
    def recipe_version(self) -> str:
        """The reasoning-gym version the tasks were generated with."""
        return self._recipe["version"]

    def first(self, n: int, split: Split | Literal["all"] = "all") -> list[Task]:
        """Entries 0, 1, ... of the dataset (only those of `split`), n of them: a fixed evaluation set."""
        out: list[Task] = []
        failed: list[TaskFileError] = []
        index = 0
        while len(out) < n and index < self.size and index < 50 * n + 100:
            task = self._entry_task(index, failed)
            if task is not None and (split == "all" or self.split_of(task) == split):
                out.append(task)
            index += 1
        return out


def _build(recipe: dict[str, Any]) -> None:
    """Build (and cache) the recipe's generator in the bounded worker."""
    from posttrain.rewards.reasoning_gym import build_dataset

    build_dataset(recipe)


def _entry_fields(recipe: dict[str, Any], index: int) -> dict[str, Any]:
    """What a task needs of entry `index` (run in the bounded worker: the generator's own objects stay there)."""
    from posttrain.rewards.reasoning_gym import build_dataset

    return _fields(build_dataset(recipe)[index])


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the parent process takes it: question and gold answer as text, fingerprint, storable form."""
    from posttrain.rewards.reasoning_gym import fingerprint, storable_entry

    gold = entry.get("answer")
    return {"question": str(entry["question"]), "answer": None if gold is None else str(gold),
            "fingerprint": fingerprint(entry), "entry": storable_entry(entry)}


def rg_reference(dataset: str, seed: int, size: int, index: int) -> dict[str, Any]:
    """reasoning-gym's own `create_dataset(dataset, seed=seed, size=size)[index]`: question and answer as text and
    the entry's storable form (a parity reference for tests and surveys; run it in the generation worker, whose
    string hashing the entries depend on for some generators)."""
    import reasoning_gym

    return _fields(reasoning_gym.create_dataset(dataset, seed=seed, size=size)[index])


def rg_datasets(leveled: bool = False) -> list[str]:
    """reasoning-gym's registered datasets (those with a curriculum, whose `level` sets difficulty, when `leveled`),
    `composite` left out (build one domain per dataset instead)."""
    try:
        from reasoning_gym import factory
    except ImportError:
        return []
    names = factory.CURRICULA if leveled else factory.DATASETS
    return sorted(n for n in names if n != "composite")


def rg_level_config(dataset: str, level: int, options: dict[str, Any]) -> str | None:
    """The configuration `level` resolves to under the entry's config options, as JSON (None when it does not
    resolve: building the domain says why). A level past every attribute's last resolves as the last one does, so
    two such levels give the same tasks."""
    from posttrain.rewards.reasoning_gym import allowed_options, resolve_config

    try:
        config = {k: v for k, v in options.items() if k in allowed_options(dataset)}
        return json.dumps(resolve_config(dataset, config, level), sort_keys=True, default=str)
    except (ImportError, ValueError):
        return None


@register_domain("rg:", "a reasoning-gym generator: entries 0..size-1 (size, seed, level, config options)", knob="level",
                 members=rg_datasets, level_config=rg_level_config)
def _rg_domain(
    dataset: str,
    size: int | None = None,
    seed: int = 0,
    split: Literal["all", "train", "held_out"] = "all",
    answer_format: AnswerFormat = "plain",
    level: int | None = None,
    held_out_fraction: float = 0.15,
    limit: int | None = None,
    generate_timeout_s: float = 10.0,
    **config: Any,
) -> Domain:
    """Training samples the train split of `VIRTUAL_SIZE` entries (or of `size`, when given); the evaluation
    view is entries 0..size-1 (`split = "all"`, size 100 by default) or the first `size` of one split.
    `generate_timeout_s`: an entry that takes longer to generate is skipped."""
    from posttrain.rewards.reasoning_gym import ReasoningGymScore

    if split not in ("all", "train", "held_out"):
        raise TaskFileError(f"rg:{dataset}: split must be 'all', 'train' or 'held_out', got {split!r}")
    train = RGSource(dataset, config, level, seed, size or VIRTUAL_SIZE, answer_format, held_out_fraction,
                     generate_timeout_s)
    eval_size = size or DEFAULT_SIZE
    if split == "all":
        view = train if size else RGSource(dataset, config, level, seed, eval_size, answer_format, held_out_fraction,
                                           generate_timeout_s)
    else:  # draw from a larger index range so that `size` tasks of the split exist
        view = RGSource(dataset, config, level, seed, VIRTUAL_SIZE, answer_format, held_out_fraction,
                        generate_timeout_s)

    def evaluation(n: int | None, _seed: int) -> list[Task]:
        return view.first(eval_size if n is None else min(eval_size, n), split)

    return Domain(
        f"rg:{dataset}",
        train,
        ReasoningGymScore(extract="tag" if answer_format == "tag" else "full"),
        evaluation,
        sampling=SamplingDefaults(max_tokens=256),
        description=f"{eval_size if limit is None else min(eval_size, limit)} reasoning-gym {dataset} entries "
                    f"(seed {seed}{', ' + split if split != 'all' else ''})",
        meta={"dataset": dataset, "size": eval_size, "seed": seed, "split": split, "level": level,
              "answer_format": answer_format, "config": config, "reasoning_gym": train.recipe_version},
        eval_limit=limit,
    )
