"""The one owner of weight-derived copies (engine/local/derived.py): stamps see in-place updates and replaced
parameters, `shared` rebuilds exactly when the stamp differs, and torch's private counter is read nowhere else."""

import re
from pathlib import Path

import torch

import posttrain
from posttrain.engine.local.derived import WeightStamp, shared


def test_a_stamp_sees_in_place_updates_and_replaced_parameters():
    layer = torch.nn.Linear(3, 2)
    stamp = WeightStamp(layer.parameters())
    assert stamp.current()
    with torch.no_grad():
        layer.weight.add_(1.0)  # what an optimizer step does
    assert not stamp.current()
    assert stamp.restamped().current() and stamp.restamped().params == stamp.params
    other = torch.nn.Linear(3, 2)
    other.weight, other.bias = torch.nn.Parameter(layer.weight.detach().clone()), layer.bias
    twin = WeightStamp(other.parameters())
    twin.versions = list(stamp.restamped().versions)  # same counters, but one parameter is another object
    assert not twin.same_weights(stamp.restamped())
    assert WeightStamp(layer.parameters()).same_weights(stamp.restamped())


def test_shared_builds_once_per_model_and_key_and_again_when_the_weights_moved():
    model = torch.nn.Linear(2, 2)
    builds = []

    def build():
        builds.append(1)
        return object()

    first = shared(model, ("pack", "t"), build, WeightStamp(model.parameters()))
    assert shared(model, ("pack", "t"), build, WeightStamp(model.parameters())) is first and len(builds) == 1
    assert shared(torch.nn.Linear(2, 2), ("pack", "t"), build, None) is not first  # another model: its own
    with torch.no_grad():
        model.bias.mul_(2.0)
    again = shared(model, ("pack", "t"), build, WeightStamp(model.parameters()))
    assert again is not first and len(builds) == 3
    assert shared(model, ("copy", "x"), build) is shared(model, ("copy", "x"), build)  # unstamped: held as is


def test_torchs_private_version_counter_is_read_in_one_place():
    src = Path(posttrain.__file__).parent
    readers = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if re.search(r"\._version\b", p.read_text()))
    assert readers == ["engine/local/derived.py"]
