//! TODO: implementation (openat2 beneath the share root).
