"""Chat templates: the plain template, and a checkpoint's Jinja template rendered as transformers does."""

from __future__ import annotations

import json

import pytest

from posttrain.engine.chat import ChatTemplate, ChatTemplateError
from posttrain.models import char_tokenizer

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_plain_template_joins_contents():
    t = ChatTemplate.plain()
    assert t.render([{"role": "user", "content": "12+34="}]) == "12+34="
    assert (
        t.render([{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "1+1="}]}])
        == "be brief\n1+1="
    )
    tok = char_tokenizer()
    assert t.encode([{"role": "user", "content": "7="}], tok) == tok.encode("7=")  # with BOS, as the model trained


def test_checkpoint_template_matches_transformers(tmp_path):
    from transformers import PreTrainedTokenizerFast

    tok = char_tokenizer()
    tok.save(tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHATML
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    messages = [
        {"role": "system", "content": "sum"},
        {"role": "user", "content": "2+2="},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3="},
    ]
    ours = ChatTemplate.from_checkpoint(tmp_path)
    hf = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    assert ours.render(messages) == hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.encode(messages, tok) == tok.encode(ours.render(messages), add_bos=False)


def test_named_template_list_and_jinja_file(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ bos_token }}"}],
                "bos_token": "<s>",
            }
        )
    )
    assert ChatTemplate.from_checkpoint(tmp_path).render([{"role": "user", "content": "x"}]) == "D<s>"
    (tmp_path / "chat_template.jinja").write_text("J{{ messages|length }}")
    assert ChatTemplate.from_checkpoint(tmp_path).render([{"role": "user", "content": "x"}]) == "J1"


def test_bad_messages_and_template_refusals_are_chat_template_errors(tmp_path):
    t = ChatTemplate.plain()
    with pytest.raises(ChatTemplateError, match="role"):
        t.render([{"role": "robot", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="image_url"):
        t.render([{"role": "user", "content": [{"type": "image_url"}]}])
    with pytest.raises(ChatTemplateError, match="at least one"):
        t.render([])
    strict = ChatTemplate(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}ok"
    )
    with pytest.raises(ChatTemplateError, match="first message must be from the user"):
        strict.render([{"role": "assistant", "content": "x"}])
    assert strict.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="chat template failed"):
        ChatTemplate("{{ messages[0].nope.deeper }}").render([{"role": "user", "content": "x"}])
