"""Reading TOML on every supported Python: tomllib from 3.11, its backport tomli before."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError as TomlError
    from tomllib import loads as parse_toml
else:  # pragma: no cover - Python 3.10
    from tomli import TOMLDecodeError as TomlError
    from tomli import loads as parse_toml

__all__ = ["TomlError", "parse_toml"]
