"""Running a probe inside an engine's own virtual environment."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loraplex.serving.engines.launcher import EngineConfig


def probe(config: EngineConfig, code: str) -> bool:
    """Run `code` with the engine environment's Python; True when it exits 0.

    SGLang's CPU switch is left out of the probe's environment, so the `.pth` fixes do not
    import torch just to answer a version question.
    """
    if not config.python.exists():
        return False
    env = {key: value for key, value in os.environ.items() if key != "SGLANG_USE_CPU_ENGINE"}
    env.pop("PYTHONPATH", None)
    # S603: every argument comes from this package or the operator's own config.
    result = subprocess.run(
        [str(config.python), "-c", code], capture_output=True, check=False, env=env
    )
    return result.returncode == 0
