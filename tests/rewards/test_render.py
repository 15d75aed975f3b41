"""SVG rendering reward: right drawings score 1, wrong ones less, hostile or broken SVGs 0 with a reason."""

import base64
import time

import pytest

from posttrain.rewards import make_verifier, safe_verify, score_sync
from posttrain.rewards.render import RenderWorker, SvgRender, extract_svg, unsafe_reason
from posttrain.types import Task, VerdictStatus

NS = 'xmlns="http://www.w3.org/2000/svg"'
SQUARE = f'<svg {NS} width="100" height="100"><rect x="20" y="20" width="60" height="60" fill="black"/></svg>'
SHIFTED = SQUARE.replace('x="20"', 'x="28"')
CIRCLE = f'<svg {NS} width="100" height="100"><circle cx="50" cy="50" r="30" fill="red"/></svg>'
SLOW = (
    f'<svg {NS} width="100" height="100"><defs><filter id="b"><feGaussianBlur stdDeviation="30"/></filter></defs>'
    + "".join(f'<circle cx="{i % 100}" cy="{i // 100}" r="40" filter="url(#b)" opacity="0.5"/>' for i in range(300))
    + "</svg>"
)


@pytest.fixture(scope="module")
def verifier():
    v = SvgRender(size=64)
    yield v
    v.close()


def _task(**meta):
    return Task(id="draw", prompt="Draw a black square.", answer=SQUARE, meta=meta)


def test_identical_drawing_scores_one(verifier):
    out = safe_verify(verifier, _task(), f"Here you go:\n```svg\n{SQUARE}\n```")
    assert out.ok and out.passed and out.score == pytest.approx(1.0)


def test_similarity_orders_drawings(verifier):
    near = safe_verify(verifier, _task(), SHIFTED)
    far = safe_verify(verifier, _task(), CIRCLE)
    assert near.ok and far.ok and not near.passed and not far.passed
    assert 0.0 <= far.score < near.score < 1.0
    assert near.details.startswith("ssim ")
    raw = safe_verify(SvgRender(size=64, blank_baseline=False, isolate=False), _task(), SHIFTED)
    assert raw.score > near.score  # the raw SSIM credits the white background both share


def test_targets_from_meta(verifier, tmp_path):
    png = RenderWorker().render(SQUARE, 64, 64, 10.0)
    path = tmp_path / "target.png"
    path.write_bytes(png)
    for meta in ({"target_svg": SQUARE}, {"target_png": str(path)}, {"target_png_b64": base64.b64encode(png).decode()}):
        task = Task(id="t", prompt="?", meta=meta)
        assert safe_verify(verifier, task, SQUARE).score == pytest.approx(1.0), meta
    no_target = safe_verify(verifier, Task(id="t", prompt="?"), SQUARE)
    assert no_target.status is VerdictStatus.ERROR and "no target image" in no_target.details


@pytest.mark.parametrize(
    "response,why",
    [
        ("no drawing here", "no <svg>"),
        ("<svg>unclosed", "no <svg>"),
        ("<svg></svg>", "blank canvas"),  # renders blank: no reward for drawing nothing
        (f"<svg {NS} width='0' height='0'></svg>", "not rendered"),
        (f'<svg {NS} width="10" height="10"><rect width="5" height="5"</svg>', "not rendered"),
        (f'<svg {NS}><image href="/etc/passwd" width="10" height="10"/></svg>', "external reference"),
        (f'<svg {NS} xmlns:xlink="http://www.w3.org/1999/xlink"><image xlink:href="file:///etc/hostname"/></svg>', "external"),
        (f'<svg {NS}><rect width="9" height="9" fill="url(http://example.invalid/p.svg#g)"/></svg>', "url()"),
        (f'<svg {NS}><style>@import "http://example.invalid/x.css";</style></svg>', "@import"),
        ('<!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]><svg ' + NS + ">&x;</svg>", "entity"),
    ],
)
def test_broken_or_hostile_svgs_score_zero_with_a_reason(verifier, response, why):
    out = safe_verify(verifier, _task(), response)
    assert out.status is VerdictStatus.OK and out.score == 0.0 and not out.passed
    assert why in out.details, out.details


def test_doctype_inside_the_svg_is_refused():
    assert unsafe_reason('<svg><!DOCTYPE x [<!ENTITY a "b">]></svg>') == "DOCTYPE/ENTITY declarations are not allowed"


def test_fragment_and_data_references_are_allowed():
    ok = f'<svg {NS}><defs><linearGradient id="g"/></defs><rect fill="url(#g)" width="5" height="5"/><use href="#g"/></svg>'
    assert unsafe_reason(ok) is None
    assert unsafe_reason(f'<svg {NS}><image href="data:image/png;base64,AAAA"/></svg>') is None


def test_huge_declared_size_renders_at_the_fixed_size(verifier):
    huge = (f'<svg {NS} width="1000000000" height="1000000000" viewBox="0 0 100 100">'
            '<rect x="20" y="20" width="60" height="60"/></svg>')
    start = time.perf_counter()
    out = safe_verify(verifier, _task(), huge)
    assert out.ok and out.score == pytest.approx(1.0) and time.perf_counter() - start < 5


def test_oversized_svg_text_is_refused():
    v = SvgRender(size=32, max_svg_chars=100)
    out = safe_verify(v, _task(target_svg="<svg " + NS + ' width="4" height="4"/>'), SQUARE)
    assert out.score == 0.0 and "cap" in out.details
    v.close()


def test_slow_render_is_killed_and_the_worker_recovers():
    v = SvgRender(size=64, timeout_s=0.05)
    slow = safe_verify(v, _task(target_svg=CIRCLE), SLOW)
    assert slow.ok and slow.score == 0.0 and "ran past" in slow.details
    again = safe_verify(v, _task(target_svg=CIRCLE), CIRCLE)
    assert again.ok and again.score == pytest.approx(1.0)
    v.close()


def test_batch_and_registration():
    v = make_verifier({"type": "svg_render", "size": 32, "isolate": False})
    out = score_sync(v, [_task()] * 3, [SQUARE, CIRCLE, "garbage \x00"])
    assert [o.ok for o in out] == [True, True, True]
    assert out[0].score == pytest.approx(1.0) and out[2].score == 0.0
    with pytest.raises(ValueError, match="size"):
        make_verifier({"type": "svg_render", "size": 4})


def test_extract_svg_prefers_the_last_fenced_block():
    text = f"{CIRCLE}\n```svg\n{SQUARE}\n```"
    assert extract_svg(text) == SQUARE
    assert extract_svg(f"a {CIRCLE} b {SQUARE} c") == SQUARE


def test_missing_extra_names_it(monkeypatch):
    import builtins

    from posttrain.rewards import render

    real_import = builtins.__import__

    def no_resvg(name, *args, **kwargs):
        if name == "resvg_py":
            raise ImportError("no module")
        return real_import(name, *args, **kwargs)

    render._require_extra.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_resvg)
    try:
        with pytest.raises(ImportError, match=r"posttrain\[render\]"):
            SvgRender()
    finally:
        monkeypatch.undo()
        render._require_extra.cache_clear()
