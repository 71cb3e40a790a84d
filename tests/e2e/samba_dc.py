"""A throwaway Samba Active Directory domain controller for the Kerberos
tests: its KDC puts a PAC with the user's groups in every service ticket.

``start_dc(workdir)`` provisions the domain SMBQAD.TEST
(``samba-tool domain provision``, no DNS) in ``workdir/dc`` with its own
smb.conf, private, state, cache, lock and pid directories, and starts
``samba -i -M single`` with only the KDC service, bound to a loopback
address of its own in 127.0.53.0/24 (port 88 is fixed in Samba 4.17:
there is no ``kdc port`` option, so each DC needs its own address; a lock
file per address keeps parallel test workers apart). It needs root (port
88) and Debian's samba-ad-dc and samba-ad-provision.

Provisioning takes about 5 s on a 2-core machine and the KDC answers about
1 s after ``samba`` starts: 6-7 s for ``start_dc``. Each helper
(``add_user``, ...) is one ``samba-tool`` run on the domain's database,
about 0.3 s.

``Dc.krb5_conf`` is a client krb5.conf for the realm (``kdc =
127.0.53.X``, no DNS lookups, ``localhost`` in the realm), for kinit,
kvno and GSSAPI through ``KRB5_CONFIG`` (see ``Dc.env``).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REALM = "SMBQAD.TEST"
DOMAIN = "SMBQAD"
ADDRESSES = [f"127.0.53.{i}" for i in range(1, 33)]
READY_TIMEOUT = 60.0
TOOL_TIMEOUT = 120.0
# msDS-SupportedEncryptionTypes: AES128 | AES256 (MS-KILE 2.2.7). Without it
# Samba issues RC4 tickets for a user account with an SPN.
AES_ENCTYPES = 0x18


def available() -> str | None:
    """Why a DC cannot run here, or None."""
    for tool in ("samba", "samba-tool", "kinit"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} not installed (scripts/install-deps)"
    if os.geteuid() != 0:
        return "a Samba AD DC binds port 88: needs root"
    return None


def _bindable(addr: str, port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def _claim_address():
    """A loopback address whose lock we hold and whose ports 88 and 464 are
    free: (address, open lock file)."""
    for addr in ADDRESSES:
        lock = open(f"/tmp/smbq-samba-dc-{addr}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        if _bindable(addr, 88) and _bindable(addr, 464):
            return addr, lock
        lock.close()
    raise RuntimeError(f"no free address for a Samba DC among {ADDRESSES[0]}..{ADDRESSES[-1]}")


class Dc:
    """A running DC; ``stop()`` (or leaving a ``with`` block) ends it."""

    def __init__(self, root: Path, addr: str, lock, admin_password: str):
        self.root = root
        self.realm = REALM
        self.domain = DOMAIN
        self.kdc_addr = addr
        self.smb_conf = root / "etc" / "smb.conf"
        self.krb5_conf = root / "krb5.conf"
        self.log = root / "samba.log"
        self.admin_password = admin_password
        self.proc: subprocess.Popen | None = None
        self._lock = lock

    # -- processes -------------------------------------------------------

    def env(self, ccache: Path | str | None = None, keytab: Path | str | None = None) -> dict:
        """The environment for a Kerberos client of this realm."""
        env = dict(os.environ, KRB5_CONFIG=str(self.krb5_conf))
        if ccache is not None:
            env["KRB5CCNAME"] = f"FILE:{ccache}"
        if keytab is not None:
            env["KRB5_KTNAME"] = f"FILE:{keytab}"
        return env

    def tool(self, *args: str) -> str:
        """``samba-tool ARGS -s smb.conf``; its stdout, or RuntimeError."""
        r = subprocess.run(["samba-tool", *args, "-s", str(self.smb_conf)], env=self.env(),
                           capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(f"samba-tool {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r.stdout

    def _start(self) -> None:
        log = open(self.log, "wb")
        self.proc = subprocess.Popen(
            ["samba", "-i", "-M", "single", "-s", str(self.smb_conf)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=self.env(), start_new_session=True)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        probe = self.root / "probe.ccache"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"samba exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                self.kinit("Administrator", self.admin_password, probe)
                probe.unlink(missing_ok=True)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def stop(self) -> None:
        """Ends samba's process group (by the pid we started) and frees the
        address. Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.proc = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Dc:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the directory ---------------------------------------------------

    def add_user(self, name: str, password: str) -> None:
        self.tool("user", "create", name, password)

    def add_group(self, name: str) -> None:
        self.tool("group", "add", name)

    def add_member(self, group: str, user: str) -> None:
        self.tool("group", "addmembers", group, user)

    def _sid(self, kind: str, name: str) -> str:
        out = self.tool(kind, "show", name, "--attributes=objectSid")
        m = re.search(r"^objectSid: (S-1-[0-9-]+)$", out, re.M)
        if not m:
            raise RuntimeError(f"no objectSid for {kind} {name}: {out}")
        return m.group(1)

    def group_sid(self, name: str) -> str:
        return self._sid("group", name)

    def user_sid(self, name: str) -> str:
        return self._sid("user", name)

    def domain_sid(self) -> str:
        return self.user_sid("Administrator").rsplit("-", 1)[0]

    def add_service(self, account: str, spn: str | list[str]) -> None:
        """A service account ``account`` with a random password, the SPN(s)
        (``cifs/localhost``), and AES keys for its tickets.

        A user account, not ``samba-tool computer create``: in Samba 4.17
        that makes a disabled computer without a password, whose keys
        ``exportkeytab`` silently skips."""
        self.tool("user", "create", account, "--random-password")
        for one in [spn] if isinstance(spn, str) else spn:
            self.tool("spn", "add", one, account)
        self._set_attribute(account, "msDS-SupportedEncryptionTypes", str(AES_ENCTYPES))

    def _set_attribute(self, account: str, attr: str, value: str) -> None:
        # samba-tool has no generic "set attribute"; Samba's own Python
        # bindings (Debian python3-samba, the system python) edit sam.ldb.
        script = (
            "import sys, ldb\n"
            "from samba.samdb import SamDB\n"
            "from samba.param import LoadParm\n"
            "from samba.auth import system_session\n"
            "conf, account, attr, value = sys.argv[1:]\n"
            "lp = LoadParm(); lp.load(conf)\n"
            "db = SamDB(url=lp.private_path('sam.ldb'), session_info=system_session(), lp=lp)\n"
            "res = db.search(base=db.domain_dn(), scope=ldb.SCOPE_SUBTREE,\n"
            "                expression='(sAMAccountName=%s)' % ldb.binary_encode(account), attrs=['dn'])\n"
            "assert len(res) == 1, res\n"
            "m = ldb.Message(res[0].dn)\n"
            "m[attr] = ldb.MessageElement(value, ldb.FLAG_MOD_REPLACE, attr)\n"
            "db.modify(m)\n")
        r = subprocess.run(["/usr/bin/python3", "-c", script, str(self.smb_conf), account, attr, value],
                           env=self.env(), capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(f"setting {attr} on {account}: {r.stderr}")

    def export_keytab(self, principal: str, path: Path | str) -> Path:
        """The principal's keys (``cifs/localhost``, or an account name) in
        a keytab at ``path``."""
        path = Path(path)
        self.tool("domain", "exportkeytab", str(path), f"--principal={principal}")
        # exportkeytab says "Export one principal" and exits 0 even when it
        # wrote nothing (a principal without keys).
        if not path.exists() or path.stat().st_size <= 2:
            raise RuntimeError(f"exportkeytab wrote no keys for {principal}")
        return path

    def kinit(self, user: str, password: str, ccache: Path | str) -> None:
        """A TGT for ``user@REALM`` in the file ccache ``ccache``."""
        r = subprocess.run(["kinit", f"{user}@{self.realm}"], input=password + "\n", env=self.env(ccache),
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"kinit {user}: {r.stderr.strip()}")


def start_dc(workdir: Path) -> Dc:
    """Provisions and starts a DC in ``workdir/dc`` (module doc)."""
    why = available()
    if why:
        raise RuntimeError(why)
    root = Path(workdir) / "dc"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    addr, lock = _claim_address()
    admin_password = "Adm-" + secrets.token_urlsafe(18)
    dc = Dc(root, addr, lock, admin_password)
    try:
        (root / "krb5.conf").write_text(
            "[libdefaults]\n"
            f"\tdefault_realm = {REALM}\n"
            "\tdns_lookup_realm = false\n"
            "\tdns_lookup_kdc = false\n"
            "\trdns = false\n"
            "\tdns_canonicalize_hostname = false\n"
            "[realms]\n"
            f"\t{REALM} = {{\n\t\tkdc = {addr}\n\t}}\n"
            "[domain_realm]\n"
            f"\tlocalhost = {REALM}\n"
            f"\t.{REALM.lower()} = {REALM}\n")
        # An empty configuration to start from, so that nothing of the
        # system's /etc/samba/smb.conf ends up in the domain's.
        empty = root / "empty.conf"
        empty.write_text("")
        run = root / "run"
        opts = {
            # "/8" makes Samba take an address that is not an interface's
            # own (lo has 127.0.0.1/8 only).
            "interfaces": f"{addr}/8",
            "bind interfaces only": "yes",
            "server services": "kdc",
            "pid directory": str(run),
            "ncalrpc dir": str(root / "ncalrpc"),
            "winbindd socket directory": str(root / "winbindd"),
            "log file": str(root / "log.%m"),
        }
        r = subprocess.run(
            ["samba-tool", "domain", "provision", "-s", str(empty),
             f"--realm={REALM}", f"--domain={DOMAIN}", "--server-role=dc", "--dns-backend=NONE",
             "--use-rfc2307", "--host-name=dc1", f"--adminpass={admin_password}", f"--targetdir={root}",
             *(f"--option={k}={v}" for k, v in opts.items())],
            env=dc.env(), capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        (root / "provision.log").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            raise RuntimeError(f"samba-tool domain provision: exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}")
        run.mkdir(exist_ok=True)
        # Test passwords need not be complex, and never expire (no warnings
        # from kinit).
        dc.tool("domain", "passwordsettings", "set", "--complexity=off", "--min-pwd-length=1",
                "--history-length=0", "--min-pwd-age=0", "--max-pwd-age=0")
        dc._start()
    except BaseException:
        dc.stop()
        raise
    return dc
