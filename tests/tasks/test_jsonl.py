import random

import pytest

from posttrain.tasks import ListSource, TaskFileError, load_domain, load_jsonl


def _write(tmp_path, text, name="tasks.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_loads_valid_file_with_defaults(tmp_path):
    p = _write(tmp_path, '{"id": "a", "prompt": "1+1=", "answer": 2}\n\n// comment\n'
                         '{"prompt": "2+2=", "answer": "4", "level": 3}\n')
    tasks = load_jsonl(p)
    assert [t.id for t in tasks] == ["a", "tasks:4"]
    assert tasks[0].answer == "2"
    assert tasks[1].meta == {"level": 3}


def test_malformed_lines_are_reported_with_file_and_line(tmp_path):
    p = _write(tmp_path, '{"prompt": "ok", "answer": "1"}\n{not json\n["a list"]\n{"answer": "no prompt"}\n')
    with pytest.raises(TaskFileError) as err:
        load_jsonl(p)
    msg = str(err.value)
    assert f"{p}:2: invalid JSON" in msg
    assert f"{p}:3: expected a JSON object" in msg
    assert f"{p}:4: 'prompt' is required" in msg


def test_skip_mode_loads_the_rest_and_warns(tmp_path):
    p = _write(tmp_path, '{"prompt": "ok", "answer": "1"}\n{bad\n{"prompt": "fine"}\n')
    with pytest.warns(UserWarning, match=r"tasks.jsonl:2"):
        tasks = load_jsonl(p, on_error="skip")
    assert [t.prompt for t in tasks] == ["ok", "fine"]


def test_duplicate_ids_are_errors(tmp_path):
    p = _write(tmp_path, '{"id": 1, "prompt": "a"}\n{"id": "1", "prompt": "b"}\n')
    with pytest.raises(TaskFileError, match="duplicate id '1' \\(first on line 1\\)"):
        load_jsonl(p)


def test_empty_file_fails_cleanly(tmp_path):
    with pytest.raises(TaskFileError, match="no tasks"):
        load_jsonl(_write(tmp_path, "\n\n"))


def test_missing_file_fails_cleanly(tmp_path):
    with pytest.raises(TaskFileError, match="not found"):
        load_jsonl(tmp_path / "absent.jsonl")


def test_wrong_types_are_named(tmp_path):
    p = _write(tmp_path, '{"prompt": "x", "answer": [1]}\n{"prompt": "y", "meta": 3}\n{"prompt": "z", "id": true}\n')
    with pytest.raises(TaskFileError) as err:
        load_jsonl(p)
    assert "'answer' must be a string or number" in str(err.value)
    assert "'meta' must be an object" in str(err.value)
    assert "'id' must be a string or integer" in str(err.value)


def test_list_source_split_is_disjoint_and_covers_all(tmp_path):
    lines = "".join(f'{{"id": "t{i}", "prompt": "p{i}", "answer": "{i}"}}\n' for i in range(400))
    src = load_domain(str(_write(tmp_path, lines)), held_out_fraction=0.25).source
    assert isinstance(src, ListSource)
    train, held = {t.id for t in src.split("train")}, {t.id for t in src.split("held_out")}
    assert not train & held and len(train | held) == 400 and 50 < len(held) < 150
    rng = random.Random(0)
    assert all(src.sample(rng).id in train for _ in range(200))


def test_unknown_source_spec_is_a_clear_error():
    with pytest.raises(TaskFileError, match="unknown domain .mystery.: known domains are agent:<name>, arith:<name>"):
        load_domain("mystery")
    with pytest.raises(TaskFileError, match="unknown arithmetic family 'div'"):
        load_domain("arith:div")


def test_conversational_tasks_as_messages_or_an_hf_prompt_list(tmp_path):
    p = _write(tmp_path, '{"id": "m", "messages": [{"role": "system", "content": "Be brief."}, '
                         '{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}, '
                         '{"role": "user", "content": "2+2?"}], "answer": "4"}\n'
                         '{"id": "h", "prompt": [{"role": "user", "content": "3+3?"}], "answer": 6}\n')
    m, h = load_jsonl(p)
    assert m.meta["messages"][0] == {"role": "system", "content": "Be brief."} and len(m.meta["messages"]) == 4
    assert m.prompt == "Be brief.\n1+1?\n2\n2+2?"  # the plain rendering: what a raw-format model is prompted with
    assert h.meta == {"messages": [{"role": "user", "content": "3+3?"}]} and h.prompt == "3+3?" and h.answer == "6"


@pytest.mark.parametrize("line, reason", [
    ('{"messages": []}', "non-empty list"),
    ('{"messages": "hi"}', "non-empty list"),
    ('{"messages": [{"role": "robot", "content": "x"}]}', "messages[0].role = 'robot'"),
    ('{"messages": [{"role": "user", "content": 3}]}', "messages[0].content must be a string"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, '
     '{"role": "user", "content": "c"}]}', "messages[1]: a system message may only come first"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}', "ends with the user"),
    ('{"messages": [{"role": "user", "content": "a", "name": "x"}]}', "unknown key(s) name"),
    ('{"messages": ["hi"]}', "messages[0] must be an object"),
    ('{"prompt": "q", "messages": [{"role": "user", "content": "a"}]}', "not both"),
    ('{"prompt": [{"role": "user", "content": "a"}], "messages": [{"role": "user", "content": "a"}]}', "not both"),
])
def test_a_malformed_conversation_is_one_line_with_its_line_number(tmp_path, line, reason):
    p = _write(tmp_path, '{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(TaskFileError) as err:
        load_jsonl(p)
    assert str(err.value).startswith(f"{p}:2: ") and reason in str(err.value) and "\n" not in str(err.value)
