"""A service that refuses to start on a bad config: `python3 service.py --check`."""
import json
import sys

REQUIRED = {"name": str, "port": int, "workers": int, "debug": bool, "database": dict, "allowed_hosts": list}


def load(path="config/service.json"):
    with open(path) as f:
        cfg = json.load(f)
    for key, kind in REQUIRED.items():
        if not isinstance(cfg.get(key), kind) or (kind is int and isinstance(cfg.get(key), bool)):
            raise SystemExit(f"config error: {key!r} must be {kind.__name__}")
    if not 1 <= cfg["port"] <= 65535:
        raise SystemExit("config error: port out of range")
    if not {"url", "pool_size"} <= set(cfg["database"]):
        raise SystemExit("config error: database needs url and pool_size")
    return cfg


if __name__ == "__main__":
    cfg = load()
    if "--check" in sys.argv:
        print(f"config ok: {cfg['name']} on port {cfg['port']}")
