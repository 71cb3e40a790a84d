"""A throwaway MIT Kerberos KDC on loopback for the Kerberos tests.

``start_kdc(workdir)`` makes a realm with ``kdb5_util`` in ``workdir``,
starts ``krb5kdc`` in the foreground on a free port (UDP and TCP) of
127.0.0.1, and gives a client ``krb5.conf`` for it. Principals and keytabs
come from ``kadmin.local``. Debian packages: krb5-kdc, krb5-admin-server,
krb5-user (scripts/install-deps).

The service is reached as ``smbq.smbq.test`` (on 127.0.0.1: smbclient -I), whose principal is ``cifs/smbq.smbq.test``
(Samba's GSSAPI client refuses an IP address and ``localhost``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from servers import free_port

REALM = "SMBQ.TEST"
HOST = "smbq.smbq.test"
SERVICE = f"cifs/{HOST}"
READY_TIMEOUT = 20.0


def available() -> str | None:
    """Why the KDC cannot run here, or None."""
    for tool in ("/usr/sbin/krb5kdc", "/usr/sbin/kdb5_util", "/usr/sbin/kadmin.local"):
        if not Path(tool).exists():
            return f"{tool} missing (scripts/install-deps installs krb5-kdc, krb5-admin-server)"
    if not shutil.which("kinit"):
        return "kinit missing (krb5-user)"
    return None


def client_conf(realm: str, kdc: str, extra_realm: str = "", libdefaults: str = "") -> str:
    """A client krb5.conf whose realm's KDC is ``kdc`` (host:port, or an
    https:// KDC proxy URL)."""
    return f"""[libdefaults]
    default_realm = {realm}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 1
    forwardable = true
{libdefaults}
[realms]
    {realm} = {{
        kdc = {kdc}
{extra_realm}
    }}

[domain_realm]
    {HOST} = {realm}
"""


class Kdc:
    def __init__(self, workdir: Path, realm: str = REALM, prefix: tuple[str, ...] = ()):
        """``prefix``: a command that runs krb5kdc, e.g. ``("faketime", "-f",
        "-11h")`` for a KDC whose tickets ended in the past."""
        self.dir = workdir
        self.realm = realm
        self.prefix = prefix
        self.port = free_port()
        self.krb5_conf = workdir / "krb5.conf"
        self.kdc_conf = workdir / "kdc.conf"
        self.log = workdir / "kdc.log"
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """Variables for the KDC tools (not for clients)."""
        return dict(os.environ, KRB5_CONFIG=str(self.krb5_conf), KRB5_KDC_PROFILE=str(self.kdc_conf))

    def client_env(self, ccache: Path | str | None = None, krb5_conf: Path | None = None) -> dict[str, str]:
        """Variables for a client of this realm, with credential cache ``ccache``."""
        env = dict(os.environ, KRB5_CONFIG=str(krb5_conf or self.krb5_conf))
        if ccache is not None:
            env["KRB5CCNAME"] = f"FILE:{ccache}"
        return env

    def _setup(self) -> None:
        d = self.dir
        self.kdc_conf.write_text(f"""[kdcdefaults]
    kdc_ports = {self.port}
    kdc_tcp_ports = {self.port}

[realms]
    {self.realm} = {{
        database_name = {d}/principal
        key_stash_file = {d}/stash
        acl_file = {d}/kadm5.acl
        admin_keytab = {d}/kadm5.keytab
        max_life = 10h 0m 0s
        max_renewable_life = 1d
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}

[logging]
    kdc = FILE:{self.log}
""")
        (d / "kadm5.acl").write_text("")
        self.krb5_conf.write_text(client_conf(self.realm, f"127.0.0.1:{self.port}"))
        self._run(["/usr/sbin/kdb5_util", "create", "-s", "-r", self.realm, "-P", secrets.token_hex(16)])

    def _run(self, argv: list[str], input: str | None = None) -> str:
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, input=input)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r.stdout

    def kadmin(self, query: str) -> str:
        out = self._run(["/usr/sbin/kadmin.local", "-r", self.realm, "-q", query])
        return out

    def start(self) -> None:
        self._setup()
        self.proc = subprocess.Popen([*self.prefix, "/usr/sbin/krb5kdc", "-n", "-r", self.realm], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"krb5kdc exited ({self.proc.returncode}): {err}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("krb5kdc did not listen within the timeout")

    def add_principal(self, name: str, password: str | None = None, options: str = "") -> None:
        """``password`` None: a random key (a service)."""
        key = f"-pw {password}" if password is not None else "-randkey"
        out = self.kadmin(f"addprinc {options} {key} {name}")
        if "created" not in out and "already exists" not in out:
            raise RuntimeError(f"addprinc {name}: {out}")

    def keytab(self, principals: list[str], path: Path, randkey: bool = False) -> Path:
        """Writes the principals' current keys to ``path`` (``randkey``: new
        keys first, as ``ktadd`` without -norandkey)."""
        flag = "" if randkey else "-norandkey"
        for p in principals:
            self.kadmin(f"ktadd -k {path} {flag} {p}")
        return path

    def kinit(self, principal: str, password: str, ccache: Path | str, krb5_conf: Path | None = None,
              extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        return subprocess.run(["kinit", *extra, principal], input=password + "\n", capture_output=True, text=True,
                              env=self.client_env(ccache, krb5_conf), timeout=60)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stderr:
            self.proc.stderr.close()


def start_kdc(workdir: Path, realm: str = REALM, prefix: tuple[str, ...] = ()) -> Kdc:
    workdir.mkdir(parents=True, exist_ok=True)
    kdc = Kdc(workdir, realm, prefix)
    kdc.start()
    return kdc


class Realm:
    """A KDC with the principals the Kerberos tests use: users ``alice``
    and ``bob`` (password ``password``), and the service ``cifs/HOST``
    whose keys are in ``keytab``. ``kdc_prefix``: as Kdc's ``prefix``."""

    def __init__(self, workdir: Path, kdc_prefix: tuple[str, ...] = ()):
        self.kdc = start_kdc(workdir / "kdc", prefix=kdc_prefix)
        self.password = "Pw" + secrets.token_hex(8)
        for user in ("alice", "bob"):
            self.kdc.add_principal(user, self.password)
        self.kdc.add_principal(SERVICE)
        self.keytab = self.kdc.keytab([SERVICE], workdir / "smbq.keytab", randkey=True)
        self.dir = workdir

    def server_config(self, extra: str = "") -> str:
        """smbq's config: this realm's users are smbq users by name."""
        return f'[kerberos]\nrealm = "{self.kdc.realm}"\nkeytab = "{self.keytab}"\n{extra}'

    def server_env(self) -> dict[str, str]:
        """The server's environment: this realm's krb5.conf, and a replay
        cache of its own (MIT's default is one file per uid in /var/tmp)."""
        rcache = self.dir / "rcache"
        rcache.mkdir(exist_ok=True)
        return {"KRB5_CONFIG": str(self.kdc.krb5_conf), "KRB5RCACHEDIR": str(rcache)}

    def login(self, user: str = "alice") -> dict[str, str]:
        """kinit ``user`` into a credential cache of its own; the
        environment for a client that uses it."""
        ccache = self.dir / f"ccache-{user}-{secrets.token_hex(4)}"
        r = self.kdc.kinit(user, self.password, ccache)
        if r.returncode != 0:
            raise RuntimeError(f"kinit {user}: {r.stderr}")
        return self.kdc.client_env(ccache)

    def stop(self) -> None:
        self.kdc.stop()


def start_smbq(start_server, realm: Realm, mode: str = "enc", extra_config: str = "", serve_args: tuple[str, ...] = ()):
    """An smbq server (conftest's start_server) that takes this realm's
    Kerberos logons, beside NTLM for its own user."""
    return start_server("smbq", mode, config_toml=realm.server_config(extra_config), serve_args=serve_args,
                        env=realm.server_env())
