"""The README's quick start runs as written and prints what it says."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs(tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "1 1700000001000"
    assert lines[1:] == ["1 b'a'", "2 b'b'", "3 b'c'"]


def test_top_has_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1).strip().splitlines()
    assert len(first_block) == 2
    assert first_block[0].startswith("pip install . && kafkalog demo ")
    assert first_block[1].startswith("pip install '.[test]' && pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install '.[test]' && pytest\n" in ci


def test_client_example_runs(tmp_path, monkeypatch):
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[1]
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["meta"].topic == "events" and scope["meta"].offset == 0
    import kafkalog
    with kafkalog.LogStore(tmp_path / "data", read_only=True) as store:
        p = scope["meta"].partition
        log = store.log("events", p)
        if p == 0:
            assert log.log_start_offset == log.log_end_offset == 1
        assert log.log_end_offset == 1
