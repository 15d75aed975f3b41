"""Scale-out back ends (optional extras, imported lazily): Ray rollout workers (`ray_backend`).

The core never imports this package: `rl/async_loop.py` loads a back end by module name when a run's
config asks for it.
"""
