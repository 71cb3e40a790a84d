"""NT security descriptors kept and enforced (issue 17), through Python
smbprotocol's own descriptor structures and its low-level client.

A DACL denying the user write access is set with SET_INFO: a write open
is then ACCESS_DENIED, a read open succeeds, QUERY_INFO reads back what
was set, and a file created in a directory with inheritable ACEs gets
them. Across servers: a descriptor set through Samba's smbd
(``vfs objects = acl_xattr``) on a directory copied with ``cp -a`` reads
the same through smbq, and the other way round.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

import servers

pytest.importorskip("smbprotocol")
from smbprotocol.connection import Connection  # noqa: E402
from smbprotocol.exceptions import AccessDenied  # noqa: E402
from smbprotocol.open import (  # noqa: E402
    CreateDisposition,
    CreateOptions,
    FileAttributes,
    ImpersonationLevel,
    Open,
    ShareAccess,
    SMB2QueryInfoRequest,
    SMB2QueryInfoResponse,
    SMB2SetInfoRequest,
)
from smbprotocol.security_descriptor import (  # noqa: E402
    AccessAllowedAce,
    AccessDeniedAce,
    AclPacket,
    SIDPacket,
    SMB2CreateSDBuffer,
)
from smbprotocol.session import Session  # noqa: E402
from smbprotocol.tree import TreeConnect  # noqa: E402

OWNER, GROUP, DACL = 0x1, 0x2, 0x4
INFO_SECURITY = 3
EVERYONE = "S-1-1-0"
FILE_ALL = 0x001F01FF
READ_DATA, WRITE_DATA, APPEND_DATA, READ_CONTROL, WRITE_DAC = 0x1, 0x2, 0x4, 0x20000, 0x40000
GENERIC_READ = 0x80000000
OBJECT_INHERIT, CONTAINER_INHERIT, INHERITED = 0x1, 0x2, 0x10
SHARE_ALL = ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE


class Client:
    def __init__(self, srv: servers.Server):
        self.conn = Connection(uuid.uuid4(), srv.host, srv.port)
        self.conn.connect(timeout=30)
        self.session = Session(self.conn, srv.user, srv.password, require_encryption=False)
        self.session.connect()
        self.tree = TreeConnect(self.session, rf"\\{srv.host}\{srv.share}")
        self.tree.connect()

    def open(self, name: str, access: int, disposition=CreateDisposition.FILE_OPEN, directory=False, sd=None) -> Open:
        fh = Open(self.tree, name)
        contexts = None
        if sd is not None:
            from smbprotocol.create_contexts import CreateContextName, SMB2CreateContextRequest
            ctx = SMB2CreateContextRequest()
            ctx["buffer_name"] = CreateContextName.SMB2_CREATE_SD_BUFFER
            ctx["buffer_data"] = sd
            contexts = [ctx]
        options = CreateOptions.FILE_DIRECTORY_FILE if directory else CreateOptions.FILE_NON_DIRECTORY_FILE
        attrs = FileAttributes.FILE_ATTRIBUTE_DIRECTORY if directory else FileAttributes.FILE_ATTRIBUTE_NORMAL
        fh.create(ImpersonationLevel.Impersonation, access, attrs, SHARE_ALL, disposition, options, contexts)
        return fh

    def _send(self, fh: Open, req):
        r = self.conn.send(req, sid=self.session.session_id, tid=self.tree.tree_connect_id)
        return self.conn.receive(r)

    def query_sd(self, fh: Open, info: int) -> SMB2CreateSDBuffer:
        req = SMB2QueryInfoRequest()
        req["info_type"] = INFO_SECURITY
        req["output_buffer_length"] = 65536
        req["additional_information"] = info
        req["file_id"] = fh.file_id
        resp = SMB2QueryInfoResponse()
        resp.unpack(self._send(fh, req)["data"].get_value())
        sd = SMB2CreateSDBuffer()
        sd.unpack(resp["buffer"].get_value())
        return sd

    def set_sd(self, fh: Open, info: int, sd: SMB2CreateSDBuffer) -> None:
        req = SMB2SetInfoRequest()
        req["info_type"] = INFO_SECURITY
        req["file_info_class"] = 0
        req["additional_information"] = info
        req["file_id"] = fh.file_id
        req["buffer"] = sd.pack()
        self._send(fh, req)

    def close(self) -> None:
        self.conn.disconnect(True)


def sid(s: str) -> SIDPacket:
    p = SIDPacket()
    p.from_string(s)
    return p


def ace(kind, who: str, mask: int, flags: int = 0):
    a = kind()
    a["ace_flags"] = flags
    a["mask"] = mask
    a["sid"] = sid(who)
    return a


def descriptor(aces, owner: str | None = None) -> SMB2CreateSDBuffer:
    sd = SMB2CreateSDBuffer()
    sd["control"].set_flag(0x8000)  # SE_SELF_RELATIVE
    if owner:
        sd.set_owner(sid(owner))
    acl = AclPacket()
    acl["aces"] = aces
    sd.set_dacl(acl)
    return sd


def aces_of(sd: SMB2CreateSDBuffer) -> list[tuple[int, int, int, str]]:
    return [(a["ace_type"].get_value(), a["ace_flags"].get_value(), a["mask"].get_value(), str(a["sid"]))
            for a in sd.get_dacl()["aces"].get_value()]


@pytest.fixture
def smbq(start_server):
    srv = start_server("smbq", "sign")
    c = Client(srv)
    yield srv, c
    c.close()


def test_deny_write_is_enforced_and_reads_back(smbq):
    srv, c = smbq
    fh = c.open("locked.txt", READ_CONTROL | WRITE_DAC | READ_DATA | WRITE_DATA, CreateDisposition.FILE_CREATE)
    fh.write(b"before\n", 0)
    owner = str(c.query_sd(fh, OWNER).get_owner())
    # Deny Everyone writing, allow everything else.
    want = [ace(AccessDeniedAce, EVERYONE, WRITE_DATA | APPEND_DATA), ace(AccessAllowedAce, EVERYONE, FILE_ALL)]
    c.set_sd(fh, DACL, descriptor(want))
    fh.close()
    # Kept in Samba's place.
    assert os.getxattr(srv.share_dir / "locked.txt", "security.NTACL")[:4] == b"\x01\x00\x01\x00"
    with pytest.raises(AccessDenied):
        c.open("locked.txt", WRITE_DATA)
    with pytest.raises(AccessDenied):
        c.open("locked.txt", READ_DATA, CreateDisposition.FILE_OVERWRITE_IF)
    rd = c.open("locked.txt", READ_DATA | READ_CONTROL)
    assert rd.read(0, 7) == b"before\n"
    back = c.query_sd(rd, OWNER | DACL)
    assert str(back.get_owner()) == owner
    assert aces_of(back) == [(1, 0, WRITE_DATA | APPEND_DATA, EVERYONE), (0, 0, FILE_ALL, EVERYONE)]
    rd.close()
    assert (srv.share_dir / "locked.txt").read_bytes() == b"before\n"


def test_new_files_inherit(smbq):
    _, c = smbq
    d = c.open("inh", READ_CONTROL | WRITE_DAC | READ_DATA, CreateDisposition.FILE_CREATE, directory=True)
    parent = [
        ace(AccessAllowedAce, EVERYONE, FILE_ALL, OBJECT_INHERIT | CONTAINER_INHERIT),
        # CREATOR OWNER: generic read for whoever creates, substituted.
        ace(AccessAllowedAce, "S-1-3-0", GENERIC_READ, OBJECT_INHERIT),
    ]
    c.set_sd(d, DACL, descriptor(parent))
    d.close()
    f = c.open(r"inh\child.txt", READ_CONTROL, CreateDisposition.FILE_CREATE)
    sd = c.query_sd(f, OWNER | DACL)
    owner = str(sd.get_owner())
    assert aces_of(sd) == [(0, 0, FILE_ALL, EVERYONE), (0, 0, 0x00120089, owner)]
    f.close()
    # A descriptor given in the CREATE is the new file's.
    given = descriptor([ace(AccessAllowedAce, EVERYONE, READ_DATA | READ_CONTROL)])
    g = c.open(r"inh\given.txt", READ_CONTROL, CreateDisposition.FILE_CREATE, sd=given)
    assert aces_of(c.query_sd(g, DACL)) == [(0, 0, READ_DATA | READ_CONTROL, EVERYONE)]
    g.close()
    with pytest.raises(AccessDenied):
        c.open(r"inh\given.txt", WRITE_DATA)


@pytest.mark.parametrize("writer,reader", [("smbd", "smbq"), ("smbq", "smbd")], ids=["samba-to-smbq", "smbq-to-samba"])
def test_descriptor_moves_with_the_share(start_server, writer, reader):
    w = start_server(writer, "sign", smbd_share=servers.FILE_SEMANTICS)
    c = Client(w)
    try:
        d = c.open("moved", READ_CONTROL | WRITE_DAC | READ_DATA, CreateDisposition.FILE_CREATE, directory=True)
        f = c.open(r"moved\f.txt", READ_CONTROL | WRITE_DAC | READ_DATA, CreateDisposition.FILE_CREATE)
        aces = [ace(AccessDeniedAce, "S-1-5-32-546", WRITE_DATA), ace(AccessAllowedAce, EVERYONE, FILE_ALL)]
        c.set_sd(f, DACL, descriptor(aces))
        written = aces_of(c.query_sd(f, DACL))
        f.close()
        d.close()
    finally:
        c.close()
    assert written == [(1, 0, WRITE_DATA, "S-1-5-32-546"), (0, 0, FILE_ALL, EVERYONE)]
    r = start_server(reader, "sign", smbd_share=servers.FILE_SEMANTICS)
    subprocess.run(["cp", "-a", str(w.share_dir / "moved"), str(r.share_dir)], check=True)
    owner = servers.SMBD_UNIX_USER if reader == "smbd" else "root"
    subprocess.run(["chown", "-R", owner, str(r.share_dir / "moved")], check=True)
    c = Client(r)
    try:
        f = c.open(r"moved\f.txt", READ_CONTROL)
        assert aces_of(c.query_sd(f, DACL)) == written, f"{reader} shows the DACL {writer} stored"
        f.close()
    finally:
        c.close()
