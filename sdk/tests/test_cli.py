"""The ``ctxkit`` command: ``count`` and ``send-spool`` (against a real local server)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from conftest import API_KEY, IngestServer, make_manifest
from ctxkit.cli import main
from ctxkit.record.spool import Spool


@pytest.fixture
def spooled(tmp_path: Path) -> Path:
    spool = Spool(tmp_path / "spool")
    spool.append([make_manifest(f"c{n}") for n in range(25)])
    spool.close()
    return tmp_path / "spool"


def test_count_prints_size_cjk_tokens_and_window_shares(tmp_path: Path, capsys) -> None:
    path = tmp_path / "doc.txt"
    text = "Hello world, the budget is 8000 tokens.\n上下文窗口预算\n"
    path.write_text(text, encoding="utf-8")
    assert main(["count", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"bytes={len(text.encode())}" in out
    assert f"chars={len(text)}" in out
    assert "cjk_chars=7" in out
    found = re.search(r"est_tokens=(\d+)", out)
    assert found is not None
    tokens = int(found.group(1))
    assert 10 <= tokens <= 40
    assert f"8k window: {100 * tokens / 8000:.2f}%" in out
    assert f"128k window: {100 * tokens / 128000:.2f}%" in out


def test_count_of_a_missing_file_fails_cleanly(tmp_path: Path, capsys) -> None:
    assert main(["count", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt" in capsys.readouterr().err


def test_send_spool_sends_everything_and_empties_the_directory(server: IngestServer, spooled: Path, capsys) -> None:
    assert main(["send-spool", "--dir", str(spooled), "--host", server.url, "--api-key", API_KEY]) == 0
    assert server.ids() == {f"c{n}" for n in range(25)} and server.duplicates == 0
    assert "sent=25 rejected=0 skipped=0 segments_left=0" in capsys.readouterr().out
    assert list(spooled.iterdir()) == []


def test_send_spool_reads_host_and_key_from_the_environment(server: IngestServer, spooled: Path, monkeypatch) -> None:
    monkeypatch.setenv("CTXVIEW_API_KEY", API_KEY)
    monkeypatch.setenv("CTXVIEW_HOST", server.url)
    assert main(["send-spool", "--dir", str(spooled)]) == 0
    assert len(server.ids()) == 25 and server.duplicates == 0


def test_send_spool_exits_non_zero_and_keeps_data_when_the_server_is_down(spooled: Path, capsys) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    code = main(["send-spool", "--dir", str(spooled), "--host", dead, "--api-key", API_KEY, "--retries", "0"])
    assert code == 1
    out = capsys.readouterr().out
    assert "sent=0" in out and "segments_left=1" in out
    assert [p.suffix for p in spooled.iterdir()] == [".jsonl"]


def test_send_spool_with_a_bad_key_keeps_the_data(server: IngestServer, spooled: Path, capsys) -> None:
    # A wrong key is a configuration error, not bad data: nothing is deleted, the command fails.
    assert main(["send-spool", "--dir", str(spooled), "--host", server.url, "--api-key", "wrong"]) == 1
    assert "sent=0 rejected=0 skipped=0 segments_left=1" in capsys.readouterr().out
    assert server.ids() == set()
    assert main(["send-spool", "--dir", str(spooled), "--host", server.url, "--api-key", API_KEY]) == 0
    assert len(server.ids()) == 25 and server.duplicates == 0


def test_send_spool_without_a_key_is_a_usage_error(spooled: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("CTXVIEW_API_KEY", raising=False)
    assert main(["send-spool", "--dir", str(spooled)]) == 2
    assert "CTXVIEW_API_KEY" in capsys.readouterr().err


def test_the_ctxkit_entry_point_is_main(tmp_path: Path) -> None:
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "ctxkit"]
    assert script.load() is main
    path = tmp_path / "a.txt"
    path.write_text("abc", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "ctxkit.cli", "count", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "bytes=3" in done.stdout
