"""The SVG rasteriser process: reads render requests on stdin, writes PNG bytes on stdout.

Runs as a script (`python -I _render_worker.py`), imports nothing of posttrain
and only `resvg_py`, caps its own address space, and works from an empty
directory (`POSTTRAIN_RENDER_DIR`, which the host makes and removes) that is
also resvg's resources directory, so a relative reference that slipped past
the host's filter finds nothing. The host kills it when a
render runs past its time budget (see `render.py`).

On start it writes one line, `ready`, once resvg is imported and the font
database loaded. Then the wire format, both ways: one JSON header line, then exactly `len` bytes.
Request {"width", "height", "len"} + SVG (UTF-8); reply {"ok": true, "len"} +
PNG, or {"ok": false, "error", "len": 0}.
"""

import json
import os
import resource
import sys


def main() -> None:
    limit = int(os.environ.get("POSTTRAIN_RENDER_MEM", str(2 << 30)))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    empty = os.environ["POSTTRAIN_RENDER_DIR"]  # made empty by the host, which removes it (render.py)
    os.chdir(empty)
    import resvg_py

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    warm = '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><text y="8">a</text></svg>'
    resvg_py.svg_to_bytes(svg_string=warm, width=8, height=8, resources_dir=empty)  # loads the font database once
    stdout.write(b"ready\n")
    stdout.flush()
    while True:
        line = stdin.readline()
        if not line:
            return
        head = json.loads(line)
        svg = stdin.read(head["len"]).decode("utf-8", errors="replace")
        try:
            png = resvg_py.svg_to_bytes(
                svg_string=svg, width=head["width"], height=head["height"], background="white", resources_dir=empty
            )
            reply, body = {"ok": True, "len": len(png)}, png
        except BaseException as exc:  # noqa: BLE001 - a pyo3 panic is a BaseException; keep serving
            reply, body = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300], "len": 0}, b""
        stdout.write(json.dumps(reply).encode() + b"\n" + body)
        stdout.flush()


if __name__ == "__main__":
    main()
