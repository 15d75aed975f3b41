"""Where the engine's callers found `require` and `MissingExtraError`; they live in `posttrain/extras.py` now.

Covers: the re-exports. Does not cover: anything else.
"""

from posttrain.extras import MissingExtraError as MissingExtraError
from posttrain.extras import install_hint as install_hint
from posttrain.extras import require as require
