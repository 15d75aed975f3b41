"""Engines whose model runs elsewhere: `OpenAIEngine` (any OpenAI-compatible HTTP server) and
`VLLMEngine` (vLLM's offline engine on a GPU, an optional extra). Import them from their modules
(`remote/openai_engine.py` needs httpx, `remote/vllm_engine.py` vLLM only when built) or lazily
from `posttrain.engine`.
"""
