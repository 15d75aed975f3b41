"""The body of one rollout producer process (runs in its own interpreter, spawned by `rl/async_loop.py`).

Covers: building the producer's own model copy, engine, domains and
rollouter from the run's config alone (`rl/build.py`), its own torch thread
count, and a request loop over one pipe: `load` (copy the newest published
weights out of shared memory under the board's lock and acknowledge the
version actually loaded), `run` (one rollout request, scored groups back; with `on_new_weights =
"update"` each engine call first adopts newer weights, so each turn keeps its own version),
`sandbox_failures` (this process's Ray sandbox workers that died since the last ask),
`rng_get` / `rng_set` (the sampler state, for exact resume), `stop`. Any
exception is answered as `("error", message)`; a closed pipe (the learner
died, even by SIGKILL) ends the process.
Does not cover: scheduling, staleness, the buffer (the learner side owns them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posttrain.rl.backends import Backends


def main(cfg: Any, index: int, seed: int, threads: int, tensors: dict[str, Any], lock: Any, version: Any,
         conn: Any, backends: Backends | None = None) -> None:
    import torch

    torch.set_num_threads(threads)
    from posttrain import aio
    from posttrain.engine.build import build_engine
    from posttrain.rl.build import build_domains, build_model, build_rollouter, build_sandboxes, sampling_params

    try:
        model, tokenizer, _, _ = build_model(cfg)
        domains = build_domains(cfg)
        sandbox = build_sandboxes(cfg, backends)  # this process's verifiers' own; Ray actors die with the process
        engine = build_engine(cfg.engine, model, tokenizer, seed)
        sampler = engine
        if cfg.rollout.on_new_weights == "update":  # each turn samples with the newest published weights
            from posttrain.rl.follow import FollowWeights

            def refresh(target: Any) -> None:
                with lock:
                    if int(version.value) > target.policy_version:
                        target.load_weights(tensors, int(version.value))

            sampler = FollowWeights(engine, refresh)
        rollouter = build_rollouter(cfg, sampler, domains, sampling_params(cfg, domains), sandbox, inline=True)
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
                sandbox.close()
                return
            if kind == "load":
                with lock:
                    v = int(version.value)
                    engine.load_weights(tensors, v)
                conn.send(("ok", v))
            elif kind == "run":
                _, tasks, n = msg
                conn.send(("ok", aio.run_sync(rollouter.run(tasks, n))))
            elif kind == "sandbox_failures":
                conn.send(("ok", sandbox.new_failures()))
            elif kind == "rng_get":
                conn.send(("ok", engine.sampler_state()))
            elif kind == "rng_set":
                engine.load_sampler_state(msg[1])
                conn.send(("ok", None))
            else:
                conn.send(("error", f"unknown producer message {kind!r}"))
        except Exception as exc:  # noqa: BLE001 - every failure goes back as data
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
