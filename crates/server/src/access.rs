//! Who may do what to a file: the session's token, the file's security
//! descriptor (kept, or made from its POSIX owner and mode), the access
//! check of MS-DTYP 2.5.3.2 and the inheritance of MS-DTYP 2.5.3.4.
//!
//! Users' SIDs are S-1-5-21-[`DOMAIN`]-<rid>, the rid a hash of the
//! lower-cased user name: the same on every start and every server
//! (`smbq user list` shows them). Every session acts on the share as the
//! Unix user smbq runs as, so its token also holds that user's and group's
//! SIDs in Samba's Unix mapping (S-1-22-1-<uid>, S-1-22-2-<gid>): the
//! owner and group permission bits of the files smbq made apply to it.

use crate::open::access;
use smbq_vfs::Security;
use smbq_wire::security::{ace_flags, ace_type, control, Ace, Acl, SecurityDescriptor, Sid};

/// The sub-authorities of smbq's user domain after S-1-5-21: "smbq" and
/// "-sid" as big-endian ASCII, then 17; fixed, so SIDs never change.
pub const DOMAIN: [u32; 3] = [0x736d_6271, 0x2d73_6964, 0x0000_0011];

/// The rid of the domain's users group (DOMAIN_USERS, MS-DTYP 2.4.2.4),
/// every user's primary group.
const DOMAIN_USERS_RID: u32 = 513;

/// FILE_GENERIC_READ / WRITE / EXECUTE (MS-SMB2 2.2.13.1.1 generic mapping).
pub const FILE_GENERIC_READ: u32 = 0x0012_0089;
pub const FILE_GENERIC_WRITE: u32 = 0x0012_0116;
pub const FILE_GENERIC_EXECUTE: u32 = 0x0012_00A0;
/// FILE_ADD_FILE and FILE_ADD_SUBDIRECTORY: a directory's WRITE_DATA and
/// APPEND_DATA (MS-SMB2 2.2.13.1.2).
pub const FILE_ADD_FILE: u32 = access::FILE_WRITE_DATA;
pub const FILE_ADD_SUBDIRECTORY: u32 = access::FILE_APPEND_DATA;
/// A directory's FILE_READ_DATA.
pub const FILE_LIST_DIRECTORY: u32 = access::FILE_READ_DATA;

/// Expand GENERIC_* and MAXIMUM_ALLOWED (MS-SMB2 2.2.13.1.1) into the
/// specific rights; MAXIMUM_ALLOWED grants `maximal`.
pub fn map_access(desired: u32, maximal: u32) -> u32 {
    let generic = access::GENERIC_READ | access::GENERIC_WRITE | access::GENERIC_EXECUTE | access::GENERIC_ALL;
    let mut a = desired & !(generic | access::MAXIMUM_ALLOWED);
    if desired & access::GENERIC_READ != 0 {
        a |= FILE_GENERIC_READ;
    }
    if desired & access::GENERIC_WRITE != 0 {
        a |= FILE_GENERIC_WRITE;
    }
    if desired & access::GENERIC_EXECUTE != 0 {
        a |= FILE_GENERIC_EXECUTE;
    }
    if desired & access::GENERIC_ALL != 0 {
        a |= access::FILE_ALL;
    }
    if desired & access::MAXIMUM_ALLOWED != 0 {
        a |= maximal;
    }
    a
}

/// FNV-1a, 32 bits.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

fn domain_sid(rid: u32) -> Sid {
    Sid::new(5, &[21, DOMAIN[0], DOMAIN[1], DOMAIN[2], rid])
}

/// The SID of smbq user `name` (case-insensitive): rids from 1000 up,
/// below 2^31.
pub fn user_sid(name: &str) -> Sid {
    domain_sid(1000 + fnv1a(name.to_lowercase().as_bytes()) % 0x7FFF_0000)
}

/// S-1-22-1-<uid>: a Unix user, as Samba maps it.
pub fn unix_user_sid(uid: u32) -> Sid {
    Sid::new(22, &[1, uid])
}

/// S-1-22-2-<gid>: a Unix group, as Samba maps it.
pub fn unix_group_sid(gid: u32) -> Sid {
    Sid::new(22, &[2, gid])
}

/// The SIDs a session acts with (MS-DTYP 2.5.2 Token): the user, the
/// owner and group a new object gets, and all its SIDs. A new object is
/// owned by the Unix user and group smbq runs as, as it is on disk, so
/// its descriptor says the same whether it is kept or made from the mode
/// (as Samba's is with `force user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub user: Sid,
    pub owner: Sid,
    pub group: Sid,
    pub sids: Vec<Sid>,
}

impl Token {
    /// The token of smbq user `name`; an empty name is the anonymous
    /// logon, which is neither authenticated nor in the domain.
    pub fn for_user(name: &str) -> Token {
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        let (owner, group) = (unix_user_sid(uid), unix_group_sid(gid));
        let user = if name.is_empty() { Sid::anonymous() } else { user_sid(name) };
        let mut sids = vec![user.clone(), Sid::everyone()];
        if !name.is_empty() {
            sids.extend([domain_sid(DOMAIN_USERS_RID), Sid::authenticated_users()]);
        }
        sids.extend([owner.clone(), group.clone()]);
        Token { user, owner, group, sids }
    }

    /// This token with `groups` too (a PAC's SIDs), once each.
    pub fn with_groups(mut self, groups: &[Sid]) -> Token {
        for g in groups {
            if !self.sids.contains(g) {
                self.sids.push(g.clone());
            }
        }
        self
    }

    pub fn has(&self, sid: &Sid) -> bool {
        self.sids.contains(sid)
    }
}

/// What the permission bits `rwx` (in the low three bits) grant, as
/// Samba maps them (posix_acls.c `map_canon_ace_perms`): all three are
/// full control; write also gives DELETE (and a directory's
/// DELETE_CHILD).
fn perms_mask(rwx: u32, is_dir: bool) -> u32 {
    if rwx & 7 == 7 {
        return access::FILE_ALL;
    }
    let mut m = 0;
    if rwx & 4 != 0 {
        m |= FILE_GENERIC_READ;
    }
    if rwx & 2 != 0 {
        m |= FILE_GENERIC_WRITE | access::DELETE;
        if is_dir {
            m |= access::FILE_DELETE_CHILD;
        }
    }
    if rwx & 1 != 0 {
        m |= FILE_GENERIC_EXECUTE;
    }
    m
}

/// The file's security descriptor: the one kept for it, else one made
/// from its POSIX owner, group and mode (owner, group and Everyone, each
/// allowed what its permission bits give; a directory passes Everyone's
/// on, and the owner's and group's bits to CREATOR OWNER and CREATOR
/// GROUP, as Samba's POSIX mapping does); where the file system has
/// neither, Everyone may do everything.
pub fn descriptor(sec: &Security, is_dir: bool) -> SecurityDescriptor {
    if let Some(sd) = sec.descriptor.as_deref().and_then(|d| SecurityDescriptor::decode(d).ok()) {
        return sd;
    }
    let Some(u) = sec.unix else {
        let inherit = if is_dir { ace_flags::OBJECT_INHERIT | ace_flags::CONTAINER_INHERIT } else { 0 };
        return SecurityDescriptor {
            control: 0,
            owner: Some(Sid::new(5, &[32, 544])),
            group: Some(Sid::everyone()),
            sacl: None,
            dacl: Some(Acl::new(vec![Ace::new(ace_type::ACCESS_ALLOWED, inherit, access::FILE_ALL, Sid::everyone())])),
        };
    };
    use ace_flags::{CONTAINER_INHERIT as CI, INHERIT_ONLY as IO, OBJECT_INHERIT as OI};
    let (owner, group) = (unix_user_sid(u.uid), unix_group_sid(u.gid));
    let mut entries = vec![(owner.clone(), u.mode >> 6, 0), (group.clone(), u.mode >> 3, 0), (Sid::everyone(), u.mode, if is_dir { OI | CI } else { 0 })];
    if is_dir {
        entries.extend([(Sid::creator_owner(), u.mode >> 6, OI | CI | IO), (Sid::creator_group(), u.mode >> 3, OI | CI | IO)]);
    }
    let aces = entries
        .into_iter()
        .map(|(sid, bits, flags)| (sid, perms_mask(bits, is_dir), flags))
        .filter(|(_, m, _)| *m != 0)
        .map(|(sid, m, flags)| Ace::new(ace_type::ACCESS_ALLOWED, flags, m, sid))
        .collect();
    SecurityDescriptor { control: 0, owner: Some(owner), group: Some(group), sacl: None, dacl: Some(Acl::new(aces)) }
}

/// What `token` may do to a file: what its kept descriptor allows
/// ([`maximal`]); without one, everything, leaving the POSIX permission
/// bits to the kernel, which checks them when the file is opened, as it
/// did before there were descriptors.
pub fn allowed(sec: &Security, token: &Token) -> u32 {
    match sec.descriptor.as_deref().and_then(|d| SecurityDescriptor::decode(d).ok()) {
        Some(sd) => maximal(&sd, token),
        None => access::FILE_ALL,
    }
}

/// The rights `token` holds on an object with descriptor `sd` (MS-DTYP
/// 2.5.3.2 with MAXIMUM_ALLOWED asked): without a DACL, or with a NULL
/// DACL, everything; else the owner's READ_CONTROL and WRITE_DAC, and
/// what the ACEs for the token's SIDs allow before any denies it, in
/// order. Inherit-only ACEs take no part.
pub fn maximal(sd: &SecurityDescriptor, token: &Token) -> u32 {
    let Some(dacl) = &sd.dacl else {
        return access::FILE_ALL;
    };
    //= MS-DTYP 2.5.3.2
    //# If SecurityDescriptor.Owner is in Token.Sids [...] Set
    //# Result.Allowed to READ_CONTROL | WRITE_DAC.
    //# [unless the DACL has an ACE for OWNER RIGHTS (S-1-3-4), which then
    //# says what the owner gets]
    let owner_rights = Sid::new(3, &[4]);
    let is_owner = sd.owner.as_ref().is_some_and(|o| token.has(o));
    let has_owner_rights = dacl.aces.iter().any(|a| a.sid() == Some(&owner_rights));
    let mut allowed = if is_owner && !has_owner_rights { access::READ_CONTROL | access::WRITE_DAC } else { 0 };
    let mut denied = 0;
    for ace in dacl.aces.iter().filter(|a| a.flags & ace_flags::INHERIT_ONLY == 0) {
        if !ace.sid().is_some_and(|s| token.has(s) || (is_owner && *s == owner_rights)) {
            continue;
        }
        let mask = map_access(ace.mask, 0);
        match ace.ace_type {
            ace_type::ACCESS_ALLOWED => allowed |= mask & !denied,
            ace_type::ACCESS_DENIED => denied |= mask & !allowed,
            _ => {}
        }
    }
    allowed
}

/// The new object's descriptor, inherited from its parent's (MS-DTYP
/// 2.5.3.4, CreateSecurityDescriptor with no creator descriptor):
/// owner and group from `token` (see [`Token`]); the parent's ACEs that a file
/// (OBJECT_INHERIT) or directory (CONTAINER_INHERIT, and OBJECT_INHERIT
/// as inherit-only to pass on) inherits, marked INHERITED. An ACE that
/// goes on propagating and names CREATOR OWNER/GROUP or generic rights
/// splits into the effective ACE (SID substituted, rights mapped) and an
/// inherit-only copy. `None` when nothing is inheritable (see
/// [`default_descriptor`]).
pub fn inherit(parent: &SecurityDescriptor, is_dir: bool, token: &Token) -> Option<SecurityDescriptor> {
    use ace_flags::{CONTAINER_INHERIT, INHERIT_ONLY, NO_PROPAGATE_INHERIT, OBJECT_INHERIT};
    let dacl = parent.dacl.as_ref()?;
    let (owner, group) = (token.owner.clone(), token.group.clone());
    //= MS-DTYP 2.5.3.4.2
    //# [INHERITED_ACE is set on what is inherited when the parent's DACL
    //# is auto-inherited (SE_DACL_AUTO_INHERITED), as is the child's
    //# SE_DACL_AUTO_INHERITED.]
    let auto = parent.control & control::DACL_AUTO_INHERITED != 0;
    let inherited = if auto { ace_flags::INHERITED } else { 0 };
    let effective = |a: &Ace| {
        let sid = match a.sid() {
            Some(s) if *s == Sid::creator_owner() => owner.clone(),
            Some(s) if *s == Sid::creator_group() => group.clone(),
            _ => return Ace { flags: inherited, mask: map_access(a.mask, 0), ..a.clone() },
        };
        Ace::new(a.ace_type, inherited, map_access(a.mask, 0), sid)
    };
    let mut aces = Vec::new();
    for a in &dacl.aces {
        let (oi, ci, np) = (a.flags & OBJECT_INHERIT != 0, a.flags & CONTAINER_INHERIT != 0, a.flags & NO_PROPAGATE_INHERIT != 0);
        if !is_dir {
            if oi {
                aces.push(effective(a));
            }
        } else if ci && np {
            aces.push(effective(a));
        } else if ci {
            let creator = a.sid().is_some_and(|s| *s == Sid::creator_owner() || *s == Sid::creator_group());
            let kept = a.flags & (OBJECT_INHERIT | CONTAINER_INHERIT) | inherited;
            if creator || map_access(a.mask, 0) != a.mask {
                aces.push(effective(a));
                aces.push(Ace { flags: kept | INHERIT_ONLY, ..a.clone() });
            } else {
                aces.push(Ace { flags: kept, ..a.clone() });
            }
        } else if oi && !np {
            aces.push(Ace { flags: OBJECT_INHERIT | INHERIT_ONLY | inherited, ..a.clone() });
        }
    }
    if aces.is_empty() {
        return None;
    }
    Some(SecurityDescriptor {
        control: if auto { control::DACL_AUTO_INHERITED } else { 0 },
        owner: Some(owner),
        group: Some(group),
        sacl: None,
        dacl: Some(Acl::new(aces)),
    })
}

/// What a new object gets when its directory passes nothing on: full
/// control for its creator and SYSTEM (Windows' default DACL).
pub fn default_descriptor(token: &Token) -> SecurityDescriptor {
    let aces = [token.owner.clone(), Sid::new(5, &[18])].into_iter().map(|s| Ace::new(ace_type::ACCESS_ALLOWED, 0, access::FILE_ALL, s)).collect();
    SecurityDescriptor { control: 0, owner: Some(token.owner.clone()), group: Some(token.group.clone()), sacl: None, dacl: Some(Acl::new(aces)) }
}

/// A descriptor as SET_INFO keeps it (MS-DTYP 2.5.3.4, as Windows and
/// Samba apply a set): generic rights in the ACEs that apply to the
/// object mapped to specific ones; SE_DACL_AUTO_INHERIT_REQ not kept, and
/// SE_DACL_AUTO_INHERITED only when it came with it.
pub fn as_set(mut sd: SecurityDescriptor) -> SecurityDescriptor {
    let c = sd.control;
    sd.control &= !control::DACL_AUTO_INHERIT_REQ;
    if c & control::DACL_AUTO_INHERIT_REQ == 0 {
        sd.control &= !control::DACL_AUTO_INHERITED;
    }
    for acl in [&mut sd.dacl, &mut sd.sacl].into_iter().flatten() {
        for a in acl.aces.iter_mut().filter(|a| a.flags & ace_flags::INHERIT_ONLY == 0) {
            a.mask = map_access(a.mask, 0);
        }
    }
    sd
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::*;
    use smbq_vfs::UnixOwner;

    fn token() -> Token {
        let (user, owner, group) = (user_sid("alice"), unix_user_sid(1000), unix_group_sid(100));
        Token { sids: vec![user.clone(), domain_sid(DOMAIN_USERS_RID), Sid::everyone(), owner.clone()], user, owner, group }
    }

    fn sd(aces: Vec<Ace>) -> SecurityDescriptor {
        SecurityDescriptor { owner: Some(user_sid("bob")), group: None, dacl: Some(Acl::new(aces)), ..Default::default() }
    }

    #[test]
    fn generic_access_is_mapped() {
        assert_eq!(map_access(GENERIC_READ, FILE_ALL), FILE_GENERIC_READ);
        assert_eq!(map_access(GENERIC_WRITE, FILE_ALL), FILE_GENERIC_WRITE);
        assert_eq!(map_access(GENERIC_EXECUTE, FILE_ALL), FILE_GENERIC_EXECUTE);
        assert_eq!(map_access(GENERIC_ALL, FILE_ALL), FILE_ALL);
        assert_eq!(map_access(GENERIC_READ | GENERIC_WRITE | DELETE, FILE_ALL), 0x0013_019F);
        assert_eq!(map_access(MAXIMUM_ALLOWED, 0x0012_00A9), 0x0012_00A9);
        assert_eq!(map_access(MAXIMUM_ALLOWED | FILE_READ_ATTRIBUTES, FILE_ALL), FILE_ALL);
        assert_eq!(map_access(FILE_READ_DATA, FILE_ALL), FILE_READ_DATA);
        assert_eq!(map_access(0, FILE_ALL), 0);
    }

    #[test]
    fn sids_are_stable() {
        assert_eq!(user_sid("Alice"), user_sid("alice"));
        assert_ne!(user_sid("alice"), user_sid("bob"));
        assert_eq!(user_sid("alice").to_string(), format!("S-1-5-21-1936548465-762538340-17-{}", 1000 + fnv1a(b"alice") % 0x7FFF_0000));
        assert_eq!(unix_user_sid(0).to_string(), "S-1-22-1-0");
        let t = Token::for_user("");
        assert_eq!(t.user, Sid::anonymous());
        assert_eq!(t.owner, unix_user_sid(rustix::process::geteuid().as_raw()));
        assert!(!t.has(&Sid::authenticated_users()));
        assert!(Token::for_user("x").has(&Sid::authenticated_users()));
    }

    #[test]
    fn access_check() {
        let t = token();
        // Deny before allow wins; allow before deny wins.
        let deny_first = sd(vec![
            Ace::new(ace_type::ACCESS_DENIED, 0, FILE_WRITE_DATA, Sid::everyone()),
            Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_ALL, user_sid("alice")),
        ]);
        assert_eq!(maximal(&deny_first, &t), FILE_ALL & !FILE_WRITE_DATA);
        let allow_first = sd(vec![
            Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_ALL, user_sid("alice")),
            Ace::new(ace_type::ACCESS_DENIED, 0, FILE_WRITE_DATA, Sid::everyone()),
        ]);
        assert_eq!(maximal(&allow_first, &t), FILE_ALL);
        // ACEs for others, and inherit-only ones, do nothing.
        let others = sd(vec![
            Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_ALL, user_sid("bob")),
            Ace::new(ace_type::ACCESS_ALLOWED, ace_flags::INHERIT_ONLY, FILE_ALL, Sid::everyone()),
            Ace::new(ace_type::ACCESS_ALLOWED, 0, GENERIC_READ, Sid::everyone()),
        ]);
        assert_eq!(maximal(&others, &t), FILE_GENERIC_READ);
        // The owner reads and changes the DACL whatever it says.
        let own = SecurityDescriptor { owner: Some(user_sid("alice")), ..sd(vec![Ace::new(ace_type::ACCESS_DENIED, 0, FILE_ALL, Sid::everyone())]) };
        assert_eq!(maximal(&own, &t), READ_CONTROL | WRITE_DAC);
        // An empty DACL grants nothing; NULL or no DACL everything.
        assert_eq!(maximal(&sd(vec![]), &t), 0);
        assert_eq!(maximal(&SecurityDescriptor { control: control::DACL_PRESENT, ..Default::default() }, &t), FILE_ALL);
        assert_eq!(maximal(&SecurityDescriptor::default(), &t), FILE_ALL);
    }

    #[test]
    fn descriptor_from_mode() {
        let sec = Security { descriptor: None, unix: Some(UnixOwner { uid: 1000, gid: 100, mode: 0o640 }) };
        let d = descriptor(&sec, false);
        assert_eq!(d.owner, Some(unix_user_sid(1000)));
        assert_eq!(d.group, Some(unix_group_sid(100)));
        let aces = &d.dacl.as_ref().unwrap().aces;
        assert_eq!(aces.len(), 2);
        assert_eq!(aces[0].mask, FILE_GENERIC_READ | FILE_GENERIC_WRITE | DELETE);
        assert_eq!(aces[1].mask, FILE_GENERIC_READ);
        // The token holds the owner's Unix SID.
        assert_eq!(maximal(&d, &token()), FILE_GENERIC_READ | FILE_GENERIC_WRITE | DELETE | READ_CONTROL | WRITE_DAC);
        let dir = descriptor(&Security { unix: Some(UnixOwner { uid: 0, gid: 0, mode: 0o755 }), ..sec.clone() }, true);
        assert_eq!(dir.dacl.as_ref().unwrap().aces[0].mask, FILE_ALL);
        assert_eq!(dir.dacl.as_ref().unwrap().aces[2].mask, FILE_GENERIC_READ | FILE_GENERIC_EXECUTE);
        // A kept descriptor wins.
        let kept = sd(vec![]);
        let with = Security { descriptor: Some(kept.to_bytes()), ..sec };
        assert_eq!(descriptor(&with, false), SecurityDescriptor { control: control::SELF_RELATIVE | control::DACL_PRESENT, ..kept });
    }

    #[test]
    fn only_kept_descriptors_limit() {
        let t = token();
        let mode = Security { descriptor: None, unix: Some(UnixOwner { uid: 1, gid: 1, mode: 0 }) };
        assert_eq!(allowed(&mode, &t), FILE_ALL);
        let kept = Security { descriptor: Some(sd(vec![Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_GENERIC_READ, Sid::everyone())]).to_bytes()), ..mode };
        assert_eq!(allowed(&kept, &t), FILE_GENERIC_READ);
    }

    #[test]
    fn inheritance() {
        use ace_flags::*;
        let t = token();
        let parent = sd(vec![
            Ace::new(ace_type::ACCESS_ALLOWED, OBJECT_INHERIT | CONTAINER_INHERIT, GENERIC_ALL, Sid::creator_owner()),
            Ace::new(ace_type::ACCESS_DENIED, OBJECT_INHERIT, FILE_WRITE_DATA, Sid::everyone()),
            Ace::new(ace_type::ACCESS_ALLOWED, CONTAINER_INHERIT, FILE_GENERIC_READ, Sid::everyone()),
            Ace::new(ace_type::ACCESS_ALLOWED, CONTAINER_INHERIT | NO_PROPAGATE_INHERIT, FILE_EXECUTE, Sid::everyone()),
            Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_ALL, Sid::everyone()),
        ]);
        let parent = SecurityDescriptor { control: control::DACL_AUTO_INHERITED, ..parent };
        let file = inherit(&parent, false, &t).unwrap();
        assert_eq!(file.control, control::DACL_AUTO_INHERITED);
        assert_eq!(file.owner.as_ref(), Some(&t.owner));
        assert_eq!(
            file.dacl.unwrap().aces,
            vec![
                Ace::new(ace_type::ACCESS_ALLOWED, INHERITED, FILE_ALL, t.owner.clone()),
                Ace::new(ace_type::ACCESS_DENIED, INHERITED, FILE_WRITE_DATA, Sid::everyone()),
            ]
        );
        let dir = inherit(&parent, true, &t).unwrap();
        assert_eq!(
            dir.dacl.unwrap().aces,
            vec![
                Ace::new(ace_type::ACCESS_ALLOWED, INHERITED, FILE_ALL, t.owner.clone()),
                Ace::new(ace_type::ACCESS_ALLOWED, OBJECT_INHERIT | CONTAINER_INHERIT | INHERIT_ONLY | INHERITED, GENERIC_ALL, Sid::creator_owner()),
                Ace::new(ace_type::ACCESS_DENIED, OBJECT_INHERIT | INHERIT_ONLY | INHERITED, FILE_WRITE_DATA, Sid::everyone()),
                Ace::new(ace_type::ACCESS_ALLOWED, CONTAINER_INHERIT | INHERITED, FILE_GENERIC_READ, Sid::everyone()),
                Ace::new(ace_type::ACCESS_ALLOWED, INHERITED, FILE_EXECUTE, Sid::everyone()),
            ]
        );
        assert_eq!(inherit(&sd(vec![Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_ALL, Sid::everyone())]), false, &t), None);
        // Without auto-inheritance no ACE is marked INHERITED.
        let plain = sd(vec![Ace::new(ace_type::ACCESS_ALLOWED, OBJECT_INHERIT, FILE_WRITE_DATA, Sid::creator_owner())]);
        let dir = inherit(&plain, true, &t).unwrap();
        assert_eq!(dir.control, 0);
        assert_eq!(dir.dacl.unwrap().aces, vec![Ace::new(ace_type::ACCESS_ALLOWED, OBJECT_INHERIT | INHERIT_ONLY, FILE_WRITE_DATA, Sid::creator_owner())]);
        let d = default_descriptor(&t);
        assert_eq!(d.dacl.unwrap().aces.iter().map(|a| a.sid().unwrap().to_string()).collect::<Vec<_>>(), vec![t.owner.to_string(), "S-1-5-18".to_string()]);
    }

    #[test]
    fn set_descriptors() {
        let mut s = sd(vec![
            Ace::new(ace_type::ACCESS_ALLOWED, 0, GENERIC_READ, Sid::everyone()),
            Ace::new(ace_type::ACCESS_ALLOWED, ace_flags::INHERIT_ONLY | ace_flags::OBJECT_INHERIT, GENERIC_ALL, Sid::creator_owner()),
        ]);
        s.control = control::DACL_AUTO_INHERITED | control::DACL_PROTECTED;
        let kept = as_set(s.clone());
        assert_eq!(kept.control, control::DACL_PROTECTED);
        let aces = kept.dacl.unwrap().aces;
        assert_eq!((aces[0].mask, aces[1].mask), (FILE_GENERIC_READ, GENERIC_ALL));
        s.control |= control::DACL_AUTO_INHERIT_REQ;
        assert_eq!(as_set(s).control, control::DACL_PROTECTED | control::DACL_AUTO_INHERITED);
    }

    #[test]
    fn owner_rights() {
        let t = token();
        let owner_rights = Sid::new(3, &[4]);
        let mut d = sd(vec![Ace::new(ace_type::ACCESS_ALLOWED, 0, FILE_READ_DATA, owner_rights.clone())]);
        d.owner = Some(t.user.clone());
        // OWNER RIGHTS replaces the owner's implicit rights.
        assert_eq!(maximal(&d, &t), FILE_READ_DATA);
        d.owner = Some(user_sid("bob"));
        assert_eq!(maximal(&d, &t), 0);
    }
}
