"""`awm synth` refuses a malformed seed file before anything runs. (Its whole run, headless into a persistent
instance, is tests/llm_conformance/test_synth_e2e.py: the demo batch over HTTP through litellm.)"""

from __future__ import annotations

import os
import subprocess
import sys


def test_awm_synth_rejects_a_malformed_seed_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "ok"}\nnot json\n')
    env = {**os.environ, "AWM_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "awm_assets.cli", "synth", "--seed-batch", str(bad)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "bad.jsonl:2: malformed JSON" in out.stderr
    assert not (tmp_path / "home" / "scenarios").exists()
