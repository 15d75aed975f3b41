"""`provenance.machine`: the CPU is read from the OS, with the family and model numbers that tell two VMs apart."""

from posttrain.provenance import cpu_name, machine

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9B14
"""

XEON = "processor\t: 0\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"


def test_two_epycs_of_different_generations_get_different_names():
    zen4 = ZEN3.split("\n\n")[1]
    assert cpu_name(ZEN3) == "AMD EPYC (family 25 model 1)"  # the first processor's fields, not a mix of both
    assert cpu_name(zen4) == "AMD EPYC 9B14 (family 25 model 17)"
    assert cpu_name(XEON) == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (family 6 model 143)"


def test_without_cpuinfo_the_name_falls_back_to_the_platform():
    assert cpu_name("") and "family" not in cpu_name("")


def test_this_machine_is_described():
    m = machine()
    assert m["cpu"] and m["cores"] >= 1 and (m["memory_gib"] is None or m["memory_gib"] > 0)
    assert set(m) == {"cpu", "cores", "memory_gib", "gpu"}


def test_a_faked_or_broken_gpu_is_no_gpu_and_cuda_is_never_initialised_to_name_it(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a test's fake visible GPU on a CPU build
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: (_ for _ in ()).throw(AssertionError("init")))
    assert machine()["gpu"] is None  # not initialised: not asked
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert machine()["gpu"] is None  # asked, and CUDA failed: still a description, not a failed run
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    assert machine()["gpu"] == "NVIDIA H100 80GB HBM3"
