"""The request loop of one rollout producer process (runs in its own interpreter, spawned by `rl/async_loop.py`).

Covers: the pipe around the one producer body (`rl/producer.py`: engine, rollouter and weight following, the
same as a thread's or a Ray actor's), built from the run's config alone with its own torch thread count and
the board's shared-memory weights (`SharedWeights`). Messages: `load` (copy the newest published weights out
under the board's lock and acknowledge the version actually loaded), `run` (one rollout request, scored groups
back), `sandbox_failures` (this process's Ray sandbox workers that died since the last ask), `rng_get` /
`rng_set` (the sampler state, for exact resume), `stop`. Any exception is answered as `("error", message)`; a
closed pipe (the learner died, even by SIGKILL) ends the process.
Does not cover: what the body does (`rl/producer.py`); scheduling, staleness, the buffer (the learner side).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posttrain.rl.backends import Backends


def main(cfg: Any, index: int, seed: int, threads: int, tensors: dict[str, Any], lock: Any, version: Any,
         conn: Any, backends: Backends | None = None) -> None:
    from posttrain.rl.producer import ProducerBody, SharedWeights, own_parts

    try:
        body = ProducerBody(cfg, own_parts(cfg, threads, backends), seed, SharedWeights(tensors, lock, version))
    except Exception as exc:  # noqa: BLE001 - reported to the learner, which raises it
        conn.send(("error", f"producer {index} failed to build: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", index))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind = msg[0]
        try:
            if kind == "stop":
                body.close()
                return
            if kind == "load":
                conn.send(("ok", body.load()))
            elif kind == "run":
                _, tasks, n = msg
                conn.send(("ok", body.run(tasks, n)))
            elif kind == "sandbox_failures":
                conn.send(("ok", body.sandbox_failures()))
            elif kind == "rng_get":
                conn.send(("ok", body.sampler_state()))
            elif kind == "rng_set":
                body.load_sampler_state(msg[1])
                conn.send(("ok", None))
            else:
                conn.send(("error", f"unknown producer message {kind!r}"))
        except Exception as exc:  # noqa: BLE001 - every failure goes back as data
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
