"""A private PostgreSQL server for tests that kill, restart, partition or TLS-verify it: its own data folder and port
(run as the `postgres` user, as the packaged server is), optionally with TLS certificates from a CA of its own and
optionally inside a network namespace. The shared server on 5432 is never touched."""

from __future__ import annotations

import glob
import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

__all__ = ["CertificateAuthority", "PrivatePostgres", "pg_bin"]


def pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    assert found, "PostgreSQL's server binaries are needed (apt-get install postgresql)"
    return Path(found[-1]).parent


@dataclass
class CertificateAuthority:
    """A CA of its own and a server certificate for the names and addresses a client will verify."""

    folder: Path
    names: list[str]
    addresses: list[str]

    def make(self) -> CertificateAuthority:
        self.folder.mkdir(parents=True, exist_ok=True)
        f = self.folder
        run = [["openssl", "req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-days", "2"]]
        run[0] += ["-keyout", str(f / "ca.key"), "-out", str(f / "ca.crt"), "-subj", "/CN=trisk test CA"]
        san = ",".join([*(f"DNS:{n}" for n in self.names), *(f"IP:{a}" for a in self.addresses)])
        run.append(["openssl", "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", str(f / "server.key")])
        run[-1] += ["-out", str(f / "server.csr"), "-subj", f"/CN={self.names[0]}"]
        (f / "san.cnf").write_text(f"subjectAltName={san}\n", encoding="ascii")
        run.append(["openssl", "x509", "-req", "-in", str(f / "server.csr"), "-CA", str(f / "ca.crt")])
        run[-1] += ["-CAkey", str(f / "ca.key"), "-CAcreateserial", "-out", str(f / "server.crt"), "-days", "2"]
        run[-1] += ["-extfile", str(f / "san.cnf")]
        for cmd in run:
            subprocess.run(cmd, check=True, capture_output=True, timeout=60)
        return self


@dataclass
class PrivatePostgres:
    root: Path
    port: int
    listen: str = "127.0.0.1"
    netns: str | None = None
    ca: CertificateAuthority | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "postgres.log"
        self.user = pwd.getpwnam("postgres")

    def _as_postgres(self, cmd: list[str]) -> list[str]:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        ids = [f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--init-groups"]
        return [*prefix, "setpriv", *ids, *cmd]

    def _own(self, path: Path, mode: int) -> None:
        os.chown(path, self.user.pw_uid, self.user.pw_gid)
        path.chmod(mode)

    def init(self) -> PrivatePostgres:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for folder in (self.data, self.sockets):
            folder.mkdir(exist_ok=True)
            self._own(folder, 0o700 if folder == self.data else 0o755)
        cmd = [str(pg_bin() / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"]
        subprocess.run(self._as_postgres(cmd), check=True, capture_output=True, timeout=120)
        conf = [
            f"listen_addresses = '{self.listen}'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.sockets}'",
        ]
        conf += ["fsync = on", "synchronous_commit = on"]
        hba = ["local all all trust"]
        if self.ca is not None:
            for name in ("server.crt", "server.key"):
                target = self.data / name
                target.write_bytes((self.ca.folder / name).read_bytes())
                self._own(target, 0o600)
            conf += ["ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'"]
            hba.append("hostssl all all 0.0.0.0/0 trust")  # TLS or nothing: no plain `host` line
        else:
            hba.append("host all all 0.0.0.0/0 trust")
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as fh:
            fh.write("\n".join(conf) + "\n")
        (self.data / "pg_hba.conf").write_text("\n".join(hba) + "\n", encoding="utf-8")
        self.log.touch()
        self._own(self.log, 0o644)
        return self

    def start(self) -> PrivatePostgres:
        cmd = [str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"]
        res = subprocess.run(self._as_postgres(cmd), capture_output=True, text=True, timeout=90, check=False)
        assert res.returncode == 0, f"postgres did not start: {res.stdout}{res.stderr}{self.log.read_text()[-2000:]}"
        return self

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster, as a node loss does: the next start replays its WAL."""
        pid = self.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        # the backends notice their postmaster is gone and exit; wait until the port is free again
        time.sleep(1.0)

    def stop(self) -> None:
        if self.pid() is None:
            return
        cmd = [str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
        subprocess.run(self._as_postgres(cmd), capture_output=True, timeout=60, check=False)

    def create_database(self, name: str, owner: str = "trisk") -> None:
        """A database and the role that owns it (the role the service's URL names)."""
        engine = sa.create_engine(
            f"postgresql+psycopg://postgres@/postgres?host={self.sockets}&port={self.port}",
            isolation_level="AUTOCOMMIT",
        )
        try:
            with engine.connect() as con:
                exists = con.exec_driver_sql("SELECT 1 FROM pg_roles WHERE rolname = %s", (owner,)).first()
                if exists is None:
                    con.exec_driver_sql(f'CREATE ROLE "{owner}" LOGIN')
                con.exec_driver_sql(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        finally:
            engine.dispose()
