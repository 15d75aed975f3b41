"""The one prompt renderer: raw prompts unchanged, chat prompts token for token what transformers'
`apply_chat_template(..., add_generation_prompt=True)` gives, on Qwen3-, Llama-3- and ChatML-style templates of
tokenizers built here; end-of-turn stops; conversational tasks; `model.prompt_format` errors."""

from __future__ import annotations

import pytest

from chat_models import make_chat_model
from posttrain.engine.prompt_format import PromptFormatError, build_renderer, end_of_turn_ids
from posttrain.models import char_tokenizer
from posttrain.models.io import load_model
from posttrain.models.prompting import PromptRenderer
from posttrain.types import MESSAGES_KEY, SamplingParams, Task

FAMILIES = ("qwen3", "llama3", "chatml")


def hf_ids(path, messages) -> list[int]:
    from transformers import AutoTokenizer

    out = AutoTokenizer.from_pretrained(str(path)).apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.fixture(scope="module", params=FAMILIES)
def chat_checkpoint(request, tmp_path_factory):
    return request.param, make_chat_model(tmp_path_factory.mktemp(request.param) / "model", request.param)


@pytest.mark.parametrize("system", [None, "Answer with a number."])
def test_chat_prompts_are_token_identical_to_apply_chat_template(chat_checkpoint, system):
    family, path = chat_checkpoint
    _, tok = load_model(path)
    renderer = build_renderer(path, tok, "auto", system)
    assert renderer.mode == "chat"
    task = Task("t", "What is 12+34?", "46")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "What is 12+34?"}]
    ids = renderer.encode(renderer.render(task), tok)
    assert ids == hf_ids(path, messages)
    if family == "llama3":  # the template writes BOS itself: exactly one, as transformers has it
        assert ids.count(tok.bos_id) == 1 and ids[0] == tok.bos_id
    # a conversational task (few-shot turns) renders its own messages, the system prompt first when it has none
    convo = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}, {"role": "user", "content": "2+2?"}]
    few_shot = Task("f", "1+1?\n2\n2+2?", "4", {MESSAGES_KEY: convo})
    want = ([{"role": "system", "content": system}] if system else []) + convo
    assert renderer.encode(renderer.render(few_shot), tok) == hf_ids(path, want)


def test_the_end_of_turn_token_is_found_from_the_template(chat_checkpoint):
    family, path = chat_checkpoint
    _, tok = load_model(path)
    names = [tok.backend.id_to_token(i) for i in build_renderer(path, tok).end_of_turn]
    closing = {"qwen3": "<|im_end|>", "llama3": "<|eot_id|>", "chatml": "<|im_end|>"}[family]
    assert names[0] == closing and tok.eos_token in names  # llama3's EOS is <|end_of_text|>: <|eot_id|> is added
    params = build_renderer(path, tok).sampling(SamplingParams(stop_token_ids=(7,)))
    assert params.stop_token_ids[0] == 7 and tok.backend.token_to_id(closing) in params.stop_token_ids


def test_a_template_that_closes_a_turn_with_plain_text_adds_no_stop():
    from posttrain.engine.chat import ChatTemplate

    tok = char_tokenizer()
    plain_close = ChatTemplate("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}")
    assert end_of_turn_ids(plain_close, tok) == (tok.eos_id,)  # "\n\n" is no special token: never a stop


def test_raw_prompts_are_the_tasks_own_text_and_auto_is_raw_without_a_template(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    renderer = build_renderer(tiny_model_dir, tok)  # a checkpoint without a template
    assert renderer == PromptRenderer() and build_renderer(None, None) == PromptRenderer()
    task = Task("t", "12+34=", "46")
    assert renderer.render(task) == "12+34=" and renderer.encode("12+34=", tok) == tok.encode("12+34=")
    assert renderer.sampling(SamplingParams()) == SamplingParams()  # nothing added to the built-in model's sampling
    # raw with a system prompt: the documented plain rendering, one line before the prompt
    assert build_renderer(None, None, "raw", "Be brief.").render(task) == "Be brief.\n12+34="
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "1+1="}]
    convo = Task("c", "sys\n1+1=", "2", {MESSAGES_KEY: messages})
    assert build_renderer(None, None, "raw", "Be brief.").render(convo) == "sys\n1+1="  # it has its own system message


def test_prompt_format_chat_without_a_template_is_one_line_and_raw_overrides_a_template(tiny_model_dir, chat_checkpoint):
    with pytest.raises(PromptFormatError, match="ships no chat template") as err:
        build_renderer(tiny_model_dir, None, "chat")
    assert "\n" not in str(err.value)
    with pytest.raises(PromptFormatError, match="the built-in model"):
        build_renderer(None, None, "chat")
    _, path = chat_checkpoint
    _, tok = load_model(path)
    raw = build_renderer(path, tok, "raw")
    assert raw.mode == "raw" and raw.render(Task("t", "hi")) == "hi"


def test_token_ids_add_no_bos_to_a_chat_prompt_and_leave_a_raw_one_to_the_engine(chat_checkpoint):
    from posttrain.engine.mock import MockEngine

    _, path = chat_checkpoint
    _, tok = load_model(path)
    engine = MockEngine(["x"], tokenizer=tok)
    chat = build_renderer(path, tok)
    text = chat.render(Task("t", "hi"))
    assert chat.token_ids([text], engine) == [tok.encode(text, add_bos=False)]
    assert PromptRenderer().token_ids([text], engine) == engine.encode([text])
