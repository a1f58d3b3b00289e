"""Attempt histories and prompts as the UI shows them: verbatim, cuts said, corrections as a diff."""

from awm_assets.synthesis.previews import artifact_diff, attempt_history, fenced, last_prompt

TRACEBACK = ('Traceback (most recent call last):\n  File "server.py", line 3, in <module>\n'
             '    module.__dict__["x"] = 1\nNameError: name \'module\' is not defined')


def test_errors_are_verbatim_in_code_blocks():
    history = [{"attempt": 1, "passed": False, "error_rate": 1.0, "errors": {"_": [TRACEBACK]},
                "error_summaries": {"_": "Use ```python fences``` and define <module> names."},
                "artifact": {"code": "x = 1\n"}},
               {"attempt": 2, "passed": True, "error_rate": 0.0, "errors": {}, "artifact": {"code": "x = 2\n"}}]
    md = attempt_history(history)
    assert "```text\n" + TRACEBACK + "\n```" in md  # newlines, <module> and __dict__ kept as they are
    assert "````text\nUse ```python fences```" in md  # a longer fence around text with backticks
    assert "What the correction changed (attempt 1 -> 2)" in md and "-x = 1\n+x = 2" in md


def test_cuts_are_said():
    text = "a" * 5000 + "END"
    block = fenced(text, limit=1000)
    assert "chars omitted" in block and block.rstrip("`").rstrip().endswith("END")
    prompt = last_prompt([{"prompts": {"_": [{"role": "user", "content": text}]}}], limit=1000)
    assert prompt.startswith("Prompt (5003 characters, shown cut to 1000)")


def test_json_artifacts_diff_line_by_line():
    diff = artifact_diff({"tasks": ["a", "b"]}, {"tasks": ["a", "c"]})
    assert '-  "b"' in diff and '+  "c"' in diff
