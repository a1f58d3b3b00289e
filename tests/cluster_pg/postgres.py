"""A throwaway PostgreSQL server for a test: its own cluster (initdb) in a temp folder, on a free loopback port with
password authentication, stopped and removed afterwards. PostgreSQL refuses to run as root, so as root the server
runs as an unprivileged user (`postgres` from Debian's package, else `nobody`) via runuser."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ("install Debian's postgresql package (`make postgresql`, as root: apt-get install -y postgresql); "
                "its programs are in /usr/lib/postgresql/<version>/bin")


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server programs are missing, or the server did not start; the message says which and why."""


def bin_dir() -> Path:
    """Where initdb, pg_ctl and createdb are: on the PATH, else the newest /usr/lib/postgresql/<version>/bin."""
    if found := shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise PostgresUnavailable(f"PostgreSQL's initdb is missing (not on the PATH, none in /usr/lib/postgresql): "
                                  f"{INSTALL_HINT}")
    return Path(versions[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    root: Path  # the temp folder: data/, the log, the socket
    port: int
    user: str
    password: str
    db: str
    os_user: str | None  # the system user the server runs as (None: this process's own)
    bins: Path

    @property
    def env(self) -> dict[str, str]:
        """The connection as dagster.cluster.yaml reads it."""
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USER": self.user,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": self.db}

    def log(self) -> str:
        try:
            return (self.root / "server.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        try:
            _run(self, ["pg_ctl", "stop", "-D", str(self.root / "data"), "-m", "fast", "-w", "-t", "60"], check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _run(server: PostgresServer, argv: list[str], *, check: bool = True,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [str(server.bins / argv[0]), *argv[1:]]
    if server.os_user:
        cmd = ["runuser", "-u", server.os_user, "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
                         cwd=server.root)
    if check and out.returncode != 0:
        raise PostgresUnavailable(f"{' '.join(argv[:2])} failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}"
                                  f"\n{server.log()}")
    return out


def start_postgres(db: str = "dagster") -> PostgresServer:
    """A new cluster, started and holding the database `db`, owned by a superuser with a random password."""
    bins = bin_dir()
    os_user = None
    if os.geteuid() == 0:
        names = [u for u in ("postgres", "nobody") if _user_exists(u)]
        if not names or not shutil.which("runuser"):
            raise PostgresUnavailable("running as root, PostgreSQL needs an unprivileged user (postgres or nobody) "
                                      "and runuser to start as it")
        os_user = names[0]
    # Not under pytest's tmp folder: it is private to root (0700), and the server's user must reach its files.
    root = Path(tempfile.mkdtemp(prefix="awm-pg-"))
    server = PostgresServer(root=root, port=_free_port(), user="awm", password=secrets.token_hex(16), db=db,
                            os_user=os_user, bins=bins)
    try:
        (root / "pwfile").write_text(server.password + "\n")
        if os_user:
            pw = pwd.getpwnam(os_user)
            os.chown(root, pw.pw_uid, pw.pw_gid)
            os.chown(root / "pwfile", pw.pw_uid, pw.pw_gid)
        (root / "pwfile").chmod(0o600)
        _run(server, ["initdb", "-D", str(root / "data"), "-U", server.user, f"--pwfile={root / 'pwfile'}",
                      "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8", "--no-sync"])
        # Loopback only, the socket in the temp folder; fsync off: a throwaway cluster need not survive a crash.
        options = f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        _run(server, ["pg_ctl", "start", "-D", str(root / "data"), "-l", str(root / "server.log"), "-w", "-t", "60",
                      "-o", options])
        _run(server, ["createdb", "-h", "127.0.0.1", "-p", str(server.port), "-U", server.user, db],
             env={"PGPASSWORD": server.password})
    except BaseException:
        server.stop()
        raise
    return server


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
