"""The live dashboard: read-only views of run stores (`reader.py`), the FastAPI app (`app.py`, the `serve` extra)
and its bundled page (`static/`); `headless.py` drives a headless Chromium to check the page."""
