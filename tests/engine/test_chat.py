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


@pytest.mark.slow
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


QWEN_TOOLS = (  # Qwen2.5's tool template (as its tokenizer_config.json ships it, less the default system text)
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- endif %}{{- \"\\n\\n# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\\n<tools>\" }}{%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}"
    "{{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}"
    "{%- elif messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_a_tool_template_with_tools_and_calls_matches_transformers(tmp_path):
    from transformers import PreTrainedTokenizerFast

    tok = char_tokenizer()
    tok.save(tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["chat_template"] = [{"name": "default", "template": CHATML}, {"name": "tool_use", "template": QWEN_TOOLS}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    ours = ChatTemplate.from_checkpoint(tmp_path)
    assert ours.supports_tools and ours.source == CHATML  # the tool_use template renders requests with tools
    hf = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    want = hf.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert ours.render(messages, tools=tools) == want
    # OpenAI clients send the arguments as a JSON string: they reach the template as an object all the same
    wire = [*messages[:2], {**messages[2], "tool_calls": [{**call, "function": {**call["function"],
                                                                                "arguments": '{"city": "Paris"}'}}]},
            messages[3]]
    assert ours.render(wire, tools=tools) == want
    assert ours.render(messages[:2]) == hf.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert not ChatTemplate(CHATML).supports_tools and not ChatTemplate.plain().supports_tools
