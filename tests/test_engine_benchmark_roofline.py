"""``benchmarks/engine.py``'s utilisation figures: batch-1 bandwidth from the decode steps alone, each round
against the read ceiling measured beside it, and the ceiling the fastest of three readers on 4 KiB and huge pages."""

import sys
from pathlib import Path

import pytest

from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # engine.py's lazy imports of its sibling benchmarks, by name
    try:
        yield load_benchmark("engine")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


class Params:
    def num_parameters(self):
        return 10_000_000  # 40 MB of fp32 weights


def test_bandwidth_fraction_is_each_rounds_decode_against_its_own_ceiling(bench):
    out = {
        "batch1_decode_ms_runs": [2.0, 4.0, 2.5],  # 20, 10, 16 GB/s of weights
        "batch1_local_ms_runs": [2.5, 5.0, 4.0],  # 16, 8, 10 GB/s
        "batch1_read_gb_s": [20.0, 10.0, 32.0],  # a noisy machine: each round's own ceiling
    }
    res = bench.utilisation(out, Params(), {"peak_gemm_gflop_s": 50.0})
    assert res["batch1_bandwidth_frac_runs"] == [1.0, 1.0, 0.5]
    assert res["batch1_bandwidth_frac"] == 1.0
    assert res["batch1_bandwidth_frac_end_to_end"] == 0.8  # median of 0.8, 0.8, 0.3125
    assert "grpo_gemm_frac" not in res


def test_gemm_fraction_counts_two_flops_per_parameter_per_token(bench):
    res = bench.utilisation({"grpo_local_tok_s": 1000.0}, Params(), {"peak_gemm_gflop_s": 50.0})
    assert res == {"grpo_gemm_frac": 0.4}


def test_read_ceiling_takes_the_fastest_reader_and_page_size(bench, monkeypatch):
    ceiling = object.__new__(bench.ReadCeiling)  # no buffers: the timing is faked below
    ceiling.small, ceiling.huge = _Buf(), _Buf()
    ceiling.kernel = _Kernel()
    # per page size, three timed reads for each of sum, the kernel's plain and non-temporal read probes
    times = iter([0.02] * 3 + [0.04] * 3 + [0.05] * 3 + [0.02] * 3 + [0.01] * 3 + [0.04] * 3)
    monkeypatch.setattr(bench, "timed", lambda fn: next(times))
    got = ceiling.measure(repeats=3)
    assert got == {"read_gb_s_4k_sum": 10.0, "read_gb_s_4k_c": 5.0, "read_gb_s_4k_c_nt": 4.0,
                   "read_gb_s_huge_sum": 10.0, "read_gb_s_huge_c": 20.0, "read_gb_s_huge_c_nt": 5.0, "read_gb_s": 20.0}


def test_read_ceiling_without_the_kernel_has_only_torchs_sum(bench, monkeypatch):
    ceiling = object.__new__(bench.ReadCeiling)
    ceiling.small, ceiling.huge, ceiling.kernel = _Buf(), _Buf(), None
    monkeypatch.setattr(bench, "timed", lambda fn: 0.02)
    assert ceiling.measure(repeats=3) == {"read_gb_s_4k_sum": 10.0, "read_gb_s_huge_sum": 10.0, "read_gb_s": 10.0}


def test_dram_fraction_uses_the_256_mb_ceiling_of_the_same_rounds(bench):
    out = {"batch1_decode_ms_runs": [2.0, 4.0, 2.5], "batch1_local_ms_runs": [2.5, 5.0, 4.0],
           "batch1_read_gb_s": [20.0, 10.0, 32.0], "batch1_dram_read_gb_s": [10.0, 10.0, 16.0]}
    res = bench.utilisation(out, Params(), {"peak_gemm_gflop_s": 50.0})
    assert res["batch1_bandwidth_frac"] == 1.0 and res["batch1_bandwidth_frac_dram"] == 1.0  # 2.0, 1.0, 1.0


class _Buf:
    def numel(self):
        return 50_000_000  # 200 MB

    def sum(self):
        return 0.0

    def data_ptr(self):
        return 0


class _Kernel:
    def pt_stream_read(self, ptr, n, nt):
        return 0.0
