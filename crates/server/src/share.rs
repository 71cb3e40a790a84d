//! A share as the engine serves it: its file system (or IPC$'s pipes), who
//! may connect, and the views its read-only and POSIX users get.

use crate::config::{EncryptPolicy, ShareConfig};
use smbq_vfs::{FileSystem, PosixFs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub enum ShareKind {
    Disk(Arc<dyn FileSystem>),
    /// IPC$: named pipes (srvsvc).
    Ipc,
}

pub struct Share {
    pub name: String,
    pub kind: ShareKind,
    pub encrypt: EncryptPolicy,
    /// Who may connect (lower-case names); `None` = every user.
    users: Option<Vec<String>>,
    /// Who may connect but change nothing (lower-case names).
    read_only_users: Vec<String>,
    /// The share as its read-only users see it: the same root through a
    /// file system view that refuses every change.
    read_only_view: Option<Arc<Share>>,
    /// The files as POSIX opens see them, on a share with `posix`
    /// (smbq_vfs::PosixFs::posix_view).
    pub posix: Option<Arc<dyn FileSystem>>,
    /// What the share was made from (the default for IPC$).
    pub config: ShareConfig,
    /// A reload removed or changed the share: its tree connects end
    /// (requests on them get STATUS_NETWORK_NAME_DELETED).
    removed: AtomicBool,
}

impl Share {
    /// A share open to every user, as it is.
    pub(crate) fn new(name: &str, kind: ShareKind, encrypt: EncryptPolicy) -> Share {
        Share {
            name: name.into(),
            kind,
            encrypt,
            users: None,
            read_only_users: Vec::new(),
            read_only_view: None,
            posix: None,
            config: ShareConfig::default(),
            removed: AtomicBool::new(false),
        }
    }

    /// The share as `user` may use it, or `None` if `user` may not
    /// connect. User names compare case-insensitively, as logons do.
    pub fn for_user(self: &Arc<Share>, user: &str) -> Option<Arc<Share>> {
        let user = user.to_lowercase();
        if self.users.as_ref().is_some_and(|u| !u.contains(&user)) {
            return None;
        }
        match &self.read_only_view {
            Some(view) if self.read_only_users.contains(&user) => Some(Arc::clone(view)),
            _ => Some(Arc::clone(self)),
        }
    }

    /// A reload removed or changed the share since this view was taken.
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Open the share `s` describes (its root must be there). The share
    /// root is opened anew, its name checked.
    pub(crate) fn open(s: &ShareConfig) -> Result<Arc<Share>, String> {
        let fs: Arc<dyn FileSystem> = match &s.fs {
            Some(fs) => Arc::clone(fs),
            None => Arc::new(
                PosixFs::new(&s.path, s.read_only, s.case_sensitive)
                    .map_err(|e| format!("share {}: {}: {e}", s.name, s.path.display()))?,
            ),
        };
        if s.name.eq_ignore_ascii_case("IPC$") || s.name.is_empty() || s.name.len() > 80 {
            return Err(format!("invalid share name {:?}", s.name));
        }
        let lower = |v: &[String]| v.iter().map(|u| u.to_lowercase()).collect::<Vec<_>>();
        let posix_view = |fs: &Arc<dyn FileSystem>| if s.posix { fs.posix_view() } else { None };
        if s.posix && posix_view(&fs).is_none() {
            return Err(format!("share {}: its file system has no POSIX semantics", s.name));
        }
        let read_only_view = (!s.read_only_users.is_empty() && !s.read_only).then(|| {
            let fs = fs.read_only_view();
            Arc::new(Share { posix: posix_view(&fs), config: s.clone(), ..Share::new(&s.name, ShareKind::Disk(fs), s.encrypt) })
        });
        Ok(Arc::new(Share {
            users: s.users.as_deref().map(lower),
            read_only_users: lower(&s.read_only_users),
            read_only_view,
            posix: posix_view(&fs),
            config: s.clone(),
            ..Share::new(&s.name, ShareKind::Disk(fs), s.encrypt)
        }))
    }

    /// Mark the share, and its read-only view, removed.
    pub(crate) fn remove(&self) {
        self.removed.store(true, Ordering::Release);
        if let Some(v) = &self.read_only_view {
            v.removed.store(true, Ordering::Release);
        }
    }

    /// Whether the tree is read-only for whoever holds this view of it.
    pub fn read_only(&self) -> bool {
        self.fs().is_some_and(|fs| fs.read_only())
    }

    pub fn fs(&self) -> Option<&dyn FileSystem> {
        match &self.kind {
            ShareKind::Disk(fs) => Some(fs.as_ref()),
            ShareKind::Ipc => None,
        }
    }
}
