"""BFCL tests need bfcl-eval (installed with --no-deps by the Makefile)."""

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make install adds it with --no-deps)")
