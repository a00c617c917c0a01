"""What the server benches share: a scratch PostgreSQL database, a project key, the
processes of a deployment (gunicorn web nodes, Celery worker nodes, beat, a private
redis-server), each in its own process group and logging to a file, the CPU time a node and
its PostgreSQL backends spent, and an HTTP client
with ctxkit's retry rules that can fail over between web nodes.

Not a test helper: the benches print figures, tests/ has its own (tests/pipeline/support.py).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
BIN = ROOT / ".venv" / "bin"


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on port {port}")


def scratch_name(default: str) -> str:
    """The scratch database of a bench: ``<name>_bench`` when DATABASE_URL names a PostgreSQL
    database (so benches started with different DATABASE_URLs never drop each other's), else
    ``default``. Never a database another bench owns (``ctxview_bench_pages``)."""
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("DATABASE_URL", ""))
    name = url.path.lstrip("/") if url.scheme.startswith("postgres") else ""
    db = f"{name}_bench" if name else default
    if db == "ctxview_bench_pages" or not db.replace("_", "").isalnum():
        raise SystemExit(f"refusing scratch database {db!r}")
    return db


def create_database(db: str, env: dict[str, str]) -> None:
    """Drop and create ``db``, then migrate it with ``env`` (whose DATABASE_URL names it)."""
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)


def drop_database(db: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def create_key(env: dict[str, str], project: str, *, can_read: bool = True) -> str:
    """A new project and an ingest (and read) key for it, through the services."""
    code = (
        f"from manifests import services; p = services.create_project(name={project!r}); "
        f"print(services.create_api_key(project=p, can_ingest=True, can_read={can_read})[1])"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1]


class Processes:
    """The processes of a deployment, each in its own process group (killed as a whole)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.started: list[subprocess.Popen] = []
        logs.mkdir(parents=True, exist_ok=True)

    def spawn(self, name: str, command: list[str], **extra: str) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "a")  # lives as long as the process
        process = subprocess.Popen(
            command, cwd=ROOT, env={**self.env, **extra}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.started.append(process)
        return process

    def redis(self, port: int) -> subprocess.Popen:
        process = self.spawn(
            "redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        )
        wait_port(port)
        return process

    def web(
        self, port: int, *, workers: int = 3, name: str = "gunicorn", log_level: str = "info", **extra: str
    ) -> subprocess.Popen:
        process = self.spawn(
            name,
            [
                str(BIN / "gunicorn"),
                "ctxview.wsgi",
                "-b",
                f"127.0.0.1:{port}",
                "-w",
                str(workers),
                "--timeout",
                "60",
                "--log-level",
                log_level,
            ],
            **extra,
        )
        wait_port(port)
        return process

    def worker(
        self, name: str = "worker", *, concurrency: int = 2, beat: bool = False, log: str | None = None, **extra: str
    ) -> subprocess.Popen:
        """A Celery worker node named ``name@host`` (prefork), logging to ``log`` (default: its
        name) .log; with ``beat``, beat runs inside it."""
        command = [
            str(BIN / "celery"),
            "-A",
            "ctxview",
            "worker",
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "--loglevel=INFO",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if beat:
            command += ["--beat", "--schedule", str(self.logs / f"{name}-beat-schedule")]
        return self.spawn(log or name, command, **extra)

    def beat(self, name: str = "beat") -> subprocess.Popen:
        """The one beat of a deployment, on its own (docs/deploy.md)."""
        return self.spawn(
            name,
            [
                str(BIN / "celery"),
                "-A",
                "ctxview",
                "beat",
                "--loglevel=INFO",
                "--schedule",
                str(self.logs / f"{name}-schedule"),
            ],
        )

    @staticmethod
    def kill(process: subprocess.Popen | None, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (SIGKILL: no cleanup, no acknowledgement, a crash)."""
        if process is not None and process.poll() is None:
            os.killpg(process.pid, sig)
            process.wait(timeout=30)

    def stop(self, process: subprocess.Popen | None) -> None:
        """A clean stop (SIGTERM), then SIGKILL if it lingers."""
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill(process)

    def stop_all(self) -> None:
        for process in reversed(self.started):
            self.kill(process)
        self.started.clear()


class Client:
    """One client thread's sends, with ctxkit's retry rules: a refused or cut connection is
    retried (on the next web node, when there are several), 503/429 after Retry-After; any
    other 5xx is counted, then retried. ``tally`` counts what happened (shared, locked)."""

    def __init__(self, ports: list[int], key: str, tally: Counter, lock: threading.Lock, *, first: int = 0) -> None:
        self.ports, self.key, self.tally, self.lock = ports, key, tally, lock
        self.node = first % len(ports)

    @property
    def port(self) -> int:
        return self.ports[self.node]

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.tally[name] += n

    def send(self, body: bytes, *, attempts: int = 30) -> dict | None:
        for _attempt in range(attempts):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            try:
                conn.request(
                    "POST",
                    "/api/v1/manifests",
                    body,
                    {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
                )
                response = conn.getresponse()
                raw = response.read()
            except OSError:
                self.count("connection errors (retried)")
                self.node = (self.node + 1) % len(self.ports)  # fail over to the next web node
                time.sleep(0.5)
                continue
            finally:
                conn.close()
            if response.status >= 500 and response.status != 503:
                self.count("5xx")
                time.sleep(0.5)
                continue
            if response.status in (429, 503):
                self.count(f"{response.status} (retried after Retry-After)")
                time.sleep(float(response.getheader("Retry-After") or 1))
                continue
            data = json.loads(raw)
            if response.status != 200:
                self.count(f"HTTP {response.status}")
                return data
            self.count("accepted", data["accepted"])
            self.count("duplicate", data["duplicates"])
            self.count("rejected", data["rejected"])
            return data
        self.count("gave up")
        return None


def _cpu(stat: str, *, children: bool = True) -> float:
    """utime + stime (+ those of reaped children) from a /proc/<pid>/stat line, in seconds."""
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = sum(int(f) for f in fields[11 : 15 if children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds used so far by the processes of one process group (a node: its master and
    its workers). A node killed earlier in the phase is missing."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[2]) == pgid:
            total += _cpu(text)
    return total


def backend_cpu_seconds(conn) -> float:
    """CPU seconds of the PostgreSQL backends serving the bench database now (not this
    connection): the nodes keep theirs for the phase (CONN_MAX_AGE 60 s, reused by workers)."""
    total = 0.0
    pids = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    for (pid,) in pids:
        try:
            total += _cpu(Path(f"/proc/{pid}/stat").read_text(), children=False)
        except OSError:
            continue
    return total


def scratch_database_name(suffix: str, default: str) -> str:
    """A bench's scratch database, the way bench/pages.py names its own: ``<name>_bench_<suffix>``
    when DATABASE_URL names a PostgreSQL database (so benches started by different people with
    different DATABASE_URLs never drop each other's database), else ``default``. The server is
    still BENCH_PG's."""
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("DATABASE_URL", ""))
    name = url.path.lstrip("/") if url.scheme.startswith("postgres") else ""
    db = f"{name}_bench_{suffix}" if name else default
    if not db.replace("_", "").isalnum():  # it goes unquoted into DROP/CREATE DATABASE
        raise SystemExit(f"refusing scratch database name {db!r}")
    return db
