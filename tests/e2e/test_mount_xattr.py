"""Extended attributes on the mount (issue 36 item 4): `user.*` xattrs are
SMB EAs (`user.origin` is EA `origin`, as cifs.ko maps them), set, read,
listed, replaced and removed with the errnos a local file system gives;
against smbq over QUIC and TCP and Samba's smbd over TCP."""

from __future__ import annotations

import errno
import os

import pytest

from test_mount import mounted  # noqa: F401  (the fixture)


def test_user_xattrs_are_smb_eas(mounted):  # noqa: F811
    m, server = mounted
    f = m.dir / "f.txt"
    f.write_text("data")
    assert os.listxattr(f) == []
    os.setxattr(f, "user.origin", b"camera 7")
    os.setxattr(f, "user.rating", b"\x00\x01binary\xff")
    assert sorted(os.listxattr(f)) == ["user.origin", "user.rating"]
    assert os.getxattr(f, "user.origin") == b"camera 7"
    assert os.getxattr(f, "user.rating") == b"\x00\x01binary\xff"
    with pytest.raises(OSError) as e:
        os.setxattr(f, "user.origin", b"x", os.XATTR_CREATE)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        os.setxattr(f, "user.missing", b"x", os.XATTR_REPLACE)
    assert e.value.errno == errno.ENODATA
    os.setxattr(f, "user.origin", b"camera 8", os.XATTR_REPLACE)
    assert os.getxattr(f, "user.origin") == b"camera 8"
    os.removexattr(f, "user.origin")
    assert os.listxattr(f) == ["user.rating"]
    with pytest.raises(OSError) as e:
        os.getxattr(f, "user.origin")
    assert e.value.errno == errno.ENODATA
    # Other namespaces: nothing to read, nothing to set.
    with pytest.raises(OSError) as e:
        os.getxattr(f, "security.selinux")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.setxattr(f, "trusted.x", b"1")
    assert e.value.errno == errno.EOPNOTSUPP
    # A directory has EAs too.
    (m.dir / "d").mkdir()
    os.setxattr(m.dir / "d", "user.kind", b"album")
    assert os.getxattr(m.dir / "d", "user.kind") == b"album"
    m.unmount()
