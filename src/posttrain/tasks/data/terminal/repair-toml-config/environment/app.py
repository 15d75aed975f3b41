"""Reads settings.toml; `python3 app.py` prints the effective settings or the first problem."""
import datetime
import sys
import tomllib

with open("settings.toml", "rb") as f:
    s = tomllib.load(f)
server, jobs = s["server"], s["jobs"]
assert isinstance(server["host"], str) and isinstance(server["port"], int), "server.host/port"
assert isinstance(server["tls"], bool), "server.tls must be a boolean"
assert isinstance(jobs["cleanup_after"], datetime.date), "jobs.cleanup_after must be a date"
assert all(isinstance(x, str) for x in jobs["queues"]), "jobs.queues must be strings"
print(f"{server['host']}:{server['port']} tls={server['tls']} queues={','.join(jobs['queues'])} "
      f"cleanup={jobs['cleanup_after'].isoformat()}")
