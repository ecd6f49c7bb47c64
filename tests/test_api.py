"""The public training API: listed once (api.py), every name reachable as `st.<name>`, and
each loaded only when used."""

from __future__ import annotations

import subprocess
import sys

import scaletrain
import scaletrain.api


def test_every_name_of_api_py_is_the_same_object_under_scaletrain() -> None:
    names = [name for name in vars(scaletrain.api) if not name.startswith("_")]
    assert {"init", "wrap", "loader", "Checkpointer", "Progress", "shutdown"} <= set(names)
    for name in names:
        assert getattr(scaletrain, name) is getattr(scaletrain.api, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        scaletrain.no_such_helper  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as error:
        assert "no_such_helper" in str(error)
    else:
        raise AssertionError("scaletrain.no_such_helper did not raise")


def test_import_loads_no_torch_and_each_name_loads_only_its_own_module() -> None:
    probe = (
        "import sys; import scaletrain as st; print('torch' in sys.modules); st.init; "
        "print('scaletrain.checkpoint.checkpointer' in sys.modules); st.Checkpointer; "
        "print('scaletrain.checkpoint.checkpointer' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.split() == ["False", "False", "True"]
