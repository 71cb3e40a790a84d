"""Samba 4.24's own client library (``samba.samba3.libsmb_samba_internal``,
the one its smbclient and its SMB3 POSIX tests use) speaking the SMB3
POSIX extensions to a server.

Runs with the trixie chroot's python3 (tests/e2e/test_posix.py copies it
into the chroot): ``python3 posix_peer.py ARGS_JSON``, where the JSON names
the server (host, port, transport, share, user, password, cafile) and a
``scenario``; prints one JSON object with what the client saw. The
assertions are the test's; this script only drives the client and
reports, and fails (exit 1, the error on stderr) when a step the scenario
needs fails.
"""

import json
import sys

from samba import NTSTATUSError, reparse_symlink
from samba.credentials import Credentials
from samba.dcerpc import security, smb3posix
from samba.ndr import ndr_unpack
from samba.samba3 import libsmb_samba_internal as libsmb
from samba.samba3 import param as s3param

ARGS = json.loads(sys.argv[1])


def connect(posix=True, share=None, contexts=None):
    # The source3 parameters: the client reads its protocol range from them.
    lp = s3param.get_context()
    lp.load_default()
    if ARGS["transport"] == "quic":
        lp.set("client smb transports", "quic:%d" % ARGS["quic_port"])
        lp.set("tls cafile", ARGS["cafile"])
        lp.set("tls verify peer", "ca_and_name")
    else:
        lp.set("client smb transports", "tcp:%d" % ARGS["port"])
    creds = Credentials()
    creds.guess(lp)
    creds.set_username(ARGS["user"])
    creds.set_password(ARGS["password"])
    kw = {"posix": posix}
    if contexts is not None:
        kw["negotiate_contexts"] = contexts
    return libsmb.Conn(ARGS["host"], share or ARGS["share"], lp, creds, **kw)


def posix_context(mode):
    return (libsmb.SMB2_CREATE_TAG_POSIX, libsmb.unix_mode_to_wire(mode).to_bytes(4, "little"))


def cc(cc_out):
    """The POSIX create context of a CREATE response, as a dict."""
    blobs = [blob for tag, blob in cc_out if tag == libsmb.SMB2_CREATE_TAG_POSIX]
    if not blobs:
        return None
    c = ndr_unpack(smb3posix.smb3_posix_cc_info, blobs[0])
    return {"nlinks": c.nlinks, "reparse_tag": c.reparse_tag, "mode": libsmb.wire_mode_to_unix(c.posix_mode),
            "owner": str(c.owner), "group": str(c.group)}


def create(c, name, mode=0o644, directory=False, disposition=libsmb.FILE_CREATE, options=0,
           access=security.SEC_STD_ALL | security.SEC_FILE_ALL):
    if directory:
        options |= libsmb.FILE_DIRECTORY_FILE
    f, _, cc_out = c.create_ex(name, DesiredAccess=access, CreateDisposition=disposition,
                               CreateOptions=options, CreateContexts=[posix_context(mode)])
    return f, cc(cc_out)


def status(e):
    return "0x%08X" % (e.args[0] & 0xFFFFFFFF)


def listing(c, directory=""):
    """The directory listed with FILE_POSIX_INFORMATION."""
    out = {}
    for i in c.list(directory, info_level=libsmb.SMB2_FIND_POSIX_INFORMATION):
        out[i["name"]] = {k: i[k] for k in ("attrib", "size", "perms", "ino", "dev", "nlink", "reparse_tag",
                                            "owner_sid", "group_sid")}
    return out


def negotiate():
    good = connect().have_posix()
    # Offered by hand, not with posix=True (which adds the real variant).
    unknown = connect(posix=False, contexts=[(0x100, b"0123456789012345")]).have_posix()
    try:
        connect(posix=False, contexts=[(0x100, b"0123456789")])
        bad_length = "connected"
    except NTSTATUSError as e:
        bad_length = status(e)
    return {"posix": good, "unknown_variant": unknown, "bad_length": bad_length}


def modes():
    c = connect()
    created = {}
    for perm in (0o600, 0o640, 0o755, 0o700, 0o1777, 0o2750, 0o4755, 0o777):
        f, info = create(c, "file%04o" % perm, perm)
        c.write(f, b"data", 0)
        c.close(f)
        created["file%04o" % perm] = info
        f, info = create(c, "dir%04o" % perm, perm, directory=True)
        c.close(f)
        created["dir%04o" % perm] = info
    f, _, cc_out = c.create_ex("", CreateContexts=[posix_context(0)])
    root_cc = cc(cc_out)
    c.close(f)
    f, _ = create(c, "file0640", 0, disposition=libsmb.FILE_OPEN, access=security.SEC_FILE_READ_ATTRIBUTE)
    info = c.qfileinfo(f, libsmb.FSCC_FILE_POSIX_INFORMATION)
    c.close(f)
    try:
        c.create_ex("x", CreateDisposition=libsmb.FILE_OPEN_IF,
                    CreateContexts=[(libsmb.SMB2_CREATE_TAG_POSIX, b"00000")])
        bad_context = "opened"
    except NTSTATUSError as e:
        bad_context = status(e)
    plain = connect(posix=False)
    f = plain.create("file0640", DesiredAccess=security.SEC_FILE_READ_ATTRIBUTE)
    try:
        plain.qfileinfo(f, libsmb.FSCC_FILE_POSIX_INFORMATION)
        plain_qinfo = "answered"
    except NTSTATUSError as e:
        plain_qinfo = status(e)
    plain.close(f)
    return {"created": created, "root": root_cc, "listing": listing(c), "bad_context": bad_context,
            "qfileinfo": {"perms": libsmb.wire_mode_to_unix(info["perms"]), "nlink": info["nlink"], "size": info["size"],
                          "owner_sid": info["owner_sid"], "group_sid": info["group_sid"]},
            "plain_qfileinfo": plain_qinfo}


def names():
    c = connect()
    out = {}
    for name in ("xx", "a", "A", "a:b", "q?", "<x>", "t "):
        f, _ = create(c, name)
        c.close(f)
    try:
        f, _ = create(c, "XX", disposition=libsmb.FILE_OPEN)
        c.close(f)
        out["posix_XX"] = "opened"
    except NTSTATUSError as e:
        out["posix_XX"] = status(e)
    plain = connect(posix=False)
    try:
        f = plain.create("XX", DesiredAccess=security.SEC_FILE_READ_ATTRIBUTE)
        plain.close(f)
        out["plain_XX"] = "opened"
    except NTSTATUSError as e:
        out["plain_XX"] = status(e)
    out["listing"] = sorted(listing(c))
    return out


def symlinks():
    c = connect()
    out = {}
    for name, target in (("rel", "dir/target.txt"), ("abs", "/etc/passwd")):
        f, _ = create(c, name, 0o600, options=libsmb.FILE_OPEN_REPARSE_POINT | libsmb.FILE_NON_DIRECTORY_FILE)
        flags = 0 if target.startswith("/") else 1
        c.fsctl(f, libsmb.FSCTL_SET_REPARSE_POINT, reparse_symlink.symlink_put(target, target, 0, flags), 0)
        c.close(f)
    # A special file a client makes: an NFS reparse point (Samba's mknod).
    c.mknod("madefifo", 0o010640)
    lst = listing(c)
    for name in ("rel", "abs", "ondisk", "fifo", "madefifo"):
        f, info = create(c, name, 0, disposition=libsmb.FILE_OPEN, options=libsmb.FILE_OPEN_REPARSE_POINT,
                         access=security.SEC_FILE_READ_ATTRIBUTE)
        data = c.fsctl(f, libsmb.FSCTL_GET_REPARSE_POINT, b"", 16384)
        c.close(f)
        out[name] = {"listed": lst.get(name), "cc": info, "reparse": list(reparse_symlink.get(data))}
    # What a client without the extensions sees of them: the reparse
    # point attribute on the files that keep one.
    plain = {i["name"]: i["attrib"] for i in connect(posix=False).list("")}
    out["plain_attrib"] = {k: plain.get(k) for k in ("rel", "ondisk")}
    return out


def chmod_chown():
    c = connect()
    out = {}
    f, _ = create(c, "m", 0o600)
    sd = security.descriptor()
    sd.type = security.SEC_DESC_SELF_RELATIVE | security.SEC_DESC_DACL_PRESENT
    ace = security.ace()
    ace.type = security.SEC_ACE_TYPE_ACCESS_ALLOWED
    ace.trustee = security.dom_sid("S-1-5-88-3-%d" % 0o751)
    ace.access_mask = 0
    sd.dacl_add(ace)
    c.set_sd(f, sd, security.SECINFO_DACL)
    out["after_chmod"] = libsmb.wire_mode_to_unix(c.qfileinfo(f, libsmb.FSCC_FILE_POSIX_INFORMATION)["perms"])
    owner = security.descriptor()
    owner.owner_sid = security.dom_sid("S-1-22-1-%d" % ARGS["new_uid"])
    owner.group_sid = security.dom_sid("S-1-22-2-%d" % ARGS["new_gid"])
    c.set_sd(f, owner, security.SECINFO_OWNER | security.SECINFO_GROUP)
    info = c.qfileinfo(f, libsmb.FSCC_FILE_POSIX_INFORMATION)
    out["after_chown"] = {"owner_sid": info["owner_sid"], "group_sid": info["group_sid"]}
    c.close(f)
    return out


SCENARIOS = {f.__name__: f for f in (negotiate, modes, names, symlinks, chmod_chown)}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[ARGS["scenario"]](), default=str))
