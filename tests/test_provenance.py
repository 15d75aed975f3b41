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
