"""`posttrain serve`: the OpenAI-compatible HTTP server over any engine.

Modules: `server.py` (the FastAPI app, SSE framing, `ServerThread`), `openai_service.py` (the API
logic without HTTP), `openai_protocol.py` (request records, validation, error bodies), `batcher.py`
(how concurrent requests share the engine). FastAPI and uvicorn are the `serve` extra.
"""
