"""hugepage_empty: huge-page-backed buffers for the engine's packed weights behave exactly like torch.empty."""

import gc

import pytest
import torch

from posttrain.engine.local import hugepages
from posttrain.engine.local.hugepages import HUGE_PAGE, MIN_BYTES, hugepage_empty, thp_mode

THP_ON = thp_mode() in ("always", "madvise")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int16])
@pytest.mark.slow
def test_large_buffer_holds_what_is_written_and_starts_on_a_huge_page_boundary(dtype):
    n = (MIN_BYTES + 3 * HUGE_PAGE) // torch.empty((), dtype=dtype).element_size() + 7
    buf = hugepage_empty(n, dtype)
    assert buf.shape == (n,) and buf.dtype == dtype and buf.is_contiguous()
    src = torch.arange(n, dtype=torch.int64).remainder(100).to(dtype)
    buf.copy_(src)
    assert torch.equal(buf, src)
    if THP_ON:
        assert buf.data_ptr() % HUGE_PAGE == 0


@pytest.mark.slow
def test_buffer_outlives_every_python_reference_but_its_own():
    buf = hugepage_empty(MIN_BYTES, torch.float32)  # 64 MiB
    buf.fill_(3.0)
    view = buf[10:20]
    del buf
    gc.collect()
    assert torch.equal(view, torch.full((10,), 3.0))  # the mapping lives as long as any view of it


def test_small_buffers_and_thp_never_fall_back_to_torch_empty(monkeypatch):
    small = hugepage_empty(100, torch.float32)
    assert small.shape == (100,)
    calls = []
    monkeypatch.setattr(hugepages.mmap, "mmap", lambda *a, **k: calls.append(a))  # a mapping would be a bug here
    below = hugepage_empty(MIN_BYTES // 4 - 1, torch.float32)  # one element short of MIN_BYTES
    below.fill_(2.0)
    monkeypatch.setattr(hugepages, "thp_mode", lambda: "never")
    big = hugepage_empty(MIN_BYTES // 4, torch.float32)
    big.fill_(1.0)
    assert calls == [] and float(big.sum()) == MIN_BYTES // 4 and float(below[-1]) == 2.0


def test_thp_mode_reads_the_bracketed_choice(tmp_path, monkeypatch):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    monkeypatch.setattr(hugepages, "_THP", f)
    assert thp_mode() == "madvise"
    monkeypatch.setattr(hugepages, "_THP", tmp_path / "missing")
    assert thp_mode() == "unavailable"


def test_packed_decode_weights_use_the_huge_page_buffer():
    from posttrain.engine.local.pack import flat_pack, to_panels

    mats = [torch.randn(2048, 1024), torch.randn(1024, 2048)]  # 16 MiB of fp32 panels
    views, flat = flat_pack(mats, to_panels)
    for m, v in zip(mats, views):
        assert torch.equal(v.permute(1, 0, 2).reshape(m.shape[0], -1)[:, : m.shape[1]], m)
    if THP_ON:
        assert flat.data_ptr() % HUGE_PAGE == 0
