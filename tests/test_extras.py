"""One way to report a missing optional dependency: `posttrain.extras.require`."""

import sys

import pytest

from posttrain.errors import UserError
from posttrain.extras import MissingExtraError, require


def test_a_missing_module_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # an import of peft now fails, as when it is not installed
    with pytest.raises(MissingExtraError) as info:
        require("peft", "lora", "LoRA")
    assert str(info.value) == "LoRA needs peft, which is not installed: pip install 'posttrain[lora]'"
    assert isinstance(info.value, UserError) and isinstance(info.value, ImportError)
    assert require("json", "none", "reading JSON").dumps([1]) == "[1]"


def test_every_former_way_now_goes_through_require(monkeypatch):
    from posttrain.distributed.ray_backend import RayMissingError, _ray
    from posttrain.engine import extras as engine_extras
    from posttrain.models.gguf_export import GGUFMissingError, require_gguf
    from posttrain.models.lora import LoRAUnavailableError, _peft

    assert engine_extras.require is require and engine_extras.MissingExtraError is MissingExtraError
    for module, call, error, extra in [("ray", _ray, RayMissingError, "ray"), ("gguf", require_gguf, GGUFMissingError, "gguf"),
                                       ("peft", _peft, LoRAUnavailableError, "lora")]:
        monkeypatch.setitem(sys.modules, module, None)
        with pytest.raises(error) as info:
            call()
        assert isinstance(info.value, MissingExtraError) and f"posttrain[{extra}]" in str(info.value)
